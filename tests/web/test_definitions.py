"""The definitions pages of the console: agents and workflows made through the forms, the workflow graph,
validation problems at their fields, JSON export → import, and a run followed in the job view.

Headless Chromium against a real devhost running the app on embedded defaults, its definitions store on
Azurite (the npm emulator on loopback), each module with its own table.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from devhost.storage.azurite import Azurite
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


def rename(page: Page, node_id: str, new_id: str) -> None:
    field = node_card(page, node_id).get_by_label("Node id", exact=True)
    field.fill(new_id)
    field.dispatch_event("change")
    expect(node_card(page, new_id)).to_have_count(1)


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
    page.get_by_role("button", name="Add workflow input", exact=True).click()
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
    # Renaming a node renames it where it is named (the "after" of brief), so the edge stays.
    rename(page, "docs", "lookup")
    expect(node_card(page, "brief").get_by_label("After", exact=True)).to_have_value("lookup")
    expect(graph_edge(page, "lookup", "brief", "after")).to_have_count(1)
    rename(page, "lookup", "docs")
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
    # A node that runs after the condition loses that edge when the condition's card is removed.
    add_node(page, "tool")
    node_card(page, "tool").get_by_label("After", exact=True).fill("condition")
    expect(graph_edge(page, "condition", "tool", "after")).to_have_count(1)
    cond.get_by_role("button", name="Remove condition", exact=True).click()
    expect(node_card(page, "tool").get_by_label("After", exact=True)).to_have_value("")
    node_card(page, "tool").get_by_role("button", name="Remove tool", exact=True).click()
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

    # An edit is a new version; an old version opens in the form and saving it would make it the newest.
    unsaved = page.locator(".dirty-badge")
    expect(unsaved).to_be_hidden()

    # A sub-workflow node suggests the inputs of the workflow it names (here this one's: topic).
    add_node(page, "workflow")
    sub = node_card(page, "workflow")
    sub.get_by_label("Sub-workflow", exact=True).fill("policy-brief")
    sub.get_by_label("Sub-workflow", exact=True).dispatch_event("change")
    expect(sub.locator("datalist option[value='topic']")).to_have_count(1)
    sub.get_by_role("button", name="Add input", exact=True).click()
    expect(node_card(page, "workflow").get_by_label("Input: name", exact=True)).to_have_value("topic")
    expect(graph_node(page, "workflow")).to_have_attribute("data-kind", "workflow")
    expect(unsaved).to_be_visible()
    node_card(page, "workflow").get_by_role("button", name="Remove workflow", exact=True).click()
    expect(unsaved).to_be_hidden()
    page.get_by_label("Name", exact=True).fill("Policy brief, second")
    expect(unsaved).to_have_text("Unsaved changes")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Saved version")).to_have_text("Saved version 2.")
    expect(unsaved).to_be_hidden()
    expect(page.get_by_text("Version 2 of 2")).to_be_visible()
    page.get_by_role("button", name="Version 1", exact=True).click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("Policy brief")
    expect(page.get_by_text("Showing version 1; saving it makes it version 3.")).to_be_visible()
    expect(page.get_by_role("button", name="Run version 1")).to_be_visible()

    # Archive: refused for the agent the workflow names (409, said in the page), done for the workflow.
    page.goto("/api/ui/#agents/writer")
    page.wait_for_selector("html[data-defs='agents/writer']", state="attached")
    page.get_by_role("button", name="Archive…", exact=True).click()
    page.get_by_role("button", name="Yes, archive it", exact=True).click()
    expect(page.locator(".problems")).to_contain_text("DEFINITION_REFERENCED")
    page.goto("/api/ui/#workflows/policy-brief")
    page.wait_for_selector("html[data-defs='workflows/policy-brief']", state="attached")
    page.get_by_role("button", name="Archive…", exact=True).click()
    page.get_by_role("button", name="Yes, archive it", exact=True).click()
    page.wait_for_selector("html[data-defs='workflows']", state="attached")
    expect(page.get_by_role("status").filter(has_text="Archived")).to_contain_text("Archived workflow policy-brief")
    expect(page.locator(".defs-table tr[data-id='policy-brief']")).to_have_count(0)
    assert jobs.http.get("/api/workflows/policy-brief").status_code == 404


def test_validation_problems_are_shown_at_their_fields_and_nodes(page: Page, host: DevHostProcess) -> None:
    open_page(page, host, "workflows:new", "workflows:new")
    page.get_by_label("Id", exact=True).fill("Not A Slug")
    page.get_by_label("Name", exact=True).fill("Checked")
    add_node(page, "agent")
    card = node_card(page, "agent")
    card.get_by_label("Agent", exact=True).fill("ghost")
    card.locator("[data-path='nodes.0.input.prompt']").fill("Say hello")

    # A field's shape: the id, at the Id field; nothing is saved.
    page.get_by_role("button", name="Save", exact=True).click()
    id_field = page.get_by_label("Id", exact=True)
    expect(id_field).to_have_attribute("aria-invalid", "true")
    expect(page.locator("[data-field='id'] .field-error")).to_contain_text("INVALID_FIELD")
    expect(page.locator(".problem-list li[data-path='id']")).to_have_count(1)
    expect(page.locator("html")).to_have_attribute("data-defs", "workflows:new")

    # A reference: the unknown agent, at the node's Agent field, and the node marked in the graph.
    id_field.fill("checked")
    page.get_by_role("button", name="Save", exact=True).click()
    agent_field = card.get_by_label("Agent", exact=True)
    expect(agent_field).to_have_attribute("aria-invalid", "true")
    expect(card.locator("[data-field='nodes.0.agent'] .field-error")).to_contain_text("there is no agent 'ghost'")
    expect(card.locator("[data-field='nodes.0.agent'] .field-error")).to_contain_text("UNKNOWN_AGENT")
    expect(id_field).not_to_have_attribute("aria-invalid", "true")
    expect(graph_node(page, "agent")).to_have_class(re.compile(r"\bg-invalid\b"))
    # The summary's entry takes the focus to the field.
    page.locator(".problem-list li[data-code='UNKNOWN_AGENT'] button").click()
    expect(agent_field).to_be_focused()

    # A graph problem: an "after" naming no node, at the node's After field.
    card.get_by_label("After", exact=True).fill("nowhere")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(card.locator("[data-field='nodes.0.after'] .field-error")).to_contain_text("UNKNOWN_NODE")

    # A JSON field that does not parse is refused before it is sent, at the field.
    page.goto("/api/ui/#agents:new")
    page.wait_for_selector("html[data-defs='agents:new']", state="attached")
    schema = page.get_by_label("Output schema (JSON Schema)", exact=True)
    schema.fill("{not json")
    expect(page.locator("[data-field='output_schema'] .field-error")).to_contain_text("Not valid JSON")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".problem-list li[data-code='INVALID_JSON']")).to_have_count(1)
    expect(page.locator("html")).to_have_attribute("data-defs", "agents:new")


RICH = {
    "id": "round-trip",
    "name": "Round trip",
    "description": "Every node kind the form edits.",
    "inputs": {
        "region": {"type": "string", "description": "a region"},
        "limit": {"type": "integer", "required": False, "default": 3},
    },
    "nodes": [
        {
            "id": "docs",
            "kind": "step",
            "step": "consult_rag",
            "input": {"query": {"from": "input.region"}, "top_k": {"from": "input.limit"}},
        },
        {"id": "fan", "kind": "parallel", "after": ["docs"], "branches": ["left", "right"]},
        {
            "id": "left",
            "kind": "tool",
            "tool": "function.percent_change",
            "input": {"old": {"value": 80}, "new": {"value": 100}},
        },
        {
            "id": "right",
            "kind": "human",
            "question": {"template": "Go on with {input.region}?"},
            "options": ["approve", "reject"],
        },
        {"id": "both", "kind": "join", "after": ["left", "right"], "on_failure": "continue"},
        {
            "id": "check",
            "kind": "condition",
            "after": ["both"],
            "if": {"left": "left.success", "op": "truthy"},
            "then": ["done"],
        },
        {
            "id": "done",
            "kind": "step",
            "step": "generate_response",
            "input": {"question": {"template": "Sum up {input.region}"}},
        },
    ],
    "outputs": {"answer": {"from": "done.answer"}},
}


def test_json_export_then_import_round_trips_a_workflow(page: Page, host: DevHostProcess, tmp_path: Path) -> None:
    from tests.jobs.jobclient import JobClient

    jobs = JobClient(host)
    resp = jobs.http.post("/api/workflows", json=RICH)
    assert resp.status_code == 201, resp.text
    original = get(host, jobs, "workflows", "round-trip")["definition"]

    open_page(page, host, "workflows/round-trip", "workflows/round-trip")
    # The graph of the saved workflow: every node, the parallel branches and the condition's "then".
    expect(page.locator("#df-graph g.g-node")).to_have_count(len(RICH["nodes"]))
    expect(graph_edge(page, "fan", "left", "branch")).to_have_count(1)
    expect(graph_edge(page, "fan", "right", "branch")).to_have_count(1)
    expect(graph_edge(page, "check", "done", "then")).to_have_count(1)
    expect(graph_node(page, "right")).to_have_attribute("data-kind", "human")
    # Layered: every edge of this ring-free graph points down, and no two nodes share a place.
    places = page.eval_on_selector_all(
        "#df-graph g.g-node",
        "gs => gs.map(g => [g.dataset.node, ...g.getAttribute('transform').match(/[-\\d.]+/g).map(Number)])",
    )
    where = {node: (x, y) for node, x, y in places}
    assert len(set(where.values())) == len(RICH["nodes"])
    edges = page.eval_on_selector_all("#df-graph path.g-edge", "ps => ps.map(p => [p.dataset.from, p.dataset.to])")
    assert len(edges) == 7 and all(where[dst][1] > where[src][1] for src, dst in edges)

    page.get_by_role("button", name="Export this version", exact=True).click()
    exported = json.loads(page.get_by_label("Definition JSON", exact=True).input_value())
    assert exported == original
    with page.expect_download() as download:
        page.get_by_role("link", name="Download", exact=True).click()
    saved_file = tmp_path / "exported.json"
    download.value.save_as(saved_file)
    assert json.loads(saved_file.read_text()) == original

    # The file, under another id, imported from the file picker: a new workflow with the same content.
    copy = {**json.loads(saved_file.read_text()), "id": "round-trip-copy"}
    copy_file = tmp_path / "copy.json"
    copy_file.write_text(json.dumps(copy))
    page.get_by_label("Load from a file", exact=True).set_input_files(str(copy_file))
    expect(page.get_by_label("Definition JSON", exact=True)).to_have_value(re.compile("round-trip-copy"))
    page.get_by_role("button", name="Import and save", exact=True).click()
    page.wait_for_selector("html[data-defs='workflows/round-trip-copy']", state="attached")
    imported = get(host, jobs, "workflows", "round-trip-copy")
    assert imported["definition"] == {**original, "id": "round-trip-copy"} and imported["version"] == 1

    # The same id imported again with a change: a new version of it; text that is not JSON is refused.
    changed = {**copy, "name": "Round trip, renamed"}
    page.get_by_label("Definition JSON", exact=True).fill(json.dumps(changed))
    page.get_by_role("button", name="Import and save", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Saved version")).to_have_text("Saved version 2.")
    assert get(host, jobs, "workflows", "round-trip-copy")["definition"]["name"] == "Round trip, renamed"
    # Imported on the "new" page, an id that exists is a new version of it (as the CLI's apply does).
    page.goto("/api/ui/#workflows:new")
    page.wait_for_selector("html[data-defs='workflows:new']", state="attached")
    page.get_by_label("Definition JSON", exact=True).fill(json.dumps({**original, "description": "Edited"}))
    page.get_by_role("button", name="Import and save", exact=True).click()
    page.wait_for_selector("html[data-defs='workflows/round-trip']", state="attached")
    expect(page.get_by_role("status").filter(has_text="round-trip")).to_have_text(
        "Saved workflow round-trip (version 2)."
    )
    assert get(host, jobs, "workflows", "round-trip")["definition"] == {**original, "description": "Edited"}
    page.get_by_label("Definition JSON", exact=True).fill("{")
    page.get_by_role("button", name="Import and save", exact=True).click()
    expect(page.locator("#df-json-error")).to_contain_text("INVALID_JSON")


def test_a_run_started_with_typed_inputs_is_followed_in_the_job_view(page: Page, host: DevHostProcess) -> None:
    from tests.jobs.jobclient import JobClient

    jobs = JobClient(host)
    body = {
        "id": "web-run",
        "name": "Web run",
        "inputs": {"topic": {"type": "string"}, "top": {"type": "integer", "required": False, "default": 2}},
        "nodes": [
            {
                "id": "docs",
                "kind": "step",
                "step": "consult_rag",
                "input": {"query": {"from": "input.topic"}, "top_k": {"from": "input.top"}},
            },
            {
                "id": "answer",
                "kind": "step",
                "step": "generate_response",
                "after": ["docs"],
                "input": {"question": {"template": "What does the policy say about {input.topic}?"}},
            },
        ],
        "outputs": {"answer": {"from": "answer.answer"}},
    }
    assert jobs.http.post("/api/workflows", json=body).status_code == 201
    open_page(page, host, "workflows/web-run", "workflows/web-run")
    run_card = page.locator("section", has=page.get_by_role("heading", name="Start a run"))
    expect(run_card.get_by_label("top (optional)", exact=True)).to_have_attribute("type", "number")

    # A required input left empty: the API's 400 is shown at that input.
    run_card.get_by_role("button", name="Run version 1").click()
    topic = run_card.get_by_label("topic", exact=True)
    expect(topic).to_have_attribute("aria-invalid", "true")
    expect(run_card.locator("[data-field='inputs.topic'] .field-error")).to_contain_text("INVALID_INPUT")

    topic.fill("refunds after 30 days")
    run_card.get_by_label("top (optional)", exact=True).fill("3")
    run_card.get_by_role("button", name="Run version 1").click()
    expect(page).to_have_url(re.compile(r"#job=[0-9a-f]+$"))
    run_id = page.url.rsplit("#job=", 1)[1]
    # The same job view as any job: the run's nodes as its steps, to the end.
    expect(page.locator("main.layout")).to_be_visible()
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(run_id)
    assert view["run"]["id"] == "web-run" and view["run"]["version"] == 1
    assert {s["id"] for s in view["steps"]} >= {"docs", "answer"}
    expect(page.locator("#job-detail")).to_contain_text("workflow web-run v1")


def test_a_question_asked_in_a_branch_is_answered_in_the_job_view(page: Page, host: DevHostProcess) -> None:
    from tests.jobs.jobclient import JobClient
    from tests.runs.shapes import change, human

    jobs = JobClient(host)
    nodes = [
        {"id": "split", "kind": "parallel", "branches": ["review", "calc"]},
        human("review", "Publish the figures?", ["yes", "no"]),
        change("calc", {"value": 80}),
        {"id": "merge", "kind": "join", "after": ["review", "calc"]},
    ]
    body = {"id": "web-branch", "name": "Web branch", "nodes": nodes, "outputs": {"said": {"from": "review.answer"}}}
    assert jobs.http.post("/api/workflows", json=body).status_code == 201
    run_id = jobs.http.post("/api/workflows/web-branch/runs", json={}).json()["id"]
    jobs.wait(run_id, {"waiting_for_user"})
    open_console(page, host, f"#job={run_id}")
    waiting = page.locator("#waiting")
    expect(waiting.locator(".waiting-question")).to_have_text("Publish the figures?")
    expect(waiting).to_contain_text("Question review-q1@review · step review · asked in review")
    waiting.get_by_role("button", name="yes", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    assert jobs.view(run_id)["run"]["outputs"] == {"said": "yes"}


def test_a_team_made_through_its_form_runs_into_the_job_view(page: Page, host: DevHostProcess) -> None:
    from tests.jobs.jobclient import JobClient

    jobs = JobClient(host)
    for agent_id in ("north-analyst", "south-analyst", "combiner"):
        # A workflow's agent may look up only what its tools name; with none it could only ask a person.
        tools = ["execute_azure_sql", "consult_rag"]
        body = {"id": agent_id, "name": agent_id, "instructions": "Answer briefly.", "tools": tools}
        assert jobs.http.post("/api/agents", json=body).status_code == 201
    open_page(page, host, "teams:new", "teams:new")
    page.get_by_label("Id", exact=True).fill("analysts")
    page.get_by_label("Name", exact=True).fill("Analysts")
    page.get_by_label("Member agents", exact=True).fill("north-analyst, south-analyst")
    # The strategy decides which fields the form has.
    expect(page.get_by_label("Aggregator agent", exact=True)).to_have_count(0)
    page.get_by_label("Strategy", exact=True).select_option("parallel")
    page.get_by_label("Aggregator agent", exact=True).fill("north-analyst")
    page.get_by_role("button", name="Save", exact=True).click()
    # The aggregator may not be a member: said at the aggregator field.
    expect(page.locator("[data-field='strategy.aggregator'] .field-error")).to_contain_text("ROLE_IS_MEMBER")
    page.get_by_label("Aggregator agent", exact=True).fill("combiner")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector("html[data-defs='teams/analysts']", state="attached")
    team = get(host, jobs, "teams", "analysts")["definition"]
    assert team["agents"] == ["north-analyst", "south-analyst"]
    assert team["strategy"] == {"type": "parallel", "aggregator": "combiner"}

    # The list shows it; its run form asks for the team's one input, the task.
    page.get_by_role("link", name="← Teams").click()
    page.wait_for_selector("html[data-defs='teams']", state="attached")
    expect(page.locator(".defs-table tr[data-id='analysts']")).to_contain_text("Analysts")
    page.get_by_role("link", name="analysts", exact=True).click()
    page.wait_for_selector("html[data-defs='teams/analysts']", state="attached")
    page.get_by_label("task", exact=True).fill("Compare returns in the North and the South in Q3")
    page.get_by_role("button", name="Run version 1").click()
    expect(page).to_have_url(re.compile(r"#job=[0-9a-f]+$"))
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(page.url.rsplit("#job=", 1)[1])
    assert view["run"]["kind"] == "team" and view["run"]["id"] == "analysts"


def test_a_page_opened_without_the_key_says_so_and_loads_once_the_key_is_entered(
    page: Page, host: DevHostProcess
) -> None:
    page.goto("/api/ui/#teams")
    page.wait_for_selector("html[data-defs='teams']", state="attached")
    expect(page.locator(".defs-list .alert")).to_contain_text("UNAUTHORIZED")
    expect(page.get_by_role("link", name="Teams", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.locator("main.layout")).to_be_hidden()
    assert host.keys is not None
    page.get_by_label("Function key", exact=True).fill(host.keys.function)
    page.get_by_label("Function key", exact=True).dispatch_event("change")
    expect(page.locator(".defs-list .alert")).to_be_hidden()
    expect(page.locator(".defs-list")).to_contain_text("Teams")
    # Back to the jobs page through the navigation.
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("main.layout")).to_be_visible()
    expect(page.locator("#defs-view")).to_be_hidden()


# ----- the drag-and-drop builder (web/builder.js) -------------------------------------------------------


def palette(page: Page, kind: str) -> Locator:
    return page.locator(f"#df-builder [data-palette-kind='{kind}']")


def drop_kind(page: Page, kind: str, onto: str | None = None) -> None:
    """Drag a kind from the palette onto a node of the graph, or onto an empty corner of it."""
    if onto:
        palette(page, kind).drag_to(graph_node(page, onto))
    else:
        palette(page, kind).drag_to(page.locator("#df-graph"), target_position={"x": 4, "y": 4})


def edge_hit(page: Page, src: str, dst: str, kind: str) -> Locator:
    return page.locator(f"#df-graph path.g-edge-hit[data-from='{src}'][data-to='{dst}'][data-edge='{kind}']")


def map_value(card: Locator, index: int, name: str, text: str) -> None:
    """Give the node's first input the name `name` and the literal value `text` (JSON), through its form."""
    card.get_by_role("button", name="Add input", exact=True).click()
    card.get_by_label("Input: name", exact=True).fill(name)
    card.get_by_label("Input: name", exact=True).dispatch_event("change")
    card.get_by_label(f"Input {name}: given as", exact=True).select_option("value")
    card.locator(f"[data-path='nodes.{index}.input.{name}']").fill(text)


