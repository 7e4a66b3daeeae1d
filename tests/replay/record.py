"""Record real job histories for the replay tests: ``.venv/bin/python -m tests.replay.record``.

Runs jobs on devhost on embedded defaults, one per scenario, and writes each instance's stored history
(the Durable wire-format events the SDK replays) to ``tests/replay/histories/<scenario>.json``. Re-record
only when a change to the orchestrator is meant to break jobs in flight, and version the orchestrator
first (docs/orchestrator-versioning.md): the old fixtures are the proof that the old version still replays.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

HISTORIES = Path(__file__).with_name("histories")
SQL_Q = "Which region had the most returns in Q3?"
MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
GROWTH_Q = "Compute the growth rate of revenue by month in 2025 and chart it"


def _completed(jobs: JobClient) -> str:
    job_id = jobs.submit(MIXED_Q)
    jobs.wait(job_id, timeout_s=120)
    return job_id


def _waiting_for_approval(jobs: JobClient) -> str:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)
    return job_id


def _approved(jobs: JobClient) -> str:
    job_id = _waiting_for_approval(jobs)
    assert jobs.answer(job_id, "approve").status_code == 202
    jobs.wait(job_id, timeout_s=120)
    return job_id


def _aborted(jobs: JobClient) -> str:
    job_id = _waiting_for_approval(jobs)
    assert jobs.answer(job_id, "abort").status_code == 202
    jobs.wait(job_id, {"failed"}, timeout_s=120)
    return job_id


def _retried(jobs: JobClient) -> str:
    job_id = jobs.submit(SQL_Q)
    view = jobs.wait(job_id, timeout_s=120)
    assert any(s.get("attempts", 1) > 1 for s in view["steps"]), view["steps"]
    return job_id


def _python_waiting(jobs: JobClient) -> str:
    job_id = jobs.submit(GROWTH_Q, tools=["python.run"], approval={"python": "writes_files"})
    jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)
    return job_id


WORKFLOW = {
    "id": "replayed",
    "name": "Replayed",
    "inputs": {"old": {"type": "number"}},
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["left", "right"]},
        {
            "id": "left",
            "kind": "tool",
            "tool": "function.percent_change",
            "input": {"old": {"from": "input.old"}, "new": {"value": 100}},
        },
        {
            "id": "right",
            "kind": "tool",
            "tool": "function.percent_change",
            "input": {"old": {"value": 0}, "new": {"value": 1}},
        },
        {"id": "merge", "kind": "join", "after": ["left", "right"], "on_failure": "continue"},
        {
            "id": "ask",
            "kind": "human",
            "after": ["merge"],
            "question": {"template": "Failed: {merge.failed}. Go on?"},
            "options": ["approve", "reject"],
        },
    ],
}


def _workflow_waiting(jobs: JobClient) -> str:
    """A workflow run past a fan-out (one branch failed) and waiting at a human node."""
    assert jobs.http.post("/api/workflows", json=WORKFLOW).status_code == 201
    resp = jobs.http.post("/api/workflows/replayed/runs", json={"inputs": {"old": 80}})
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)
    return job_id


BRANCH_ASKS: dict[str, Any] = {
    "id": "branch-asks",
    "name": "A branch asks",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["review", "calc"]},
        {"id": "review", "kind": "human", "question": {"value": "Ship it?"}, "options": ["yes", "no"]},
        {
            "id": "calc",
            "kind": "tool",
            "tool": "function.percent_change",
            "input": {"old": {"value": 80}, "new": {"value": 100}},
        },
        {"id": "merge", "kind": "join", "after": ["review", "calc"]},
    ],
}


def _branch_question(jobs: JobClient) -> str:
    """A workflow run whose parallel branch asks: the root shows the question (its part-news event)."""
    assert jobs.http.post("/api/workflows", json=BRANCH_ASKS).status_code == 201
    resp = jobs.http.post("/api/workflows/branch-asks/runs", json={})
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)
    return job_id


def _branch_part_waiting(jobs: JobClient) -> str:
    """The branch itself (a workflow_part instance), waiting for the answer to its question."""
    return f"{_branch_question(jobs)}:review"


def _python_approved(jobs: JobClient) -> str:
    job_id = _python_waiting(jobs)
    assert jobs.answer(job_id, "approve").status_code == 202
    jobs.wait(job_id, timeout_s=120)
    return job_id


def _agent(jobs: JobClient) -> str:
    """Agent mode: the Executor's turns, and the lookups of one turn started together (their first attempts)."""
    job_id = jobs.submit(MIXED_Q, mode="agent", tools=["function.growth_rate"])
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    return job_id


