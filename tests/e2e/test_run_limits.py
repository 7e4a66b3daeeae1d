"""A run's total-work budget end to end on a devhost process: a design over the app's limits refused when saved (400
INVALID_DEFINITION naming the path), each runtime limit reached by a run started over HTTP with lowered ``limits``
(RUN_LIMIT_EXCEEDED, the job view naming the limit), the limits of branches counted across the run, a priced tool
counted into the cost budget. Definitions in Azurite, offline model, the percent-change function tool.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change


@pytest.fixture(scope="module")
def jobs(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "limits" + uuid.uuid4().hex[:12],
        # The function family costs a cent a call here (TOOL_PRICES by family prefix).
        "TOOL_PRICES": '{"function": 0.01}',
    }
    host = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("limits-host"), env=env)
    host.start()
    client = JobClient(host)
    for body in (LOOP, FAN, OUTER, FAN_OF_LOOPS):
        resp = client.http.post("/api/workflows", json=body)
        assert resp.status_code == 201, resp.text
    yield client
    host.stop()


LOOP = {
    "id": "loop5",
    "name": "Loop of five",
    "nodes": [
        {"id": "again", "kind": "loop", "body": ["calc"], "max_iterations": 5},
        change("calc", {"value": 80}),
    ],
}
FAN = {
    "id": "fan3",
    "name": "Fan of three",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["a", "b", "c"]},
        change("a", {"value": 1}),
        change("b", {"value": 2}),
        change("c", {"value": 4}),
        {"id": "merge", "kind": "join", "after": ["a", "b", "c"]},
    ],
}
OUTER = {"id": "outer", "name": "Outer", "nodes": [{"id": "inner", "kind": "workflow", "workflow": "loop5"}]}
# Two branches that each loop; the join carries on past a failed branch, but a run limit fails the whole run.
FAN_OF_LOOPS = {
    "id": "fan-loops",
    "name": "Fan of loops",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["la", "lb"]},
        {"id": "la", "kind": "loop", "body": ["ca"], "max_iterations": 5},
        {"id": "lb", "kind": "loop", "body": ["cb"], "max_iterations": 5},
        change("ca", {"value": 1}),
        change("cb", {"value": 2}),
        {"id": "merge", "kind": "join", "after": ["la", "lb"], "on_failure": "continue"},
    ],
}


def nested_loops(depth: int) -> dict[str, Any]:
    """Loops of 20 iterations nested ``depth`` deep around one tool node."""
    nodes: list[dict[str, Any]] = []
    for level in range(depth):
        inner = f"l{level + 1}" if level + 1 < depth else "work"
        nodes.append({"id": f"l{level}", "kind": "loop", "body": [inner], "max_iterations": 20})
    return {"id": f"deep{depth}", "name": "Deep", "nodes": [*nodes, change("work", {"value": 80})]}


def started(jobs: JobClient, def_id: str, **body: Any) -> str:
    resp = jobs.http.post(f"/api/workflows/{def_id}/runs", json=body)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def test_nested_loops_over_the_limits_are_refused_when_saved(jobs: JobClient) -> None:
    resp = jobs.http.post("/api/workflows", json=nested_loops(8))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "INVALID_DEFINITION" and error["field"] == "nodes.8"  # the tool node: 20^8 runs
    limits = [e for e in error["errors"] if e["code"] == "RUN_LIMIT_EXCEEDED"]
    assert {e["path"] for e in limits} == {"nodes.8"}
    assert "25600000000 tool calls" in " ".join(e["message"] for e in limits)
    assert "RUN_MAX_NODE_RUNS" in error["message"]
    assert jobs.http.get("/api/workflows/deep8").status_code == 404  # nothing was saved
    assert jobs.http.post("/api/workflows", json=nested_loops(2)).status_code == 201  # 20 × 20 fits


@pytest.mark.parametrize(
    ("def_id", "limit", "value", "at", "calls"),
    [
        ("loop5", "max_node_runs", 4, "calc", 3),
        ("loop5", "max_tool_calls", 2, "calc", 2),
        ("fan3", "max_parallel_width", 2, "split", 0),
        ("fan3", "max_parts_alive", 2, "split", 0),
        ("outer", "max_depth", 0, "inner", 0),
    ],
)
def test_each_runtime_limit_fails_the_run_and_the_view_names_it(
    jobs: JobClient, def_id: str, limit: str, value: int, at: str, calls: int
) -> None:
    view = jobs.wait(started(jobs, def_id, limits={limit: value}))
    assert view["status"] == "failed", view
    error = view["error"]
    assert (error["code"], error["limit"], error["step_id"]) == ("RUN_LIMIT_EXCEEDED", limit, at), error
    assert f"run limit {limit} reached" in error["message"]
    assert view["run"]["limits"][limit] == value  # the run's limits, as the view shows them
    assert next(s for s in view["steps"] if s["id"] == at)["state"] == "failed"
    # How many tool calls ran before the stop: each costs a cent here (TOOL_PRICES).
    assert view["usage"]["total"]["estimated_cost"] == pytest.approx(calls * 0.01)


def test_the_default_limits_let_the_same_runs_finish(jobs: JobClient) -> None:
    for def_id in ("loop5", "fan3", "outer"):
        view = jobs.wait(started(jobs, def_id))
        assert view["status"] == "completed", view.get("error")
        assert view["run"]["limits"] == {
            "max_node_runs": 1000,
            "max_parts_alive": 64,
            "max_parallel_width": 16,
            "max_depth": 8,
            "max_tool_calls": 500,
        }


def test_a_branch_that_reaches_its_share_fails_the_whole_run(jobs: JobClient) -> None:
    # split runs (1 of 9), each branch gets 4: its loop node and 3 calls; the 4th call stops it.
    view = jobs.wait(started(jobs, "fan-loops", limits={"max_node_runs": 9}))
    assert view["status"] == "failed", view  # the join's on_failure: continue does not swallow a run limit
    assert (view["error"]["code"], view["error"]["limit"]) == ("RUN_LIMIT_EXCEEDED", "max_node_runs")
    assert "share" in view["error"]["message"]
    # With room for both branches (1 + 2 × 6 + merge) the same run completes.
    assert jobs.wait(started(jobs, "fan-loops", limits={"max_node_runs": 14}))["status"] == "completed"


def test_limits_above_the_apps_are_refused(jobs: JobClient) -> None:
    resp = jobs.http.post("/api/workflows/loop5/runs", json={"limits": {"max_node_runs": 5000}})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["field"]) == ("INVALID_INPUT", "limits.max_node_runs")
    assert "at most 1000" in error["message"]
    resp = jobs.http.post("/api/workflows/loop5/runs", json={"limits": {"max_nodes": 5}})
    assert resp.status_code == 400, resp.text
    assert (resp.json()["error"]["code"], resp.json()["error"]["field"]) == ("INVALID_REQUEST", "limits.max_nodes")


def test_a_priced_tool_counts_into_the_cost_budget(jobs: JobClient) -> None:
    view = jobs.wait(started(jobs, "loop5", constraints={"budget": {"max_estimated_cost": 0.025}}))
    assert view["status"] == "failed" and view["error"]["code"] == "BUDGET_EXCEEDED", view
    assert view["usage"]["total"]["estimated_cost"] == pytest.approx(0.02)  # two calls of 0.01; the third would pass
    view = jobs.wait(started(jobs, "loop5"))
    assert view["usage"]["total"]["estimated_cost"] == pytest.approx(0.05)