def test_a_workflow_built_by_dragging_saves_its_nodes_and_after_edges(
    page: Page, host: DevHostProcess, shots: Path
) -> None:
    from tests.jobs.jobclient import JobClient

    jobs = JobClient(host)
    open_page(page, host, "workflows:new", "workflows:new")
    page.get_by_label("Id", exact=True).fill("dragged")
    page.get_by_label("Name", exact=True).fill("Built by dragging")

    # A kind dropped on the graph is a node with a fresh id, its form open at the id to rename it.
    drop_kind(page, "tool")
    expect(graph_node(page, "tool")).to_have_attribute("data-kind", "tool")
    expect(node_card(page, "tool").get_by_label("Node id", exact=True)).to_be_focused()
    drop_kind(page, "tool")
    expect(graph_node(page, "tool2")).to_have_attribute("data-kind", "tool")
    # Dropped onto a node, the new node follows it.
    drop_kind(page, "human", onto="tool2")
    expect(graph_edge(page, "tool2", "human", "after")).to_have_count(1)
    # A drag from one node onto another connects them: the target runs after the source.
    graph_node(page, "tool").drag_to(graph_node(page, "tool2"))
    expect(graph_edge(page, "tool", "tool2", "after")).to_have_count(1)
    expect(page.locator("#df-builder-msg")).to_have_text("Connected tool → tool2 (after).")
    # The forms show the same edges (one draft).
    expect(node_card(page, "tool2").get_by_label("After", exact=True)).to_have_value("tool")
    expect(node_card(page, "human").get_by_label("After", exact=True)).to_have_value("tool2")

    # A connection that closes a ring is refused, saying why; nothing changes.
    graph_node(page, "human").drag_to(graph_node(page, "tool"))
    expect(page.locator("#df-builder-error")).to_have_text(
        "Not connected: human → tool would make a cycle (human → tool → tool2 → human). "
        "To repeat nodes, use a loop node. [CYCLE]"
    )
    expect(page.locator("#df-graph path.g-edge")).to_have_count(2)
    expect(node_card(page, "tool").get_by_label("After", exact=True)).to_have_value("")

    # An edge clicked is selected; "Remove edge" takes it away, and undo brings it back.
    # (A straight edge's box has no width, so the click goes to its middle by coordinates.)
    box = edge_hit(page, "tool", "tool2", "after").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.locator(".builder-selection")).to_contain_text("Selected: edge tool → tool2 (after).")
    page.get_by_role("button", name="Remove edge", exact=True).click()
    expect(graph_edge(page, "tool", "tool2", "after")).to_have_count(0)
    expect(node_card(page, "tool2").get_by_label("After", exact=True)).to_have_value("")
    page.get_by_role("button", name="Undo graph edit", exact=True).click()
    expect(graph_edge(page, "tool", "tool2", "after")).to_have_count(1)

    edge_hit(page, "tool2", "human", "after").focus()
    page.screenshot(path=str(shots / "defs-builder.png"))

    # The kind fields, through the forms; then save and read it back through the API.
    for index, node_id in enumerate(["tool", "tool2"]):
        card = node_card(page, node_id)
        card.get_by_label("Tool", exact=True).fill("function.growth_rate")
        map_value(card, index, "values", "[100, 120]")
    node_card(page, "human").get_by_label("Question", exact=True).fill("Publish the growth rates?")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector("html[data-defs='workflows/dragged']", state="attached")
    nodes = get(host, jobs, "workflows", "dragged")["definition"]["nodes"]
    assert [(n["id"], n["kind"], n.get("after")) for n in nodes] == [
        ("tool", "tool", None),
        ("tool2", "tool", ["tool"]),
        ("human", "human", ["tool2"]),
    ]
    assert nodes[1]["input"] == {"values": {"value": [100, 120]}}
    expect(graph_edge(page, "tool2", "human", "after")).to_have_count(1)


