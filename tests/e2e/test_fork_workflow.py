"""Forks of a workflow run on devhost (definitions in Azurite): the nodes that ended before the fork point are
carried over (a lookup, a condition, a parallel node with its branches, a join, a person's answer), pinned to
the origin's definition version; the fork's own history shows what ran again."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change, human

WORKFLOW: dict[str, Any] = {
    "id": "forked",
    "name": "Forked",
    "inputs": {"topic": {"type": "string"}, "old": {"type": "number"}},
    "nodes": [
        {"id": "docs", "kind": "step", "step": "consult_rag", "input": {"query": {"from": "input.topic"}}},
        {
            "id": "found",
            "kind": "condition",
            "after": ["docs"],
            "if": {"left": "docs.chunks", "op": "truthy"},
            "then": ["split"],
            "else": ["nothing"],
        },
        {"id": "split", "kind": "parallel", "branches": ["left", "right"]},
        change("left", {"from": "input.old"}),
        change("right", {"value": 0}),  # fails: its branch fails, the join goes on
        {"id": "merge", "kind": "join", "after": ["left", "right"], "on_failure": "continue"},
        human("ask", "Go on?", ["yes", "no"], after=["merge"]),
        change("final", {"from": "left.data.percent_change"}, after=["ask"]),
        change("nothing", {"value": 1}),
    ],
    "outputs": {"percent": {"from": "final.data.percent_change"}, "failed": {"from": "merge.failed"}},
}


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "forks" + uuid.uuid4().hex[:12],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("fork-runs-host"), env=env)
    proc.start(timeout_s=120)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def answer_yes(jobs: JobClient, job_id: str) -> dict[str, Any]:
    waiting = jobs.wait(job_id, {"waiting_for_user"}, timeout_s=180)["waiting"]
    assert waiting["step_id"] == "ask", waiting
    assert jobs.answer(job_id, "yes").status_code == 202
    return jobs.wait(job_id, timeout_s=180)


@pytest.fixture(scope="module")
def origin(jobs: JobClient) -> dict[str, Any]:
    assert jobs.http.post("/api/workflows", json=WORKFLOW).status_code == 201
    resp = jobs.http.post("/api/workflows/forked/runs", json={"inputs": {"topic": "refunds after 30 days", "old": 80}})
    assert resp.status_code == 202, resp.text
    view = answer_yes(jobs, resp.json()["id"])
    assert view["status"] == "completed", view.get("error")
    return view


def ran(host: DevHostProcess, job_id: str) -> Counter[str]:
    """The activities and sub-orchestrations that completed in the job's own history."""
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true"}
    events = host.client.get(host.webhook(f"instances/{job_id}"), params=params).json()["historyEvents"]
    kinds = ("TaskCompleted", "TaskFailed", "SubOrchestrationInstanceCompleted", "SubOrchestrationInstanceFailed")
    return Counter(str(e["FunctionName"]) for e in events if e["EventType"] in kinds)


def fork(jobs: JobClient, job_id: str, from_step: str) -> Any:
    body = {"from_step": from_step, "changes": {"constraints": {"max_tokens": 700}}}
    return jobs.http.post(f"/api/jobs/{job_id}/fork", json=body)


def test_a_fork_at_the_last_node_runs_only_that_node(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    resp = fork(jobs, origin["id"], "final")
    assert resp.status_code == 202, resp.text
    carried = set(resp.json()["carried_over"])
    assert carried == {"docs", "found", "left", "right", "split", "merge", "ask"}
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    # No lookup, no branch, no question again: the definition (pinned version) and the one tool call.
    assert ran(host, view["id"]) == Counter({"load_fork_base": 1, "load_definition": 1, "call_tool": 1})
    assert view["run"]["version"] == origin["run"]["version"]
    assert view["run"]["outputs"] == origin["run"]["outputs"] == {"percent": 300.0, "failed": ["right"]}
    states = {s["id"]: (s["state"], bool(s.get("carried_over"))) for s in view["steps"]}
    assert states["right"] == ("failed", True) and states["final"] == ("succeeded", False)
    assert states["nothing"] == ("skipped", False)


def test_a_fork_at_the_human_node_asks_again(host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]) -> None:
    resp = fork(jobs, origin["id"], "ask")
    assert resp.status_code == 202, resp.text
    view = answer_yes(jobs, resp.json()["id"])
    assert view["status"] == "completed", view.get("error")
    assert ran(host, view["id"]) == Counter({"load_fork_base": 1, "load_definition": 1, "call_tool": 1})
    assert view["run"]["outputs"] == origin["run"]["outputs"]


