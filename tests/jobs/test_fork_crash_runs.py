"""Kill -9 during a fork of a supervisor team at a round, and of a workflow run at a node inside a parallel branch.

As in ``test_fork_crash_owner``: devhost started by the test, the origin run, a restart with the answer's model
call slowed so the fork is mid-way, kill -9 of the host, a restart on the same state. Nothing carried over runs
again, nothing is lost (the fork completes with the origin's answer), and only the activity in flight runs twice.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.jobs.test_fork_crash_owner import completions, executions, wait_until
from tests.jobs.test_fork_e2e import activities_run
from tests.runs.shapes import change

SLOW_ANSWER = "write_answer:DELAY:1:60000"  # the first answer after a restart takes a minute: in flight at the kill
TASK = "Which region had the most returns in Q3, and what does the returns policy say about refunds?"


@pytest.fixture
def host(tmp_path: Path, azurite: Azurite) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "killruns" + uuid.uuid4().hex[:10],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start(timeout_s=120)
    try:
        yield proc
    finally:
        proc.stop()


def fork_mid_way(host: DevHostProcess, origin_id: str, body: dict[str, Any]) -> tuple[str, Counter[str]]:
    """Restart with the answer slowed, fork, and wait for that answer to start; the activities before the fork."""
    host.kill()
    host.extra_env["OFFLINE_LLM_FAULTS"] = SLOW_ANSWER
    host.start(timeout_s=120)
    before = executions(host)
    resp = JobClient(host).http.post(f"/api/jobs/{origin_id}/fork", json=body)
    assert resp.status_code == 202, resp.text
    wait_until(lambda: executions(host)["generate_response"] > before["generate_response"], "the answer to start", 180)
    return str(resp.json()["id"]), before


def kill_and_restart(host: DevHostProcess) -> JobClient:
    host.kill()
    host.extra_env.pop("OFFLINE_LLM_FAULTS")
    host.start(timeout_s=120)
    return JobClient(host)


def test_kill_during_a_fork_of_a_supervisor_team_at_a_round(host: DevHostProcess) -> None:
    from tests.replay.record import SUPERVISED, TEAM_AGENTS

    jobs = JobClient(host)
    for body in TEAM_AGENTS:
        assert jobs.http.post("/api/agents", json=body).status_code == 201
    assert jobs.http.post("/api/teams", json=SUPERVISED).status_code == 201
    resp = jobs.http.post(f"/api/teams/{SUPERVISED['id']}/runs", json={"inputs": {"task": TASK}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=240)
    assert origin["status"] == "completed", origin.get("error")
    rounds = ["supervisor_1", "r1_data_analyst", "supervisor_2", "r2_data_analyst"]
    assert [s["id"] for s in origin["steps"]] == rounds

    # At the second round: its supervisor's answer (the first model answer the fork asks for) is in flight.
    body = {"from_step": "supervisor_2", "changes": {"constraints": {"max_tokens": 900}}}
    fork_id, before = fork_mid_way(host, origin["id"], body)
    # The team and the supervisor's agent loaded, its two turns and their lookups done; round 1 loaded nothing.
    at_kill = Counter({"load_fork_base": 1, "load_definition": 2, "agent_turn": 2, "consult_rag": 2})
    assert completions(host, fork_id) == at_kill
    view = kill_and_restart(host).wait(fork_id, timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == rounds[:2]
    assert [s["id"] for s in view["steps"]] == rounds
    assert view["answer"]["text"] == origin["answer"]["text"]
    # Nothing of round 1 ran for the fork; round 2 ran each task once, only the answer in flight ran twice.
    assert not [step for _, step in activities_run(host, fork_id) if step.startswith(("supervisor_1", "r1_"))]
    each = Counter(
        {"load_fork_base": 1, "load_definition": 3, "agent_turn": 4, "consult_rag": 3, "execute_azure_sql": 1}
    )
    assert completions(host, fork_id) == each + Counter({"generate_response": 2})
    ran = executions(host) - before
    assert ran == each + Counter({"generate_response": 3}), ran


BRANCHED: dict[str, Any] = {
    "id": "killbranch",
    "name": "Killed in a branch",
    "inputs": {"topic": {"type": "string"}},
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["lookup", "grow"]},
        {"id": "lookup", "kind": "step", "step": "consult_rag", "input": {"query": {"from": "input.topic"}}},
        {"id": "reread", "kind": "step", "step": "consult_rag", "after": ["lookup"],
         "input": {"query": {"value": "refund methods"}}},
        {"id": "say", "kind": "step", "step": "generate_response", "after": ["reread"],
         "input": {"question": {"value": "What is the refund policy?"}}},
        change("grow", {"value": 80}),
        change("grow2", {"from": "grow.data.percent_change"}, after=["grow"]),
        {"id": "merge", "kind": "join", "after": ["say", "grow2"]},
        change("final", {"value": 50}, after=["merge"]),
    ],
    "outputs": {"query": {"from": "reread.query"}, "grew": {"from": "grow2.data.percent_change"}},
}  # fmt: skip


def test_kill_during_a_fork_at_a_node_inside_a_parallel_branch(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    assert jobs.http.post("/api/workflows", json=BRANCHED).status_code == 201
    resp = jobs.http.post("/api/workflows/killbranch/runs", json={"inputs": {"topic": "refunds after 30 days"}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=240)
    assert origin["status"] == "completed", origin.get("error")

    # At the branch's second lookup: the branch's part is mid-way, its answer in flight, at the kill.
    fork_id, before = fork_mid_way(host, origin["id"], {"from_step": "reread", "changes": {}})
    part = f"{fork_id}:lookup"
    assert completions(host, fork_id) == Counter({"load_fork_base": 1, "load_definition": 1})
    assert completions(host, part) == Counter({"load_definition": 1, "consult_rag": 1})
    view = kill_and_restart(host).wait(fork_id, timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert sorted(s["id"] for s in view["steps"] if s.get("carried_over")) == ["grow", "grow2", "lookup"]
    # Nothing lost: the same outputs and the same answer of the branch's answer node as the origin's.
    assert view["run"]["outputs"] == origin["run"]["outputs"]
    said = [[s["output"] for s in run["steps"] if s["id"] == "say"] for run in (origin, view)]
    assert said[0] == said[1] and said[0][0]
    # The carried lookup and the other branch (two tool calls) never ran: the only tool call is the node after
    # the join; the part ran each task once, and only its answer in flight at the kill ran twice.
    assert completions(host, fork_id) == Counter({"load_fork_base": 1, "load_definition": 1, "call_tool": 1})
    assert completions(host, part) == Counter({"load_definition": 1, "consult_rag": 1, "generate_response": 1})
    ran = executions(host) - before
    each = {"load_fork_base": 1, "load_definition": 2, "consult_rag": 1, "call_tool": 1}
    assert ran == Counter(each | {"generate_response": 2}), ran