def test_the_builder_by_keyboard_adds_connects_refuses_and_removes(page: Page, host: DevHostProcess) -> None:
    open_page(page, host, "workflows:new", "workflows:new")
    # "Add node" without a mouse: a palette kind pressed with Enter.
    for kind in ("condition", "tool", "tool"):
        palette(page, kind).focus()
        page.keyboard.press("Enter")
    expect(page.locator("#df-graph g.g-node")).to_have_count(3)
    expect(node_card(page, "tool2").get_by_label("Node id", exact=True)).to_be_focused()
    expect(graph_node(page, "condition")).to_have_attribute("role", "button")

    # "Connect" without a mouse: From, To, Edge. From a condition, "auto" is its "then".
    connect = page.get_by_role("group", name="Connect two nodes")

    def link(src: str, dst: str, edge: str = "auto") -> None:
        connect.get_by_label("From", exact=True).select_option(src)
        connect.get_by_label("To", exact=True).select_option(dst)
        connect.get_by_label("Edge", exact=True).select_option(edge)
        connect.get_by_role("button", name="Connect", exact=True).click()

    link("condition", "tool")
    expect(graph_edge(page, "condition", "tool", "then")).to_have_count(1)
    expect(node_card(page, "condition").get_by_label("Then nodes", exact=True)).to_have_value("tool")
    link("condition", "tool2", "else")
    expect(graph_edge(page, "condition", "tool2", "else")).to_have_count(1)
    link("tool", "tool2")
    expect(graph_edge(page, "tool", "tool2", "after")).to_have_count(1)
    # Refused, each with its reason: a ring, an edge already there, an edge the source kind does not have.
    error = page.locator("#df-builder-error")
    link("tool2", "condition")
    expect(error).to_have_text(
        "Not connected: tool2 → condition would make a cycle (tool2 → condition → tool2). "
        "To repeat nodes, use a loop node. [CYCLE]"
    )
    link("tool", "tool2")
    expect(error).to_have_text("Not connected: tool → tool2 is already an edge (after). [DUPLICATE_EDGE]")
    link("tool", "condition", "branch")
    expect(error).to_contain_text("Only a parallel node has branch edges; tool is a tool node. [INVALID_EDGE]")
    expect(page.locator("#df-graph path.g-edge")).to_have_count(3)

    # Delete on a focused edge removes it; Delete on a focused node removes it and every edge naming it.
    edge_hit(page, "tool", "tool2", "after").focus()
    expect(page.locator(".builder-selection")).to_contain_text("Selected: edge tool → tool2 (after).")
    page.keyboard.press("Delete")
    expect(graph_edge(page, "tool", "tool2", "after")).to_have_count(0)
    expect(error).to_be_hidden()
    graph_node(page, "tool").focus()
    page.keyboard.press("Delete")
    expect(graph_node(page, "tool")).to_have_count(0)
    expect(node_card(page, "tool")).to_have_count(0)
    expect(node_card(page, "condition").get_by_label("Then nodes", exact=True)).to_have_value("")
    expect(page.locator("#df-builder-msg")).to_have_text("Removed node tool and its edges.")
    # Ctrl+Z on the graph undoes it; Enter on a node opens its form.
    page.locator("#df-graph").press("Control+z")
    expect(graph_edge(page, "condition", "tool", "then")).to_have_count(1)
    graph_node(page, "tool").focus()
    page.keyboard.press("Enter")
    expect(node_card(page, "tool").get_by_label("Node id", exact=True)).to_be_focused()
    # Undo covers graph edits only: after a form edit it stops rather than lose that edit.
    node_card(page, "tool").get_by_label("Title", exact=True).fill("First")
    page.locator("#df-graph").press("Control+z")
    expect(error).to_contain_text("Not undone: the form changed the workflow since the last graph edit")
    expect(node_card(page, "tool").get_by_label("Title", exact=True)).to_have_value("First")
    expect(page.get_by_role("button", name="Undo graph edit", exact=True)).to_be_disabled()


