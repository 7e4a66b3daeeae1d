"""The console's "Re-run from here" on a workflow run's nodes (web/fork.js) in headless Chromium against devhost:
each node's form offers what the catalog says a fork may edit of its kind (a step node: its step kind's fields; an
agent node: its prompt), and the fork runs with the edit. Definitions on Azurite (loopback)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import job_id_of, open_console, start_host, status_badge

PROMPT = "What does the policy say about store credit?"
SCOUT = {"id": "scout", "name": "Scout", "instructions": "Find the policy.", "tools": ["consult_rag"]}
WORKFLOW: dict[str, Any] = {
    "id": "webfork",
    "name": "Web fork",
    "nodes": [
        {"id": "scout", "kind": "agent", "agent": "scout", "input": {"prompt": {"value": "refunds after 30 days"}}},
        {"id": "docs", "kind": "step", "step": "consult_rag", "after": ["scout"],
         "input": {"query": {"value": "store credit"}}},
        {"id": "pct", "kind": "tool", "tool": "function.percent_change", "after": ["docs"],
         "input": {"old": {"value": 80}, "new": {"value": 100}}},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "webfork" + uuid.uuid4().hex[:10]}
    proc = start_host(tmp_path_factory.mktemp("web-fork-runs-host"), env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def run_id(jobs: JobClient) -> str:
    for kind, body in (("agents", SCOUT), ("workflows", WORKFLOW)):
        assert jobs.http.post(f"/api/{kind}", json=body).status_code == 201
    resp = jobs.http.post("/api/workflows/webfork/runs", json={})
    assert resp.status_code == 202, resp.text
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    return str(view["id"])


def test_a_runs_nodes_offer_their_input_edits(page: Page, host: DevHostProcess, jobs: JobClient, run_id: str) -> None:
    open_console(page, host, f"#job={run_id}")
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#fork-steps li")).to_have_count(3)
    # A step node: its step kind's fields, starting from what it ran with.
    page.locator("#fork-steps button[data-fork-point='docs']").click()
    query = page.locator(".fork-form #edit-query")
    expect(query).to_have_value("store credit")
    query.fill("damaged items")
    page.get_by_role("button", name="Re-run from docs").click()
    expect(page.locator("#forked-from")).to_contain_text(run_id)
    fork_id = job_id_of(page)
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(fork_id)
    assert view["forked_from"]["input"] == {"query": "damaged items"}
    assert [s["output"]["query"] for s in view["steps"] if s["id"] == "docs"] == ["damaged items"]
    expect(page.locator("#fork-steps li", has_text="(carried over)")).to_have_count(1)  # the agent node
    # An agent node: its prompt (the catalog's field for the kind); a family tool node: no input to edit.
    page.goto(f"/api/ui/#job={run_id}")
    page.locator("#fork-steps button[data-fork-point='pct']").click()
    expect(page.locator(".fork-form textarea, .fork-form input[id^='edit-']")).to_have_count(0)
    page.locator("#fork-steps button[data-fork-point='scout']").click()
    prompt = page.locator(".fork-form #edit-prompt")
    expect(prompt).to_be_visible()
    prompt.fill(PROMPT)
    page.get_by_role("button", name="Re-run from scout").click()
    expect(page.locator("#forked-from")).to_contain_text(run_id)
    expect(status_badge(page)).to_have_text("Completed")
    assert jobs.view(job_id_of(page))["forked_from"]["input"] == {
        "prompt": "What does the policy say about store credit?"
    }