def _hybrid(jobs: JobClient) -> str:
    """Hybrid mode: the Supervisor's decision after each lookup step."""
    job_id = jobs.submit(MIXED_Q, mode="hybrid")
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    return job_id


TEAM_AGENTS: list[dict[str, Any]] = [
    {
        "id": "policy-reader",
        "name": "Policy reader",
        "instructions": "Answer questions about the company's policies from the passages consult_rag finds.",
        "tools": ["consult_rag"],
        "limits": {"max_turns": 3, "max_tool_calls": 4},
    },
    {
        "id": "data-analyst",
        "name": "Data analyst",
        "instructions": "Answer questions about sales and returns from the database (execute_azure_sql).",
        "tools": ["execute_azure_sql", "consult_rag"],
        "limits": {"max_turns": 3, "max_tool_calls": 4},
    },
]
TEAM = {
    "id": "returns-desk",
    "name": "Returns desk",
    "agents": ["data-analyst", "policy-reader"],
    "strategy": {"type": "sequential"},
}

# A supervisor team: the policy reader picks the data analyst each round (its answer names the member), two rounds.
SUPERVISED: dict[str, Any] = {
    "id": "desk-sup",
    "name": "Returns desk (supervised)",
    "agents": ["data-analyst"],
    "strategy": {"type": "supervisor", "supervisor": "policy-reader", "max_rounds": 2},
}


def _team(jobs: JobClient) -> str:
    """A sequential team run: each member an agent node, the second given the first one's answer."""
    for agent in TEAM_AGENTS:
        assert jobs.http.post("/api/agents", json=agent).status_code == 201
    assert jobs.http.post("/api/teams", json=TEAM).status_code == 201
    resp = jobs.http.post("/api/teams/returns-desk/runs", json={"inputs": {"task": MIXED_Q}})
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    view = jobs.wait(job_id, timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    return job_id


def _limits_waiting(jobs: JobClient) -> str:
    """The same run as ``_workflow_waiting`` under run limits: its branches got their shares, it waits at a human."""
    assert jobs.http.post("/api/workflows", json=WORKFLOW).status_code == 201
    body = {"inputs": {"old": 80}, "limits": {"max_node_runs": 20, "max_tool_calls": 10}}
    resp = jobs.http.post("/api/workflows/replayed/runs", json=body)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)
    return job_id


LOOPED: dict[str, Any] = {
    "id": "looped",
    "name": "Looped",
    "nodes": [
        {"id": "again", "kind": "loop", "body": ["calc"], "max_iterations": 5},
        {
            "id": "calc",
            "kind": "tool",
            "tool": "function.percent_change",
            "input": {"old": {"value": 80}, "new": {"value": 100}},
        },
    ],
}


def _run_limit_reached(jobs: JobClient) -> str:
    """A loop stopped by its run's max_node_runs: failed with RUN_LIMIT_EXCEEDED."""
    assert jobs.http.post("/api/workflows", json=LOOPED).status_code == 201
    resp = jobs.http.post("/api/workflows/looped/runs", json={"limits": {"max_node_runs": 4}})
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    assert jobs.wait(job_id, {"failed"}, timeout_s=120)["error"]["code"] == "RUN_LIMIT_EXCEEDED"
    return job_id


def _fork(jobs: JobClient) -> str:
    """A fork of a completed job at its document lookup with an edited query: the SQL step before it carried over."""
    origin = _completed(jobs)
    body = {"from_step": "s2", "changes": {"query": "store credit after 30 days"}}
    resp = jobs.http.post(f"/api/jobs/{origin}/fork", json=body)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    return job_id


