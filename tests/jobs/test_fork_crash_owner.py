"""Forks on devhost: a kill -9 during a fork re-runs nothing carried over; another user's job cannot be forked."""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
ACTIVITIES = (
    "plan",
    "load_fork_base",
    "load_definition",
    "consult_rag",
    "execute_azure_sql",
    "generate_response",
    "agent_turn",
    "call_tool",
)


def executions(host: DevHostProcess) -> Counter[str]:
    """How many times each activity started, over every life of the host (its log is appended)."""
    return Counter(n for n in re.findall(r"Executing 'Functions\.(\w+)'", host.output()) if n in ACTIVITIES)


def completions(host: DevHostProcess, job_id: str) -> Counter[str]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true"}
    resp = host.client.get(host.webhook(f"instances/{job_id}"), params=params)
    assert resp.status_code in (200, 202), resp.text  # 202 while it runs
    events = resp.json()["historyEvents"]
    return Counter(str(e["FunctionName"]) for e in events if e["EventType"] in ("TaskCompleted", "TaskFailed"))


def wait_until(check: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_during_a_fork_reruns_only_the_step_in_flight(tmp_path: Path) -> None:
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"}).start(timeout_s=120)
    try:
        jobs = JobClient(host)
        origin = jobs.wait(jobs.submit(MIXED_Q), timeout_s=180)
        assert origin["status"] == "completed", origin.get("error")
        # The answer's model call takes a minute the next time: the fork's last step is in flight at the kill.
        host.kill()
        host.extra_env["OFFLINE_LLM_FAULTS"] = "write_answer:DELAY:1:60000"
        host.start(timeout_s=120)
        jobs = JobClient(host)
        before = executions(host)
        resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "s2", "changes": {"top_k": 3}})
        assert resp.status_code == 202, resp.text
        fork_id = resp.json()["id"]
        wait_until(lambda: executions(host)["generate_response"] > before["generate_response"], "the answer to start")
        assert completions(host, fork_id) == Counter({"load_fork_base": 1, "consult_rag": 1})
        host.kill()
        host.extra_env.pop("OFFLINE_LLM_FAULTS")
        host.start(timeout_s=120)
        view = JobClient(host).wait(fork_id, timeout_s=180)
        assert view["status"] == "completed", view.get("error")
        assert [s.get("carried_over", False) for s in view["steps"]] == [True, False, False]
        assert len(view["steps"][1]["output"]["chunks"]) == 3
        # Each task of the fork completed once; only the answer in flight at the kill ran a second time, and
        # nothing carried over (the SQL step) or planning ever ran for the fork.
        assert completions(host, fork_id) == Counter({"load_fork_base": 1, "consult_rag": 1, "generate_response": 1})
        ran = executions(host) - before
        assert ran == Counter({"load_fork_base": 1, "consult_rag": 1, "generate_response": 2}), ran
    finally:
        host.stop()


def test_kill_during_a_fork_of_an_agent_job_reruns_no_carried_turn_or_call(tmp_path: Path) -> None:
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"}).start(timeout_s=120)
    try:
        jobs = JobClient(host)
        origin = jobs.wait(jobs.submit(MIXED_Q, mode="agent", tools=["function.growth_rate"]), timeout_s=180)
        assert origin["status"] == "completed", origin.get("error")
        assert [s["id"] for s in origin["steps"]] == ["t1", "t2", "answer"]
        host.kill()
        host.extra_env["OFFLINE_LLM_FAULTS"] = "write_answer:DELAY:1:60000"
        host.start(timeout_s=120)
        jobs = JobClient(host)
        before = executions(host)
        resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "turn-2", "changes": {}})
        assert resp.status_code == 202, resp.text
        fork_id = resp.json()["id"]
        wait_until(lambda: executions(host)["generate_response"] > before["generate_response"], "the answer to start")
        assert completions(host, fork_id) == Counter({"load_fork_base": 1, "agent_turn": 1})
        host.kill()
        host.extra_env.pop("OFFLINE_LLM_FAULTS")
        host.start(timeout_s=120)
        view = JobClient(host).wait(fork_id, timeout_s=180)
        assert view["status"] == "completed", view.get("error")
        assert [s.get("carried_over", False) for s in view["steps"]] == [True, True, False]
        assert view["answer"]["text"] == origin["answer"]["text"]
        # The carried turn's calls (the SQL and the lookup) never ran for the fork; the turn after them ran once.
        assert completions(host, fork_id) == Counter({"load_fork_base": 1, "agent_turn": 1, "generate_response": 1})
        ran = executions(host) - before
        assert ran == Counter({"load_fork_base": 1, "agent_turn": 1, "generate_response": 2}), ran
    finally:
        host.stop()


