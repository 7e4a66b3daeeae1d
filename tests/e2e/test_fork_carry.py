"""Forks that carry over what the origin's orchestrator made itself (issue 30), over HTTP on devhost.

A workflow run with an agent node, a sub-workflow node and a loop before a lookup; a planned job whose first step
asks the user. Each fork's own Durable history shows what ran: nothing carried over runs again (no Executor turn,
no sub-orchestration, no tool call), and an edit of a node's input is what the node runs with.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.jobs.test_fork_e2e import _cli, activities_run, fork, history, started
from tests.runs.shapes import change

SCOUT = {"id": "scout", "name": "Scout", "instructions": "Find the policy.", "tools": ["consult_rag"]}
INNER = {
    "id": "inner",
    "name": "Inner",
    "nodes": [change("grow", {"value": 80})],
    "outputs": {"percent": {"from": "grow.data.percent_change"}},
}
WORKFLOW: dict[str, Any] = {
    "id": "carried",
    "name": "Carried",
    "inputs": {"topic": {"type": "string"}},
    "nodes": [
        {
            "id": "scout",
            "kind": "agent",
            "agent": "scout",
            "input": {"prompt": {"template": "What does the policy say about {input.topic}?"}},
        },
        {"id": "sub", "kind": "workflow", "workflow": "inner", "after": ["scout"]},
        {"id": "again", "kind": "loop", "body": ["tick"], "max_iterations": 2, "after": ["sub"]},
        change("tick", {"value": 50}),
        {"id": "docs", "kind": "step", "step": "consult_rag", "after": ["again"],
         "input": {"query": {"from": "input.topic"}}},
    ],
    "outputs": {"summary": {"from": "scout.text"}, "grew": {"from": "sub.percent"}, "query": {"from": "docs.query"}},
}  # fmt: skip
NOWHERE_Q = "Tell me something about zebras"


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "carry" + uuid.uuid4().hex[:12],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("fork-carry-host"), env=env)
    proc.start(timeout_s=120)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


@pytest.fixture(scope="module")
def origin(jobs: JobClient) -> dict[str, Any]:
    for kind, body in (("agents", SCOUT), ("workflows", INNER), ("workflows", WORKFLOW)):
        resp = jobs.http.post(f"/api/{kind}", json=body)
        assert resp.status_code == 201, resp.text
    resp = jobs.http.post("/api/workflows/carried/runs", json={"inputs": {"topic": "refunds after 30 days"}})
    assert resp.status_code == 202, resp.text
    view = jobs.wait(resp.json()["id"], timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert {s["id"]: s["state"] for s in view["steps"]} == dict.fromkeys(
        ["scout", "sub", "again", "tick", "docs"], "succeeded"
    )
    return view


def sub_orchestrations(host: DevHostProcess, job_id: str) -> int:
    return sum(1 for e in history(host, job_id) if e["EventType"] == "SubOrchestrationInstanceCompleted")


def test_a_fork_after_an_agent_a_sub_workflow_and_a_loop_runs_none_of_them_again(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    resp = fork(jobs, origin["id"], "docs", query="store credit")
    assert sorted(resp.json()["carried_over"]) == ["again", "scout", "sub", "tick"], resp.json()
    assert resp.json()["step_input"] == {"query": "store credit"}
    view = jobs.wait(started(resp), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    ran = [name for name, _ in activities_run(host, view["id"])]
    # The definition is read again (pinned); only the edited lookup runs: no Executor turn, answer or tool call.
    assert ran == ["load_fork_base", "load_definition", "consult_rag"], ran
    before = [name for name, _ in activities_run(host, origin["id"])]
    assert {"agent_turn", "generate_response", "call_tool"} <= set(before), before  # what the origin ran
    assert sub_orchestrations(host, origin["id"]) == 1
    assert sub_orchestrations(host, view["id"]) == 0
    # The edit is what the node ran with; what the carried nodes handed on is the origin's.
    assert view["run"]["outputs"]["query"] == "store credit"
    outputs = view["run"]["outputs"]
    assert outputs["summary"] == origin["run"]["outputs"]["summary"] and outputs["summary"]
    assert view["run"]["outputs"]["grew"] == origin["run"]["outputs"]["grew"]
    carried = {s["id"] for s in view["steps"] if s.get("carried_over")}
    assert carried == {"scout", "sub", "tick", "again"}
    # Everything the origin used came before the fork point (the lookup uses no model): the Executor's turns and
    # the agent's answer are counted as carried over, apart from what the fork used (nothing).
    assert view["usage"]["carried_over"]["total_tokens"] == origin["usage"]["total"]["total_tokens"] > 0
    assert view["usage"]["total"]["total_tokens"] == 0


def test_a_fork_at_the_sub_workflow_runs_it_and_the_loop_but_not_the_agent(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    view = jobs.wait(started(fork(jobs, origin["id"], "sub")), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    ran = [name for name, _ in activities_run(host, view["id"])]
    assert "agent_turn" not in ran and "generate_response" not in ran, ran
    assert ran.count("call_tool") == 2  # the loop's two iterations (the sub-workflow's call is in its own history)
    assert sub_orchestrations(host, view["id"]) == 1
    assert view["run"]["outputs"] == origin["run"]["outputs"]


def test_an_agent_nodes_prompt_is_edited_in_a_fork(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]
) -> None:
    prompt = "What does the policy say about store credit?"
    view = jobs.wait(started(fork(jobs, origin["id"], "scout", prompt=prompt)), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    turns = [
        e["Input"]["task"]["question"]
        for e in history(host, view["id"])
        if e["EventType"] == "TaskCompleted" and e["FunctionName"] == "agent_turn"
    ]
    assert turns and all(q == prompt for q in turns)
    # The CLI takes the same edit.
    done = _cli(host, "fork", origin["id"], "--from", "scout", "--prompt", prompt, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["step_input"] == {"prompt": prompt}
    assert jobs.wait(json.loads(done.stdout)["id"], timeout_s=240)["status"] == "completed"


@pytest.mark.parametrize(
    ("from_step", "changes", "status", "code", "field"),
    [
        ("docs", {"sql": "SELECT 1"}, 400, "INVALID_REQUEST", "changes.sql"),
        ("docs", {"top_k": 0}, 400, "INVALID_REQUEST", "changes.top_k"),
        ("sub", {"query": "x"}, 400, "INVALID_REQUEST", "changes.query"),
        ("scout", {"prompt": ""}, 400, "INVALID_REQUEST", "changes.prompt"),
        ("tick", {}, 400, "INVALID_FORK_POINT", None),
    ],
)
def test_a_bad_node_edit_or_fork_point_is_refused(
    jobs: JobClient, origin: dict[str, Any], from_step: str, changes: dict[str, Any], status: int, code: str, field: Any
) -> None:
    resp = fork(jobs, origin["id"], from_step, **changes)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code and resp.json()["error"].get("field") == field, resp.json()


def test_a_persons_answer_to_an_ask_user_step_is_carried_as_a_result(host: DevHostProcess, jobs: JobClient) -> None:
    job_id = jobs.submit(NOWHERE_Q)
    waiting = jobs.wait(job_id, {"waiting_for_user"}, timeout_s=180)["waiting"]
    assert waiting["step_id"] == "s1" and waiting["kind"] == "clarify", waiting
    assert jobs.answer(job_id, "policies").status_code == 202
    origin = jobs.wait(job_id, timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    assert [s["kind"] for s in origin["steps"]] == ["ask_user", "consult_rag", "generate_response"]
    resp = fork(jobs, job_id, "s2", query="refunds after 30 days")
    assert resp.json()["carried_over"] == ["s1"]
    view = jobs.wait(started(resp), timeout_s=180)
    # No one is asked again: the answer is carried over and reaches the lookup that depends on it, as text.
    assert view["status"] == "completed", view.get("error")
    assert [name for name, _ in activities_run(host, view["id"])] == [
        "load_fork_base",
        "consult_rag",
        "generate_response",
    ]
    assert view["steps"][0]["carried_over"] is True and view["steps"][0]["output"] == {"answer": "policies"}
    assert view["steps"][1]["output"]["query"] == "refunds after 30 days (policies)"
    assert not any(e["EventType"] == "EventRaised" for e in history(host, view["id"]))


def test_a_sequential_team_forks_at_its_second_member(host: DevHostProcess, jobs: JobClient) -> None:
    from tests.replay.record import TEAM, TEAM_AGENTS

    for agent in TEAM_AGENTS:
        assert jobs.http.post("/api/agents", json=agent).status_code == 201
    assert jobs.http.post("/api/teams", json=TEAM).status_code == 201
    resp = jobs.http.post("/api/teams/returns-desk/runs", json={"inputs": {"task": TASK}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=240)
    assert origin["status"] == "completed", origin.get("error")
    first, second = (s["id"] for s in origin["steps"])
    # The second member again, with a new prompt: the first one (its turns, lookups and answer) is carried over.
    view = jobs.wait(started(fork(jobs, origin["id"], second, prompt="What does the policy say?")), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == [first]
    turns = [
        e["Input"]["task"]["question"]
        for e in history(host, view["id"])
        if e["EventType"] == "TaskCompleted" and e["FunctionName"] == "agent_turn"
    ]
    assert turns and set(turns) == {"What does the policy say?"}  # only the second member's turns ran


TASK = "Which region had the most returns in Q3, and what does the returns policy say about refunds?"


def round_activities(host: DevHostProcess, job_id: str) -> dict[str, list[str]]:
    """The activities each round (step) of a run ran, from its own history (an Executor turn has no step id)."""
    ran: dict[str, list[str]] = {}
    for name, step in activities_run(host, job_id):
        ran.setdefault(step, []).append(name)
    return ran


def test_a_fan_out_team_forks_at_one_member(host: DevHostProcess, jobs: JobClient) -> None:
    from tests.replay.record import TEAM, TEAM_AGENTS

    for agent in [*TEAM_AGENTS, SCOUT]:
        jobs.http.post("/api/agents", json=agent)  # 201, or 409 when another test saved them
    fan = {**TEAM, "id": "desk-fan", "strategy": {"type": "parallel", "aggregator": "scout"}}
    saved = jobs.http.post("/api/teams", json=fan)
    assert saved.status_code == 201, saved.text
    resp = jobs.http.post("/api/teams/desk-fan/runs", json={"inputs": {"task": TASK}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=240)
    assert origin["status"] == "completed", origin.get("error")
    # The second member (a branch of the compiled fan-out) with a new prompt: the first member's branch is carried.
    resp = fork(jobs, origin["id"], "m2_policy_reader", prompt="What does the policy say?")
    assert resp.json()["carried_over"] == ["m1_data_analyst"], resp.json()
    view = jobs.wait(started(resp), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    parts = [e for e in history(host, view["id"]) if e["EventType"] == "SubOrchestrationInstanceCompleted"]
    assert [p["Input"]["run"]["part"]["entry"] for p in parts] == ["m2_policy_reader"]
    assert set(turn_questions(host, f"{view['id']}:m2_policy_reader")) == {"What does the policy say?"}
    states = {s["id"]: (s["state"], bool(s.get("carried_over"))) for s in view["steps"]}
    assert states["m1_data_analyst"] == ("succeeded", True) and states["aggregate"] == ("succeeded", False)


def turn_questions(host: DevHostProcess, job_id: str) -> list[str]:
    """The question each Executor turn of a run was given, in order."""
    return [
        str(e["Input"]["task"]["question"])
        for e in history(host, job_id)
        if e["EventType"] == "TaskCompleted" and e["FunctionName"] == "agent_turn"
    ]


def test_a_supervisor_team_forks_at_a_round(host: DevHostProcess, jobs: JobClient) -> None:
    from tests.replay.record import SUPERVISED, TEAM_AGENTS

    for agent in TEAM_AGENTS:
        jobs.http.post("/api/agents", json=agent)  # 201, or 409 when the test above saved them
    saved = jobs.http.post("/api/teams", json=SUPERVISED)
    assert saved.status_code == 201, saved.text
    resp = jobs.http.post(f"/api/teams/{SUPERVISED['id']}/runs", json={"inputs": {"task": TASK}})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=240)
    assert origin["status"] == "completed", origin.get("error")
    rounds = ["supervisor_1", "r1_data_analyst", "supervisor_2", "r2_data_analyst"]
    assert [s["id"] for s in origin["steps"]] == rounds
    before = round_activities(host, origin["id"])
    asked = turn_questions(host, origin["id"])

    # At the second round, with a smaller max_tokens: the first round (the supervisor's choice and the member's
    # answer) is carried over; the second round runs again, its supervisor shown what the first member said.
    resp = fork(jobs, origin["id"], "supervisor_2", constraints={"max_tokens": 900})
    assert resp.json()["carried_over"] == rounds[:2], resp.json()
    first_fork = started(resp)
    view = jobs.wait(first_fork, timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"]] == rounds
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == rounds[:2]
    # A carried round shows the text its agent answered in the origin.
    assert [s["output"]["text"] for s in view["steps"][:2]] == [s["output"]["answer"] for s in origin["steps"][:2]]
    ran = round_activities(host, view["id"])
    assert not any(step.startswith(("supervisor_1", "r1_")) for step in ran), ran  # nothing of round 1 ran
    assert {k: v for k, v in ran.items() if k.startswith(("supervisor_2", "r2_"))} == {
        k: v for k, v in before.items() if k.startswith(("supervisor_2", "r2_"))
    }
    # The team, then the two agents of round 2 (a carried round loads no agent).
    assert ran[""] == ["load_fork_base", *["load_definition"] * 3], ran[""]
    # The Executor's turns are round 2's only, each asked what the origin's round 2 was asked: its supervisor
    # shown what the carried member said.
    turns = turn_questions(host, view["id"])
    assert 0 < len(turns) < len(asked) and turns == asked[len(asked) - len(turns) :]
    assert "- data-analyst: From the data" in turns[0]
    assert view["answer"]["text"] == origin["answer"]["text"]
    # The fork paid only for round 2; round 1's tokens are the origin's, counted apart.
    assert view["usage"]["carried_over"]["total_tokens"] > 0
    total = view["usage"]["total"]["total_tokens"]
    assert 0 < total < origin["usage"]["total"]["total_tokens"]

    # At the second member, with a new prompt: the supervisor's second choice is carried over too.
    resp = fork(jobs, origin["id"], "r2_data_analyst", prompt="How many returns did the West region have in Q3?")
    assert resp.json()["carried_over"] == rounds[:3], resp.json()
    view = jobs.wait(started(resp), timeout_s=240)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == rounds[:3]
    ran = round_activities(host, view["id"])
    assert sorted(k for k in ran if k.startswith(("supervisor", "r1_"))) == [], ran
    assert set(turn_questions(host, view["id"])) == {"How many returns did the West region have in Q3?"}

    # A fork of that fork, at its own member round: rounds carried by the first fork come from where they ran.
    again = jobs.wait(started(fork(jobs, first_fork, "r2_data_analyst")), timeout_s=240)
    assert again["status"] == "completed", again.get("error")
    carried_from = {s["id"]: s.get("carried_from") for s in again["steps"] if s.get("carried_over")}
    assert carried_from == {"supervisor_1": origin["id"], "r1_data_analyst": origin["id"], "supervisor_2": first_fork}
    assert not any(k.startswith(("supervisor", "r1_")) for k in round_activities(host, again["id"]))

    # A round that never ran is no fork point.
    refused = fork(jobs, origin["id"], "r3_data_analyst")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_FORK_POINT", refused.text


SQL_NODE: dict[str, Any] = {
    "id": "sqlnode",
    "name": "SQL node",
    "nodes": [
        {"id": "rows", "kind": "step", "step": "execute_azure_sql",
         "input": {"question": {"value": "Which region had the most returns in Q3?"}}},
    ],
}  # fmt: skip
CONTACTS = "SELECT email FROM customer_contacts"


def test_an_sql_node_edit_is_guarded_and_asked_again_under_the_forks_policy(
    host: DevHostProcess, jobs: JobClient
) -> None:
    assert jobs.http.post("/api/workflows", json=SQL_NODE).status_code == 201
    resp = jobs.http.post("/api/workflows/sqlnode/runs", json={})
    assert resp.status_code == 202, resp.text
    origin = jobs.wait(resp.json()["id"], timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    # A statement the guard refuses never starts a fork.
    bad = fork(jobs, origin["id"], "rows", sql="DELETE FROM regions")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "changes.sql", bad.text
    # A sensitive read: drafted (guarded) and held for a person's approval; nothing ran with an approval before it.
    fork_id = started(fork(jobs, origin["id"], "rows", sql=CONTACTS, approval={"sql": "sensitive"}))
    waiting = jobs.wait(fork_id, {"waiting_for_user"}, timeout_s=120)["waiting"]
    assert waiting["kind"] == "approval" and waiting["details"]["sensitive_tables"] == ["customer_contacts"], waiting
    for event in history(host, fork_id):
        if event["EventType"] == "TaskCompleted" and event["FunctionName"] == "execute_azure_sql":
            assert event["Input"]["execution_context"]["approved_sql"] is None
    assert jobs.answer(fork_id, "approve").status_code == 202
    done = jobs.wait(fork_id, timeout_s=120)
    assert done["status"] == "completed" and done["steps"][0]["output"]["rows"]
    # Under the run's own approval policy ("never" unless the run asks), the same statement may not run at all.
    refused = jobs.wait(started(fork(jobs, origin["id"], "rows", sql=CONTACTS)), {"failed", "waiting_for_user"},
                        timeout_s=120)  # fmt: skip
    assert "output" not in refused["steps"][0]
    assert refused["steps"][0]["error"]["code"] in ("SENSITIVE_TABLE", "SQL_REJECTED", "PERMISSION_DENIED")