def test_a_kind_the_server_adds_shows_in_the_editor_with_no_console_change(page: Page, host: DevHostProcess) -> None:
    """The kinds come from GET /api/catalog: a throwaway step and node kind added there appear in every list."""

    def with_new_kinds(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:  # before the key is entered
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        catalog["step_kinds"].append(
            {
                "kind": "open_ticket",
                "description": "Open a support ticket.",
                "orchestrated": False,
                "input_schema": {"type": "object", "properties": {"ticket": {"type": "string"}, "notes": {}}},
                "editable_fields": [],
            }
        )
        catalog["node_kinds"].append({"kind": "notify", "schema": {}})
        # A throwaway operator in the condition's schema: the form lists it too.
        catalog["node_schema"]["$defs"]["Condition"]["properties"]["op"]["enum"].append("matches")
        route.fulfill(json=catalog)

    page.route("**/api/catalog", with_new_kinds)
    open_page(page, host, "workflows:new", "workflows:new")
    assert "notify" in page.get_by_label("Kind of the new node", exact=True).locator("option").all_inner_texts()
    expect(page.locator(".builder-palette [data-palette-kind='notify']")).to_have_count(1)
    add_node(page, "step")
    card = page.locator("[data-node-card]").last
    kinds = card.get_by_label("Step kind", exact=True)
    assert {"consult_rag", "execute_azure_sql", "open_ticket"} <= set(kinds.locator("option").all_inner_texts())
    kinds.select_option("open_ticket")
    expect(page.locator("[data-node-card]").last).to_contain_text("ticket")
    add_node(page, "condition")
    ops = page.locator("[data-node-card]").last.get_by_label("Operator", exact=True)
    assert {"eq", "exists", "matches"} <= set(ops.locator("option").all_inner_texts())


# A throwaway node kind with edge fields of its own, known only to the catalog: a "race" starts its "runners" (a new
# edge type, the one a drag from it makes) and walks its "laps" in order and back (a chain, as a loop's body).
RACE: dict[str, Any] = {
    "kind": "race",
    "schema": {},
    "fork_edits": None,
    "edges": [
        {"field": "after", "type": "after", "direction": "in", "label": "after", "auto": False, "required": False},
        {
            "field": "runners",
            "type": "runner",
            "direction": "out",
            "label": "runners",
            "auto": True,
            "required": True,
        },
        {"field": "laps", "type": "lap", "direction": "chain", "label": "laps", "auto": False, "required": False},
    ],
    "summary_field": None,
}


def test_a_node_kind_with_new_edges_is_drawn_and_connected_with_no_console_change(
    page: Page, host: DevHostProcess
) -> None:
    """Which node fields are edges comes from GET /api/catalog: a throwaway kind's edges are drawn and offered."""

    def with_race(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:  # before the key is entered
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        catalog["node_kinds"].append(RACE)
        route.fulfill(json=catalog)

    page.route("**/api/catalog", with_race)
    open_page(page, host, "workflows:new", "workflows:new")
    for kind in ("race", "tool", "tool", "tool"):
        palette(page, kind).focus()
        page.keyboard.press("Enter")
    expect(page.locator("#df-graph g.g-node")).to_have_count(4)
    connect = page.get_by_role("group", name="Connect two nodes")
    edge_select = connect.get_by_label("Edge", exact=True)
    # The Edge choices are the catalog's edge types, the new ones included.
    assert {"auto", "after", "runners", "laps", "branch (parallel)"} <= set(
        edge_select.locator("option").all_inner_texts()
    )
    expect(page.locator("#df-builder-hint")).to_contain_text("from a race node a runner edge")

    def link(src: str, dst: str, edge: str = "auto") -> None:
        connect.get_by_label("From", exact=True).select_option(src)
        connect.get_by_label("To", exact=True).select_option(dst)
        edge_select.select_option(edge)
        connect.get_by_role("button", name="Connect", exact=True).click()

    # "auto" from a race is its runner edge; a lap is a chain, drawn in order and back to the race.
    link("race", "tool")
    expect(graph_edge(page, "race", "tool", "runner")).to_have_count(1)
    expect(page.locator("#df-builder-msg")).to_have_text("Connected race → tool (runner).")
    link("race", "tool2", "lap")
    link("race", "tool3", "lap")
    expect(graph_edge(page, "race", "tool2", "lap")).to_have_count(1)
    expect(graph_edge(page, "tool2", "tool3", "lap")).to_have_count(1)
    expect(graph_edge(page, "tool3", "race", "repeat")).to_have_count(1)
    # The race's form (the page has none of its own for the kind) edits the same fields.
    race_card = node_card(page, "race")
    expect(race_card.get_by_label("runners nodes", exact=True)).to_have_value("tool")
    expect(race_card.get_by_label("laps nodes", exact=True)).to_have_value("tool2, tool3")
    # A tool has no runner edges: refused, naming the kind that has.
    link("tool", "tool2", "runner")
    expect(page.locator("#df-builder-error")).to_contain_text("Only a race node has runner edges; tool is a tool node.")
    # Renaming a node renames it in the race's edge fields; removing one takes its edges away.
    rename(page, "tool", "starter")
    expect(graph_edge(page, "race", "starter", "runner")).to_have_count(1)
    edge_hit(page, "tool2", "tool3", "lap").focus()
    page.keyboard.press("Delete")
    expect(graph_edge(page, "tool2", "tool3", "lap")).to_have_count(0)
    expect(graph_edge(page, "tool2", "race", "repeat")).to_have_count(1)
    graph_node(page, "starter").focus()
    page.keyboard.press("Delete")
    expect(page.locator("#df-graph path.g-edge[data-edge='runner']")).to_have_count(0)


def test_renaming_a_node_rewrites_its_references_by_the_servers_syntax(page: Page, host: DevHostProcess) -> None:
    """Which fields hold references and how one names its node come from the catalog's "references"."""
    open_page(page, host, "workflows:new", "workflows:new")
    for kind in ("tool", "tool", "condition"):
        add_node(page, kind)
    card = node_card(page, "tool2")
    for name, shape, text in (
        ("x", "template", "Compare {tool.data} with { tool.data.1 } and {tools.x}"),
        ("y", "from", "tool.data"),
    ):
        card.get_by_role("button", name="Add input", exact=True).click()
        card.get_by_label("Input: name", exact=True).last.fill(name)
        card.get_by_label("Input: name", exact=True).last.dispatch_event("change")
        card.get_by_label(f"Input {name}: given as", exact=True).select_option(shape)
        card.locator(f"[data-path='nodes.1.input.{name}']").fill(text)
    node_card(page, "condition").get_by_label("If value", exact=True).fill("tool.data")
    node_card(page, "condition").get_by_label("Then nodes", exact=True).fill("tool")
    rename(page, "tool", "first")
    card = node_card(page, "tool2")
    expect(card.locator("[data-path='nodes.1.input.x']")).to_have_value(
        "Compare {first.data} with { first.data.1 } and {tools.x}"
    )
    expect(card.locator("[data-path='nodes.1.input.y']")).to_have_value("first.data")
    expect(node_card(page, "condition").get_by_label("If value", exact=True)).to_have_value("first.data")
    expect(node_card(page, "condition").get_by_label("Then nodes", exact=True)).to_have_value("first")


# A throwaway node kind known only to the catalog, with scalar fields of kinds the models use: its form and its
# new-node defaults come from its JSON schema.
PAGER: dict[str, Any] = {
    "kind": "pager",
    "schema": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "kind": {"const": "pager", "type": "string"},
            "after": {"type": "array", "items": {"type": "string"}},
            "channel": {"type": "string", "title": "Channel", "description": "Where the page goes."},
            "retries": {"type": "integer", "title": "Retries", "minimum": 2},
            "urgency": {"type": "string", "title": "Urgency", "enum": ["low", "high"], "default": "high"},
            "quiet": {"type": "boolean", "title": "Quiet", "default": False},
            "message": {"title": "Message", "oneOf": [{"$ref": "#/$defs/Ref"}, {"$ref": "#/$defs/Template"}]},
        },
        "required": ["id", "kind", "channel", "retries", "message"],
    },
    "fork_edits": None,
    "edges": [RACE["edges"][0]],
    "summary_field": "channel",
}