def test_kill_during_a_fork_of_a_workflow_run_reruns_no_carried_node(tmp_path: Path, azurite: Azurite) -> None:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "killfork" + uuid.uuid4().hex[:10],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start(timeout_s=120)
    try:
        jobs = JobClient(host)
        scout: dict[str, Any] = {
            "id": "scout",
            "name": "Scout",
            "instructions": "Find the policy.",
            "tools": ["consult_rag"],
        }
        workflow: dict[str, Any] = {
            "id": "killed",
            "name": "Killed",
            "nodes": [
                {"id": "scout", "kind": "agent", "agent": "scout",
                 "input": {"prompt": {"value": "refunds after 30 days"}}},
                {"id": "docs", "kind": "step", "step": "consult_rag", "after": ["scout"],
                 "input": {"query": {"value": "store credit"}}},
                {"id": "final", "kind": "step", "step": "generate_response", "after": ["docs"],
                 "input": {"question": {"value": "What is the refund policy?"}}},
            ],
        }  # fmt: skip
        for kind, body in (("agents", scout), ("workflows", workflow)):
            assert jobs.http.post(f"/api/{kind}", json=body).status_code == 201
        started = jobs.http.post("/api/workflows/killed/runs", json={})
        assert started.status_code == 202, started.text
        origin = jobs.wait(started.json()["id"], timeout_s=180)
        assert origin["status"] == "completed", origin.get("error")
        host.kill()
        host.extra_env["OFFLINE_LLM_FAULTS"] = "write_answer:DELAY:1:60000"
        host.start(timeout_s=120)
        jobs = JobClient(host)
        before = executions(host)
        fork_body = {"from_step": "docs", "changes": {"query": "damaged items"}}
        resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json=fork_body)
        assert resp.status_code == 202, resp.text
        fork_id = resp.json()["id"]
        wait_until(lambda: executions(host)["generate_response"] > before["generate_response"], "the answer to start")
        assert completions(host, fork_id) == Counter({"load_fork_base": 1, "load_definition": 1, "consult_rag": 1})
        host.kill()
        host.extra_env.pop("OFFLINE_LLM_FAULTS")
        host.start(timeout_s=120)
        view = JobClient(host).wait(fork_id, timeout_s=180)
        assert view["status"] == "completed", view.get("error")
        assert [s["id"] for s in view["steps"] if s.get("carried_over")] == ["scout"]
        assert view["steps"][1]["output"]["query"] == "damaged items"
        # The agent node (its turns, its lookups, its answer) never ran for the fork; only the answer in flight twice.
        each = {"load_fork_base": 1, "load_definition": 1, "consult_rag": 1, "generate_response": 1}
        assert completions(host, fork_id) == Counter(each)
        ran = executions(host) - before
        assert ran == Counter(each | {"generate_response": 2}), ran
    finally:
        host.stop()


def test_a_fork_of_another_users_job_is_404(tmp_path: Path) -> None:
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", extra_args=["--principal-header"]).start(timeout_s=120)
    try:
        alice, bob = (
            httpx.Client(base_url=host.base_url, headers={"X-Devhost-Principal": who}, timeout=60)
            for who in ("alice", "bob")
        )
        job_id = alice.post("/api/jobs", json={"question": MIXED_Q}).json()["id"]
        wait_until(lambda: alice.get(f"/api/jobs/{job_id}").json()["status"] == "completed", "alice's job")
        mine = bob.post("/api/jobs", json={"question": MIXED_Q}).json()["id"]
        body = {"from_step": "s1", "changes": {"sql": "SELECT name FROM regions"}}
        missing = {"error": {"code": "JOB_NOT_FOUND", "message": f"no job with id {job_id!r}"}}
        refused = bob.post(f"/api/jobs/{job_id}/fork", json=body)
        assert (refused.status_code, refused.json()) == (404, missing)
        for path in (f"/api/jobs/{job_id}/compare/{mine}", f"/api/jobs/{mine}/compare/{job_id}"):
            compared = bob.get(path)
            assert (compared.status_code, compared.json()) == (404, missing)
        # Alice forks her own job: the fork is hers, and bob does not see it either.
        forked = alice.post(f"/api/jobs/{job_id}/fork", json=body)
        assert forked.status_code == 202, forked.text
        fork_id = forked.json()["id"]
        assert bob.get(f"/api/jobs/{fork_id}").status_code == 404
        assert alice.get(f"/api/jobs/{fork_id}").json()["forked_from"]["job"] == job_id
    finally:
        host.stop()