def _fork_workflow(jobs: JobClient) -> str:
    """A fork of a finished workflow run at its human node: the fan-out and its join carried over, asked again."""
    job_id = _workflow_waiting(jobs)
    assert jobs.answer(job_id, "approve").status_code == 202
    assert jobs.wait(job_id, timeout_s=120)["status"] == "completed"
    resp = jobs.http.post(f"/api/jobs/{job_id}/fork", json={"from_step": "ask", "changes": {}})
    assert resp.status_code == 202, resp.text
    fork_id = str(resp.json()["id"])
    jobs.wait(fork_id, {"waiting_for_user"}, timeout_s=120)
    assert jobs.answer(fork_id, "approve").status_code == 202
    view = jobs.wait(fork_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    return fork_id


def _fork_agent(jobs: JobClient) -> str:
    """A fork of a finished agent job at its second turn: the first turn's calls and transcript carried over."""
    origin = _agent(jobs)
    body = {"from_step": "turn-2", "changes": {"constraints": {"max_tokens": 900}}}
    resp = jobs.http.post(f"/api/jobs/{origin}/fork", json=body)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"] if s.get("carried_over")], view["steps"]
    return job_id


def _fork_team(jobs: JobClient) -> str:
    """A fork of a supervisor team at its second round: the first round (choice and answer) carried over."""
    for agent in TEAM_AGENTS:
        assert jobs.http.post("/api/agents", json=agent).status_code == 201
    assert jobs.http.post("/api/teams", json=SUPERVISED).status_code == 201
    resp = jobs.http.post(f"/api/teams/{SUPERVISED['id']}/runs", json={"inputs": {"task": MIXED_Q}})
    assert resp.status_code == 202, resp.text
    origin = str(resp.json()["id"])
    assert jobs.wait(origin, timeout_s=180)["status"] == "completed"
    body = {"from_step": "supervisor_2", "changes": {"constraints": {"max_tokens": 900}}}
    resp = jobs.http.post(f"/api/jobs/{origin}/fork", json=body)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    view = jobs.wait(job_id, timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == ["supervisor_1", "r1_data_analyst"]
    return job_id


BRANCHY: dict[str, Any] = {
    "id": "branchy",
    "name": "Branchy",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["lookup", "grow"]},
        {"id": "lookup", "kind": "step", "step": "consult_rag", "input": {"query": {"value": "refunds"}}},
        {"id": "reread", "kind": "step", "step": "consult_rag", "after": ["lookup"],
         "input": {"query": {"value": "refund methods"}}},
        {"id": "grow", "kind": "tool", "tool": "function.percent_change",
         "input": {"old": {"value": 80}, "new": {"value": 100}}},
        {"id": "tail", "kind": "tool", "tool": "function.percent_change", "after": ["reread"],
         "input": {"old": {"value": 50}, "new": {"value": 100}}},
        {"id": "merge", "kind": "join", "after": ["tail", "grow"]},
    ],
}  # fmt: skip


def _fork_branch(jobs: JobClient) -> str:
    """A fork at a node inside a parallel branch: the other branch and the node before it carried over."""
    assert jobs.http.post("/api/workflows", json=BRANCHY).status_code == 201
    resp = jobs.http.post("/api/workflows/branchy/runs", json={})
    assert resp.status_code == 202, resp.text
    origin = str(resp.json()["id"])
    assert jobs.wait(origin, timeout_s=120)["status"] == "completed"
    body = {"from_step": "reread", "changes": {"query": "store credit"}}
    resp = jobs.http.post(f"/api/jobs/{origin}/fork", json=body)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["id"])
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    assert {s["id"] for s in view["steps"] if s.get("carried_over")} == {"lookup", "grow"}
    return job_id


def _fork_branch_part(jobs: JobClient) -> str:
    """The forked branch of ``_fork_branch`` (a part): its node before the fork point carried in, the edit run."""
    return f"{_fork_branch(jobs)}:lookup"