def test_a_fork_at_the_parallel_node_runs_its_branches_again(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    resp = fork(jobs, origin["id"], "split")
    assert resp.status_code == 202, resp.text
    assert set(resp.json()["carried_over"]) == {"docs", "found"}
    view = answer_yes(jobs, resp.json()["id"])
    assert view["status"] == "completed", view.get("error")
    assert ran(host, view["id"]) == Counter(
        {"load_fork_base": 1, "load_definition": 1, "workflow_part": 2, "call_tool": 1}
    )
    assert view["run"]["outputs"] == origin["run"]["outputs"]


def test_a_fork_at_a_branchs_entry_runs_only_that_branch(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    resp = fork(jobs, origin["id"], "left")
    assert resp.status_code == 202, resp.text
    # The other branch (it failed) is carried over with its part's result; the parallel node itself runs again.
    assert set(resp.json()["carried_over"]) == {"docs", "found", "right"}
    view = answer_yes(jobs, resp.json()["id"])
    assert view["status"] == "completed", view.get("error")
    # One part (the forked branch), then the node after the question: nothing of the other branch ran.
    assert ran(host, view["id"]) == Counter(
        {"load_fork_base": 1, "load_definition": 1, "workflow_part": 1, "call_tool": 1}
    )
    assert ran(host, f"{view['id']}:left") == Counter({"load_definition": 1, "call_tool": 1})
    assert view["run"]["outputs"] == origin["run"]["outputs"]
    states = {s["id"]: (s["state"], bool(s.get("carried_over"))) for s in view["steps"]}
    assert states["right"] == ("failed", True) and states["left"] == ("succeeded", False)
    edit = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "final", "changes": {"query": "x"}})
    assert edit.status_code == 400 and edit.json()["error"]["field"] == "changes.query"


BRANCHY: dict[str, Any] = {
    "id": "branchy",
    "name": "Branchy",
    "inputs": {"topic": {"type": "string"}},
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["lookup", "grow"]},
        {"id": "lookup", "kind": "step", "step": "consult_rag", "input": {"query": {"from": "input.topic"}}},
        {"id": "reread", "kind": "step", "step": "consult_rag", "after": ["lookup"],
         "input": {"query": {"value": "refund methods"}}},
        change("grow", {"value": 80}),
        change("grow2", {"from": "grow.data.percent_change"}, after=["grow"]),
        {"id": "merge", "kind": "join", "after": ["reread", "grow2"]},
        change("final", {"value": 50}, after=["merge"]),
    ],
    "outputs": {"query": {"from": "reread.query"}, "grew": {"from": "grow2.data.percent_change"}},
}  # fmt: skip
LOOPED: dict[str, Any] = {
    "id": "inloop",
    "name": "In a loop",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["again", "solo"]},
        {"id": "again", "kind": "loop", "body": ["tick"], "max_iterations": 2},
        change("tick", {"value": 50}),
        change("after", {"value": 20}, after=["again"]),
        change("solo", {"value": 80}),
        {"id": "merge", "kind": "join", "after": ["after", "solo"]},
    ],
}