def saved_nodes(page: Page) -> list[dict[str, Any]]:
    """The nodes of the draft the Save button sends (whatever the server then says of it)."""
    with page.expect_request(lambda r: r.method in ("POST", "PUT") and "/api/workflows" in r.url) as sent:
        page.get_by_role("button", name="Save", exact=True).click()
    body = sent.value.post_data_json
    assert isinstance(body, dict)
    return list(body["nodes"])


def test_a_node_kind_with_new_scalar_fields_gets_a_form_with_no_console_change(
    page: Page, host: DevHostProcess
) -> None:
    """A kind the console has no form for is drawn from its schema in the catalog: a field per property, by type."""

    def with_pager(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:  # before the key is entered
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        catalog["node_kinds"].append(PAGER)
        route.fulfill(json=catalog)

    page.route("**/api/catalog", with_pager)
    open_page(page, host, "workflows:new", "workflows:new")
    add_node(page, "pager")
    card = node_card(page, "pager")
    # New-node defaults: the required fields at an empty value of their type (an integer at its minimum).
    expect(card.get_by_label("Channel", exact=True)).to_have_value("")
    expect(card.get_by_label("Retries", exact=True)).to_have_value("2")
    expect(card.locator("[data-path='nodes.0.message']")).to_have_value("")
    # The optional fields: a choice lists the enum (at its default), a boolean is a check box.
    urgency = card.get_by_label("Urgency", exact=True)
    assert urgency.locator("option").all_inner_texts() == ["low", "high"]
    expect(card.get_by_label("Quiet", exact=True)).not_to_be_checked()
    card.get_by_label("Channel", exact=True).fill("ops")
    urgency.select_option("low")
    card.get_by_label("Quiet", exact=True).check()
    card.locator("[data-path='nodes.0.message']").fill("Paged {input.x}")
    # The draft sent on save holds what the form says, under the schema's own names.
    assert saved_nodes(page)[0] == {
        "id": "pager",
        "kind": "pager",
        "channel": "ops",
        "retries": 2,
        "message": {"template": "Paged {input.x}"},
        "urgency": "low",
        "quiet": True,
    }


def test_a_join_is_drawn_from_its_schema_with_the_servers_choices(page: Page, host: DevHostProcess) -> None:
    """A join's form has no hand-made options: its choices are the enums of its schema in the catalog."""
    open_page(page, host, "workflows:new", "workflows:new")
    add_node(page, "join")
    card = node_card(page, "join")
    assert card.get_by_label("Wait for", exact=True).locator("option").all_inner_texts() == ["all", "any"]
    assert card.get_by_label("On failure", exact=True).locator("option").all_inner_texts() == ["fail", "continue"]
    card.get_by_label("Wait for", exact=True).select_option("any")
    assert saved_nodes(page)[0] == {"id": "join", "kind": "join", "wait": "any"}


def test_a_field_or_strategy_the_server_adds_to_a_known_kind_shows_with_no_console_change(
    page: Page, host: DevHostProcess
) -> None:
    """A known node kind and the team form draw their fields from the catalog's schemas, not from a copy."""

    def with_new_fields(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:  # before the key is entered
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        tool = catalog["node_schema"]["$defs"]["ToolNode"]
        tool["properties"]["priority"] = {"type": "integer", "title": "Priority", "minimum": 1}
        tool["required"].append("priority")
        team = catalog["team_schema"]
        team["$defs"]["Vote"] = {
            "type": "object",
            "properties": {"type": {"const": "vote"}, "quorum": {"type": "integer", "title": "Quorum"}},
            "required": ["type", "quorum"],
        }
        team["properties"]["strategy"]["oneOf"].append({"$ref": "#/$defs/Vote"})
        catalog["definitions"]["team_strategies"].append("vote")
        route.fulfill(json=catalog)

    page.route("**/api/catalog", with_new_fields)
    open_page(page, host, "workflows:new", "workflows:new")
    add_node(page, "tool")
    expect(node_card(page, "tool").get_by_label("Priority", exact=True)).to_have_value("1")
    open_page(page, host, "teams:new", "teams:new")
    expect(page.get_by_label("Quorum", exact=True)).to_have_count(0)
    page.get_by_label("Strategy", exact=True).select_option("vote")
    expect(page.get_by_label("Quorum", exact=True)).to_have_value("0")
    expect(page.get_by_label("Aggregator agent", exact=True)).to_have_count(0)
    page.get_by_label("Strategy", exact=True).select_option("supervisor")
    expect(page.get_by_label("Supervisor agent", exact=True)).to_have_value("")
    expect(page.get_by_label("Max rounds", exact=True)).to_have_value("")