# Scenarios whose host needs the definitions store (Azurite, started by the recorder).
NEEDS_STORE = {
    "workflow_waiting_at_human",
    "workflow_branch_question",
    "workflow_part_waiting",
    "workflow_limits_waiting",
    "workflow_run_limit_reached",
    "fork_workflow_completed",
    "team_completed",
    "fork_team_completed",
    "fork_branch_completed",
    "fork_branch_part_completed",
}
# scenario -> (host environment, how to drive the job)
SCENARIOS: dict[str, tuple[dict[str, str], Callable[[JobClient], str]]] = {
    "completed": ({}, _completed),
    "waiting_for_approval": ({}, _waiting_for_approval),
    "approved_then_completed": ({}, _approved),
    "aborted_at_approval": ({}, _aborted),
    "retried_after_rate_limit": ({"OFFLINE_LLM_FAULTS": "write_answer:RATE_LIMITED:1"}, _retried),
    # run_python (needs the local sandbox): a draft that wrote a chart waits for approval, then runs for real.
    "python_waiting_for_approval": ({}, _python_waiting),
    "python_approved_then_completed": ({}, _python_approved),
    "workflow_waiting_at_human": ({"DEFINITIONS_TABLE": "replay"}, _workflow_waiting),
    "workflow_branch_question": ({"DEFINITIONS_TABLE": "replay"}, _branch_question),
    "workflow_part_waiting": ({"DEFINITIONS_TABLE": "replay"}, _branch_part_waiting),
    "agent_completed": ({}, _agent),
    "hybrid_completed": ({}, _hybrid),
    "team_completed": ({"DEFINITIONS_TABLE": "replay"}, _team),
    # Runs with limits (RunLimits in the run's input): in flight past a fan-out, and stopped by a limit.
    "workflow_limits_waiting": ({"DEFINITIONS_TABLE": "replay"}, _limits_waiting),
    "workflow_run_limit_reached": ({"DEFINITIONS_TABLE": "replay"}, _run_limit_reached),
    "fork_completed": ({}, _fork),
    "fork_workflow_completed": ({"DEFINITIONS_TABLE": "replay"}, _fork_workflow),
    "fork_agent_completed": ({}, _fork_agent),
    "fork_team_completed": ({"DEFINITIONS_TABLE": "replay"}, _fork_team),
    "fork_branch_completed": ({"DEFINITIONS_TABLE": "replay"}, _fork_branch),
    "fork_branch_part_completed": ({"DEFINITIONS_TABLE": "replay"}, _fork_branch_part),
}


def read_instance(data_dir: Path, instance_id: str) -> dict[str, Any]:
    """The stored orchestration name, input and history of one instance (read-only, beside the running host)."""
    (db_path,) = data_dir.glob("durable-*.sqlite3")
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        name, input_text, status = db.execute(
            "SELECT name, input, status FROM instances WHERE instance_id=?", (instance_id,)
        ).fetchone()
        bodies = [r[0] for r in db.execute("SELECT body FROM history WHERE instance_id=? ORDER BY idx", (instance_id,))]
    finally:
        db.close()
    return {
        "orchestrator": name,
        "instance_id": instance_id,
        "runtime_status": status,
        "input": input_text,
        "history": [json.loads(b) for b in bodies],
    }


def record(names: list[str]) -> None:
    """Run the named scenarios (all when empty) and write their fixtures."""
    HISTORIES.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        env, drive = SCENARIOS[name]
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            if name in NEEDS_STORE:
                azurite = stack.enter_context(Azurite(Path(tmp) / "azurite"))
                env = {**env, "AzureWebJobsStorage": azurite.connection_string}
            data = Path(tmp) / "data"
            base = {"JOB_RETRY_FIRST_INTERVAL_MS": "50", "ARTIFACT_PATH": str(Path(tmp) / "artifacts.sqlite3")}
            host = DevHostProcess(REPO_ROOT, data, env={**base, **env})
            host.start()
            try:
                job_id = drive(JobClient(host))
                fixture = read_instance(data, job_id)
            finally:
                host.stop()
        path = HISTORIES / f"{name}.json"
        path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{path.relative_to(REPO_ROOT)}: {len(fixture['history'])} events, {fixture['runtime_status']}")


if __name__ == "__main__":
    record(sys.argv[1:])
