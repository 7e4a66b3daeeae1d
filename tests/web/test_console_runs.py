"""A workflow run in the console as what it is: its graph with each node's state, a human node's question as a
choice (not an SQL approval) with its deadline, the rows and passages it decides on, the branches on the timeline;
the job header's duration, tokens and cost; "run again" for a failed job; the job list's search; phone widths.

Headless Chromium against a real devhost on embedded defaults, its definitions store on Azurite (loopback).
Screenshots go to $WEB_SCREENSHOT_DIR when set.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Page, expect

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import open_console, start_host, status_badge

# Any zone name Intl may print for the browser's zone (headless Chromium here runs in UTC).
ZONE = re.compile(r"\b(UTC|GMT[+-]?\d*|[A-Z]{3,4})\b")


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "web" + uuid.uuid4().hex[:12]}
    proc = start_host(tmp_path_factory.mktemp("web-runs-host"), env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def example_run(host: DevHostProcess, jobs: JobClient) -> str:
    """The README's example workflow (examples/runs), applied and run for region North: it waits at its human node."""
    for doc in yaml.safe_load_all((REPO_ROOT / "examples/runs/agents.yaml").read_text()):
        assert jobs.http.post("/api/agents", json=doc).status_code == 201
    workflow = yaml.safe_load((REPO_ROOT / "examples/runs/workflow.yaml").read_text())
    assert jobs.http.post("/api/workflows", json=workflow).status_code == 201
    resp = jobs.http.post("/api/workflows/returns-brief/runs", json={"inputs": {"region": "North"}})
    assert resp.status_code == 202, resp.text
    run_id = str(resp.json()["id"])
    jobs.wait(run_id, {"waiting_for_user"})
    return run_id


def node(page: Page, node_id: str) -> object:
    return page.locator(f"#detail .slot-graph g.g-node[data-node='{node_id}']")