def test_a_fork_inside_a_branch_carries_the_other_branch_and_the_nodes_before_it(
    host: DevHostProcess, jobs: JobClient
) -> None:
    assert jobs.http.post("/api/workflows", json=BRANCHY).status_code == 201
    resp = jobs.http.post("/api/workflows/branchy/runs", json={"inputs": {"topic": "refunds after 30 days"}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    body = {"from_step": "reread", "changes": {"query": "store credit"}}
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json=body)
    assert resp.status_code == 202, resp.text
    assert set(resp.json()["carried_over"]) == {"lookup", "grow", "grow2"}
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    # The root: the forked branch's part and the node after the join. The part: only the edited lookup.
    assert ran(host, view["id"]) == Counter(
        {"load_fork_base": 1, "load_definition": 1, "workflow_part": 1, "call_tool": 1}
    )
    assert ran(host, f"{view['id']}:lookup") == Counter({"load_definition": 1, "consult_rag": 1})
    assert view["run"]["outputs"] == {"query": "store credit", "grew": origin["run"]["outputs"]["grew"]}
    states = {s["id"]: (s["state"], bool(s.get("carried_over"))) for s in view["steps"]}
    assert states == {
        "split": ("succeeded", False),
        "lookup": ("succeeded", True),
        "reread": ("succeeded", False),
        "grow": ("succeeded", True),
        "grow2": ("succeeded", True),
        "merge": ("succeeded", False),
        "final": ("succeeded", False),
    }
    # A fork of that fork in the same branch: the other branch still comes from the origin, nothing of it runs.
    body = {"from_step": "reread", "changes": {"query": "refund methods"}}
    again = jobs.http.post(f"/api/jobs/{view['id']}/fork", json=body)
    assert again.status_code == 202, again.text
    twice = jobs.wait(again.json()["id"], timeout_s=180)
    assert twice["status"] == "completed", twice.get("error")
    assert ran(host, f"{twice['id']}:lookup") == Counter({"load_definition": 1, "consult_rag": 1})
    carried_from = {s["id"]: s.get("carried_from") for s in twice["steps"] if s.get("carried_over")}
    assert carried_from == {"lookup": origin["id"], "grow": origin["id"], "grow2": origin["id"]}
    assert twice["run"]["outputs"]["query"] == "refund methods"


def test_a_loop_inside_a_branch_is_carried_whole_and_its_body_is_no_fork_point(
    host: DevHostProcess, jobs: JobClient
) -> None:
    assert jobs.http.post("/api/workflows", json=LOOPED).status_code == 201
    resp = jobs.http.post("/api/workflows/inloop/runs", json={})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    refused = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "tick", "changes": {}})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_FORK_POINT", refused.text
    # The other branch's node: the loop's branch is carried over whole (its iterations are not run again).
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "solo", "changes": {}})
    assert resp.status_code == 202, resp.text
    assert set(resp.json()["carried_over"]) == {"again", "tick", "after"}
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert ran(host, view["id"]) == Counter({"load_fork_base": 1, "load_definition": 1, "workflow_part": 1})
    assert ran(host, f"{view['id']}:solo") == Counter({"load_definition": 1, "call_tool": 1})
    assert {s["id"]: s["state"] for s in view["steps"]} == {s["id"]: s["state"] for s in origin["steps"]}
    # At the loop (its branch's entry): the loop runs its body again; the other branch is carried over.
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "again", "changes": {}})
    assert resp.status_code == 202, resp.text
    assert set(resp.json()["carried_over"]) == {"solo"}
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert ran(host, f"{view['id']}:again") == Counter({"load_definition": 1, "call_tool": 3})  # 2 ticks, after
    # After the loop in its own branch: the loop and its iterations are carried over, only the node after it runs.
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "after", "changes": {}})
    assert resp.status_code == 202, resp.text
    assert set(resp.json()["carried_over"]) == {"again", "tick", "solo"}
    view = jobs.wait(resp.json()["id"], timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert ran(host, f"{view['id']}:again") == Counter({"load_definition": 1, "call_tool": 1})
    solo = host.client.get(host.webhook(f"instances/{view['id']}:solo"), params=host.system_code)
    assert solo.status_code == 404  # the carried branch never started


NESTED: dict[str, Any] = {
    "id": "nested",
    "name": "Nested",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["inner", "solo"]},
        {"id": "inner", "kind": "parallel", "branches": ["x", "y"]},
        change("x", {"value": 50}),
        change("y", {"value": 80}),
        {"id": "both", "kind": "join", "after": ["x", "y"]},
        change("solo", {"value": 40}),
        {"id": "merge", "kind": "join", "after": ["both", "solo"]},
    ],
}


def test_a_node_of_a_branch_with_a_parallel_of_its_own_is_no_fork_point(jobs: JobClient) -> None:
    saved = jobs.http.post("/api/workflows", json=NESTED)
    assert saved.status_code == 201, saved.text
    resp = jobs.http.post("/api/workflows/nested/runs", json={})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    refused = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "inner", "changes": {}})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_FORK_POINT", refused.text
    assert "fork at 'split'" in refused.json()["error"]["message"]
