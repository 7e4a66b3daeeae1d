"""The definitions pages of the console: agents and workflows made through the forms, the workflow graph,
validation problems at their fields, JSON export → import, and a run followed in the job view.

Headless Chromium against a real devhost running the app on embedded defaults, its definitions store on
Azurite (the npm emulator on loopback), each module with its own table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from devhost.azurite import Azurite
from tests.devhost.hostproc import DevHostProcess
from tests.web.console import open_console, start_host, status_badge


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "web" + uuid.uuid4().hex[:12]}
    proc = start_host(tmp_path_factory.mktemp("web-defs-host"), env)
    yield proc
    proc.stop()


def node_card(page: Page, node_id: str) -> Locator:
    return page.locator(f"[data-node-card='{node_id}']")


def graph_node(page: Page, node_id: str) -> Locator:
    return page.locator(f"#df-graph g.g-node[data-node='{node_id}']")


def graph_edge(page: Page, src: str, dst: str, kind: str) -> Locator:
    return page.locator(f"#df-graph path.g-edge[data-from='{src}'][data-to='{dst}'][data-edge='{kind}']")


def get(host: DevHostProcess, jobs: Any, plural: str, def_id: str) -> dict[str, Any]:
    resp = jobs.http.get(f"/api/{plural}/{def_id}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def open_page(page: Page, host: DevHostProcess, fragment: str, ready: str) -> None:
    """The console with the key entered, on a definitions page once it has loaded."""
    open_console(page, host)
    page.goto(f"/api/ui/#{fragment}")
    page.wait_for_selector(f"html[data-defs='{ready}']", state="attached")


def create_agent(page: Page, host: DevHostProcess, agent_id: str, name: str) -> None:
    open_page(page, host, "agents:new", "agents:new")
    page.get_by_label("Id", exact=True).fill(agent_id)
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Instructions", exact=True).fill("Answer in one short paragraph.")
    page.get_by_label("Max tokens", exact=True).fill("512")
    page.get_by_label("Tools", exact=True).fill("consult_rag")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(f"html[data-defs='agents/{agent_id}']", state="attached")
    expect(page.get_by_role("status").filter(has_text="Created agent")).to_contain_text(f"{agent_id} (version 1)")


def add_node(page: Page, kind: str) -> None:
    page.get_by_label("Kind of the new node", exact=True).select_option(kind)
    page.get_by_role("button", name="Add node", exact=True).click()


def test_an_agent_and_a_workflow_made_through_the_forms_with_a_graph_that_follows_the_edits(
    page: Page, host: DevHostProcess, shots: Path
) -> None:
    from tests.jobs.jobclient import JobClient

    jobs = JobClient(host)
    create_agent(page, host, "writer", "Writer")
    agent = get(host, jobs, "agents", "writer")["definition"]
    assert agent["instructions"] == "Answer in one short paragraph." and agent["tools"] == ["consult_rag"]
    assert agent["constraints"]["max_tokens"] == 512

    page.goto("/api/ui/#workflows:new")
    page.wait_for_selector("html[data-defs='workflows:new']", state="attached")
    page.get_by_label("Id", exact=True).fill("policy-brief")
    page.get_by_label("Name", exact=True).fill("Policy brief")
    page.get_by_role("button", name="Add input", exact=True).click()
    page.get_by_label("Input input1: name", exact=True).fill("topic")
    page.get_by_label("Input input1: name", exact=True).dispatch_event("change")

    add_node(page, "step")
    docs = node_card(page, "step")
    docs.get_by_label("Node id", exact=True).fill("docs")
    docs.get_by_label("Node id", exact=True).dispatch_event("change")
    docs = node_card(page, "docs")
    docs.get_by_role("button", name="Add input", exact=True).click()
    docs.get_by_label("Input query: given as", exact=True).select_option("from")
    docs.locator("[data-path='nodes.0.input.query']").fill("input.topic")

    add_node(page, "agent")
    brief = node_card(page, "agent")
    brief.get_by_label("Node id", exact=True).fill("brief")
    brief.get_by_label("Node id", exact=True).dispatch_event("change")
    brief = node_card(page, "brief")
    brief.get_by_label("Agent", exact=True).fill("writer")
    brief.locator("[data-path='nodes.1.input.prompt']").fill("Brief me on {input.topic}")

    # The graph shows both nodes, coloured by kind, and no edge yet.
    expect(graph_node(page, "docs")).to_have_attribute("data-kind", "step")
    expect(graph_node(page, "brief")).to_have_attribute("data-kind", "agent")
    expect(page.locator("#df-graph path.g-edge")).to_have_count(0)
    # An "after" typed into the form is an edge at once.
    brief.get_by_label("After", exact=True).fill("docs")
    expect(graph_edge(page, "docs", "brief", "after")).to_have_count(1)

    # A condition with then/else edges; removing it takes its edges away.
    add_node(page, "condition")
    cond = node_card(page, "condition")
    cond.get_by_label("After", exact=True).fill("brief")
    cond.get_by_label("If value", exact=True).fill("brief.text")
    cond.get_by_label("Then nodes", exact=True).fill("docs")
    expect(graph_edge(page, "condition", "docs", "then")).to_have_count(1)
    expect(page.locator("#df-graph g.g-node")).to_have_count(3)
    page.screenshot(path=str(shots / "defs-graph-editing.png"), full_page=True)
    cond.get_by_role("button", name="Remove condition", exact=True).click()
    expect(page.locator("#df-graph g.g-node")).to_have_count(2)
    expect(page.locator("#df-graph path.g-edge")).to_have_count(1)

    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector("html[data-defs='workflows/policy-brief']", state="attached")
    saved = get(host, jobs, "workflows", "policy-brief")
    assert saved["definition"]["inputs"] == {"topic": {"type": "string"}}
    assert [n["id"] for n in saved["definition"]["nodes"]] == ["docs", "brief"]
    assert saved["definition"]["nodes"][1]["after"] == ["docs"]
    assert saved["definition"]["nodes"][1]["input"] == {"prompt": {"template": "Brief me on {input.topic}"}}
    # The saved workflow reopens with the same graph.
    page.reload()
    page.wait_for_selector("html[data-defs='workflows/policy-brief']", state="attached")
    expect(graph_edge(page, "docs", "brief", "after")).to_have_count(1)
    expect(page.get_by_text("Version 1 of 1")).to_be_visible()
    page.screenshot(path=str(shots / "defs-workflow-saved.png"), full_page=True)