def fits_the_width(page: Page) -> None:
    """Nothing makes the page itself wider than the window: wide tables scroll inside their own box."""
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_a_workflow_run_is_shown_as_what_it_is(
    page: Page, host: DevHostProcess, jobs: JobClient, example_run: str, shots: Path
) -> None:
    open_console(page, host, f"#job={example_run}")
    waiting = page.locator("#waiting")
    # The human node's question is a choice between its own options: no SQL box, no "skip the query".
    expect(waiting).to_have_attribute("data-form", "choice")
    expect(waiting.locator(".waiting-question")).to_contain_text("Write the brief?")
    expect(waiting.locator("#waiting-sql")).to_have_count(0)
    expect(waiting).not_to_contain_text("skip the query")
    expect(waiting.get_by_role("button", name="approve", exact=True)).to_be_visible()
    expect(waiting.get_by_role("button", name="reject", exact=True)).to_be_visible()
    # Its deadline, with the zone, and how long is left.
    deadline = page.locator("#waiting-deadline")
    expect(deadline).to_contain_text("Answer by")
    expect(deadline).to_contain_text(re.compile(r"\(in \d+ (h \d+ min|d \d+ h)\)"))
    assert ZONE.search(deadline.inner_text())
    # What happens then is said when the view says it (waiting.expiry_default: the answer taken, or None: it fails).
    asked = jobs.view(example_run)["waiting"]
    if "expiry_default" in asked:
        then = "the job fails" if asked["expiry_default"] is None else f"goes on with “{asked['expiry_default']}”"
        expect(page.locator("#waiting-expiry")).to_contain_text(then)
    else:
        expect(page.locator("#waiting-expiry")).to_have_count(0)
    # The title names the run and its inputs (the default too).
    expect(page.locator("#detail-heading")).to_have_text("workflow returns-brief v1 · old=80, region=North")
    # The graph: each node in its state.
    for node_id, state in [("figures", "succeeded"), ("policy", "succeeded"), ("both", "succeeded"), ("go", "waiting")]:
        expect(page.locator(f"#detail g.g-node[data-node='{node_id}']")).to_have_attribute("data-state", state)
    expect(page.locator("#detail g.g-node[data-node='brief']")).to_have_attribute("data-state", "pending")
    expect(page.locator("#detail g.g-node.g-state-waiting")).to_have_count(1)
    # The timeline draws the branches that ran (they are not "not started").
    for step_id in ("both", "figures", "policy", "merged"):
        row = page.locator(f"#timeline .tl-row[data-step-id='{step_id}']")
        expect(row.locator(".tl-bar")).to_have_count(1)
        expect(row.locator(".tl-summary")).not_to_have_text("not started")
    # What the person decides on: the rows of the SQL branch and the passages of the documents branch.
    results = page.locator("#detail .slot-results")
    expect(results.locator("article.result-sql[data-step-id='figures'] table.data")).to_be_visible()
    expect(results.locator("article.result-sql[data-step-id='figures']")).to_contain_text("SELECT")
    expect(results.locator("article.result-docs[data-step-id='policy'] details.chunk").first).to_be_attached()
    # A tool's output: its values as text, the raw JSON closed behind a disclosure.
    change = results.locator("article[data-step-id='change']")
    expect(change.locator(".result-values")).to_contain_text("percent change")
    expect(change.locator("details.raw-output")).not_to_have_attribute("open", "")
    # The question leads to them, and the page stays on the job.
    waiting.get_by_role("button", name="See the step results").click()
    expect(page.locator("#results-title")).to_be_in_viewport()
    expect(page).to_have_url(re.compile(f"#job={example_run}$"))
    # The log says which definition was loaded, never "None (0 tokens)".
    log = page.locator("#log-entries")
    expect(log).to_contain_text("load_definition: loaded workflow returns-brief v1")
    expect(log).not_to_contain_text("None (0 tokens)")
    # The header: how long, how many tokens, what it cost, times with their zone.
    expect(page.locator("#job-tokens")).to_contain_text(re.compile(r"\d+ \(\d[\d,]* in, \d[\d,]* out\)"))
    # Nothing this run did so far has a price on embedded defaults: the meters are counted, never shown as 0.
    unknown = len(jobs.view(example_run)["cost"]["unknown"])
    expect(page.locator("#job-cost")).to_have_text(f"price unknown for {unknown} meters so far")
    expect(page.locator("#job-took")).to_contain_text(re.compile(r"\d"))
    assert ZONE.search(page.locator("#job-detail .meta time").first.inner_text())
    page.screenshot(path=str(shots / "run-waiting-1280.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    fits_the_width(page)
    page.screenshot(path=str(shots / "run-waiting-390.png"), full_page=True)

    page.set_viewport_size({"width": 1280, "height": 900})
    waiting.get_by_role("button", name="approve", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#detail g.g-node[data-node='brief']")).to_have_attribute("data-state", "succeeded")
    expect(page.locator("#detail g.g-node[data-node='go']")).to_have_attribute("data-state", "succeeded")
    # The run's answer is the agent node's text: its citations are that node's, its markers lead to the passages.
    expect(page.locator("#citations .citation-document").first).to_be_visible()
    mark = page.locator("#final-answer button.cite-mark").first
    expect(mark).to_be_visible()
    mark.click()
    expect(page.locator("#detail .slot-results details.chunk[open]")).to_have_count(1)
    # The agent node's result is its answer as text, the JSON behind a disclosure.
    brief = page.locator("#detail .slot-results article[data-step-id='brief']")
    expect(brief.locator(".result-answer")).to_contain_text("30 days")
    expect(brief.locator("details.raw-output")).not_to_have_attribute("open", "")
    page.screenshot(path=str(shots / "run-done-1280.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    fits_the_width(page)
    # The plan table is wider than a phone: it scrolls sideways in its box, its last column reachable.
    wrap = page.locator("#detail .slot-steps .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth > w.clientWidth && getComputedStyle(w).overflowX === 'auto'")
    wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; }")
    last = page.locator("#steps-table thead th").last
    box, frame = last.bounding_box(), wrap.bounding_box()
    assert box is not None and frame is not None and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1
    # The whole graph fits a phone, scaled down.
    graph_box = page.locator("#detail .run-graph-wrap")
    assert graph_box.evaluate("g => g.scrollWidth <= g.clientWidth + 1")
    # The timeline's whole axis fits a phone: the last bar is in the card, not scrolled out of sight.
    chart = page.locator("#timeline .tl-chart")
    assert chart.evaluate("c => c.scrollWidth <= c.clientWidth + 1")
    page.screenshot(path=str(shots / "run-done-390.png"), full_page=True)


def test_a_failed_job_runs_again_with_a_larger_budget(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    question = "Which region had the most returns in Q3?"
    failed = jobs.submit(question, constraints={"budget": {"max_total_tokens": 50}, "max_tokens": 512})
    assert jobs.wait(failed)["status"] == "failed"
    open_console(page, host, f"#job={failed}")
    expect(status_badge(page)).to_have_text("Failed")
    card = page.locator("#run-again-card")
    card.locator("summary").click()
    budget = card.get_by_label("Token budget", exact=True)
    expect(budget).to_have_value(str(50 + 8 * 512))  # room for 8 more calls of the job's size
    expect(card.locator("#again-budget-was")).to_have_text("had 50, used 0")
    expect(card.get_by_label("Max tokens per step", exact=True)).to_have_value("512")
    page.screenshot(path=str(shots / "run-again-1280.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    fits_the_width(page)
    page.screenshot(path=str(shots / "run-again-390.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    budget.fill("50000")
    card.get_by_role("button", name="Run again").click()
    expect(page).to_have_url(re.compile(r"#job=(?!" + failed + r")[0-9a-f]+$"))
    again = page.url.rsplit("#job=", 1)[1]
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(again)
    assert view["question"] == question
    assert view["request"]["constraints"]["budget"]["max_total_tokens"] == 50000
    assert view["request"]["constraints"]["max_tokens"] == 512
    # A refused value is said in the form, and nothing starts.
    open_console(page, host, f"#job={failed}")
    card.locator("summary").click()
    card.get_by_label("Max tokens per step", exact=True).fill("0")
    card.get_by_role("button", name="Run again").click()
    expect(card.locator(".alert")).to_contain_text("The job was not started again")
    expect(card.locator(".alert")).to_contain_text("constraints.max_tokens")
    expect(page).to_have_url(re.compile(failed + "$"))


def test_a_failed_run_runs_again_with_its_inputs(
    page: Page, host: DevHostProcess, jobs: JobClient, example_run: str
) -> None:
    assert example_run  # the example workflow is applied
    body = {"inputs": {"region": "South"}, "constraints": {"budget": {"max_total_tokens": 50}}}
    resp = jobs.http.post("/api/workflows/returns-brief/runs", json=body)
    assert resp.status_code == 202, resp.text
    failed = str(resp.json()["id"])
    assert jobs.wait(failed)["status"] == "failed"
    open_console(page, host, f"#job={failed}")
    page.locator("#run-again-card summary").click()
    page.locator("#run-again-card").get_by_label("Token budget", exact=True).fill("")
    page.get_by_role("button", name="Run again").click()
    expect(page).to_have_url(re.compile(r"#job=(?!" + failed + r")[0-9a-f]+$"))
    again = page.url.rsplit("#job=", 1)[1]
    expect(page.locator("#detail-heading")).to_have_text("workflow returns-brief v1 · old=80, region=South")
    view = jobs.view(again)
    assert view["run"]["inputs"] == {"region": "South", "old": 80}


def test_the_job_list_has_room_and_a_search(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    ids = {w: jobs.submit(f"What does the returns policy say about {w}?") for w in words}
    for job_id in ids.values():
        jobs.wait(job_id)
    open_console(page, host, f"#job={ids['juliet']}")
    expect(status_badge(page)).to_have_text("Completed")
    # Its duration is read from the times the view knows to the millisecond (the status times may be whole seconds).
    expect(page.locator("#job-took")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    expect(page.locator("#job-took")).not_to_have_text("0 ms")
    # With a job open, the list comes first in the sidebar: at least ten jobs above the fold.
    items = page.locator("#job-list .job-item")
    expect(items.nth(9)).to_be_visible()
    assert items.nth(9).bounding_box()["y"] < 900  # type: ignore[index]
    search = page.get_by_label("Search jobs", exact=True)
    search.fill("policy FOXTROT")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("foxtrot")
    expect(page.locator("#job-search-count")).to_contain_text("1 of")
    page.screenshot(path=str(shots / "job-list-search-1280.png"))
    search.fill(ids["golf"][:12])
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("golf")
    search.fill("")
    expect(items.nth(9)).to_be_visible()


def test_the_tools_the_form_suggests_exist_in_the_default_app(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    open_console(page, host)
    page.get_by_label("Mode", exact=True).select_option("agent")
    hint = page.get_by_label("Allowed family tools", exact=True).get_attribute("placeholder") or ""
    suggested = re.findall(r"\b[a-z_]{2,}\.[a-z_]+\b", hint)
    assert suggested, hint
    resp = jobs.http.post("/api/jobs", json={"question": "Growth of revenue?", "mode": "agent", "tools": suggested})
    assert resp.status_code == 202, resp.text


def test_parallel_branches_show_their_real_states_and_the_human_node_is_a_choice(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    # The replay fixture's workflow: a fan-out whose right branch fails (0 -> 1 has no percent change), a join that
    # goes on, then a human node with approve/reject (an approval question of a human node, not an SQL approval).
    from tests.replay.record import WORKFLOW

    workflow = {**WORKFLOW, "id": "branches-" + uuid.uuid4().hex[:8]}
    assert jobs.http.post("/api/workflows", json=workflow).status_code == 201
    resp = jobs.http.post(f"/api/workflows/{workflow['id']}/runs", json={"inputs": {"old": 80}})
    assert resp.status_code == 202, resp.text
    run_id = str(resp.json()["id"])
    view = jobs.wait(run_id, {"waiting_for_user"})
    states = {s["id"]: s["state"] for s in view["steps"]}
    assert states["right"] == "failed" and states["left"] == "succeeded", states
    open_console(page, host, f"#job={run_id}")
    waiting = page.locator("#waiting")
    expect(waiting).to_have_attribute("data-form", "choice")
    expect(waiting.locator("#waiting-sql")).to_have_count(0)
    expect(waiting).not_to_contain_text("SQL")
    expect(waiting.get_by_role("button", name="approve", exact=True)).to_be_visible()
    # Every node on the timeline and in the graph in the state the view gives it: the failed branch is failed, the
    # one that ran is succeeded, neither "not started".
    for step_id, state in states.items():
        row = page.locator(f"#timeline .tl-row[data-step-id='{step_id}']")
        expect(row).to_have_attribute("data-state", state)
        expect(page.locator(f"#detail g.g-node[data-node='{step_id}']")).to_have_attribute("data-state", state)
    for branch in ("left", "right"):
        row = page.locator(f"#timeline .tl-row[data-step-id='{branch}']")
        expect(row.locator(".tl-bar")).to_have_count(1)
        expect(row.locator(".tl-summary")).not_to_have_text("not started")
    expect(page.locator("#timeline .tl-row[data-step-id='right'] .tl-bar")).to_have_attribute("data-state", "failed")


def test_a_node_kind_the_server_adds_shows_in_a_run_with_no_console_change(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    """A throwaway node kind ("gather", in the catalog and in the run's view) is drawn as what the view says."""
    import json

    from tests.replay.record import WORKFLOW

    workflow = {**WORKFLOW, "id": "gather-" + uuid.uuid4().hex[:8]}
    assert jobs.http.post("/api/workflows", json=workflow).status_code == 201
    resp = jobs.http.post(f"/api/workflows/{workflow['id']}/runs", json={"inputs": {"old": 80}})
    assert resp.status_code == 202, resp.text
    run_id = str(resp.json()["id"])
    jobs.wait(run_id, {"waiting_for_user"})

    def gather(node: dict[str, object]) -> dict[str, object]:
        if node.get("id") != "merge":
            return node
        return {"id": "merge", "kind": "gather", "after": node["after"], "title": "Gather the branches"}

    def with_gather(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:
            route.fulfill(response=resp)
            return
        body = resp.json()
        if "node_kinds" in body:  # the catalog
            # A kind made like every node (shared/definitions/models.py) has the "after" edge field of them all.
            join = next(k for k in body["node_kinds"] if k["kind"] == "join")
            body["node_kinds"].append({"kind": "gather", "schema": {}, "edges": join["edges"]})
        elif body.get("id") == run_id:  # the run's view
            body["run"]["graph"]["nodes"] = [gather(n) for n in body["run"]["graph"]["nodes"]]
            for step in body["steps"]:
                if step["id"] == "merge":
                    step["kind"] = "gather"
        route.fulfill(response=resp, body=json.dumps(body))

    page.route("**/api/catalog", with_gather)
    page.route(f"**/api/jobs/{run_id}?*", with_gather)
    page.route(f"**/api/jobs/{run_id}", with_gather)
    open_console(page, host, f"#job={run_id}")
    merge = page.locator("#detail g.g-node[data-node='merge']")
    expect(merge).to_have_attribute("data-kind", "gather")
    expect(merge).to_have_attribute("data-state", "succeeded")
    expect(merge).to_contain_text("gather")
    # Its edges are the graph's (after): both branches lead to it.
    for branch in ("left", "right"):
        expect(page.locator(f"#detail path[data-from='{branch}'][data-to='merge']")).to_have_count(1)
    expect(page.locator("#steps-table")).to_contain_text("gather")
    expect(page.locator("#timeline .tl-row[data-step-id='merge']")).to_have_attribute("data-state", "succeeded")
    # The console keeps polling the run: a poll still being routed when the page closes must not fail the teardown.
    page.unroute_all(behavior="ignoreErrors")
