"""Agent-mode jobs end to end over HTTP on a real devhost process running the app on embedded defaults.

The offline Executor picks the tools; every tool call is a step of the view and every Executor turn a
line of its log. The crash tests SIGKILL the host during a tool call (held open by a slow offline model
call, ``OFFLINE_LLM_FAULTS=write_sql:DELAY:…``) and during a wait, then start it again on the same data:
the job completes, and activity executions are counted from the host's own log across both lives
("Executing 'Functions.<name>'") against the completions in the Durable history, so a tool call whose
result was committed and ran again would show.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

# Documents first, then data: the offline Executor calls consult_rag (t1), then execute_azure_sql (t2).
COMPOUND_Q = (
    "What does the returns policy say about refunds after 30 days, and which region had the most returns in Q3?"
)
SQL_Q = "Which region had the most returns in Q3?"
NOTHING_Q = "Tell me about blorps"
ACTIVITIES = ("agent_turn", "consult_rag", "execute_azure_sql", "generate_response", "call_tool")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("agent-host"), env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def submit(jobs: JobClient, question: str, **body: Any) -> str:
    return jobs.submit(question, mode="agent", **body)


def kinds(view: dict[str, Any]) -> list[str]:
    return [s["kind"] for s in view["steps"]]


def messages(view: dict[str, Any]) -> list[str]:
    return [e["message"] for e in view["log"]["entries"]]


def history(host: DevHostProcess, job_id: str) -> list[dict[str, Any]]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true", "showInput": "true"}
    resp = host.client.get(host.webhook(f"instances/{job_id}"), params=params)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["historyEvents"])


def completions(host: DevHostProcess, job_id: str) -> Counter[tuple[str, str]]:
    """How many times each task (its activity, and ``<step>:<attempt>``) completed in the job's Durable history."""
    done: Counter[tuple[str, str]] = Counter()
    for event in history(host, job_id):
        if event["EventType"] in ("TaskCompleted", "TaskFailed"):
            done[(str(event["FunctionName"]), str(event["Input"]["task_id"]).split(":", 1)[1])] += 1
    return done


def per_function(done: Counter[tuple[str, str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (function, _), count in done.items():
        out[function] += count
    return out


def executions(host: DevHostProcess) -> Counter[str]:
    """How many times each activity function started, over every life of the host (its log is appended)."""
    names = re.findall(r"Executing 'Functions\.(\w+)'", host.output())
    return Counter(n for n in names if n in ACTIVITIES)


def restart(host: DevHostProcess, **env_changes: str | None) -> JobClient:
    """SIGKILL the host, change its environment, start it again on the same data."""
    host.kill()
    for name, value in env_changes.items():
        if value is None:
            host.extra_env.pop(name, None)
        else:
            host.extra_env[name] = value
    host.start()
    return JobClient(host)


def wait_for(check: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- whole jobs -------------------------------------------------------------------------------------


def test_a_compound_question_is_answered_from_data_and_documents(jobs: JobClient) -> None:
    view = jobs.wait(submit(jobs, COMPOUND_Q))
    assert view["status"] == "completed", view.get("error")
    assert view["mode"] == "agent" and view["plan"] == {"status": "agent"}
    assert kinds(view) == ["consult_rag", "execute_azure_sql", "generate_response"]
    rag, sql, answer = view["steps"]
    # Each tool call is a step with the turn that made it, its input and a summary of its output.
    assert rag["turn"] == sql["turn"] == 1 and "turn" not in answer
    assert json.loads(rag["tool_input"])["query"] and json.loads(sql["tool_input"])["question"]
    assert rag["tool_output"].startswith(f"{len(rag['output']['chunks'])} passages")
    assert sql["tool_output"].startswith(f"{sql['output']['row_count']} rows")
    assert all(s["state"] == "succeeded" and s["started_at"] and s["ended_at"] for s in view["steps"])
    citations = view["answer"]["citations"]
    assert {c["kind"] for c in citations} == {"document", "sql"}
    assert f"sql:{sql['id']}" in {c["source_id"] for c in citations}
    assert {c["source_id"] for c in citations if c["kind"] == "document"} <= {
        c["source_id"] for c in rag["output"]["chunks"]
    }
    # The Executor's reasoning and the tools it chose are in the log, one line per turn.
    turns = [m for m in messages(view) if m.startswith("agent_turn")]
    assert len(turns) == 2 == view["agent"]["turns"]
    assert turns[0].startswith("agent_turn (attempt 1): success (")
    assert "calls consult_rag, execute_azure_sql — " in turns[0] and "question for the documents" in turns[0]
    assert "calls format_output — " in turns[1]
    # The turns' usage is its own line of the usage block, and every token is counted once.
    usage = view["usage"]
    assert usage["executor"]["total_tokens"] > 0 and usage["planning"]["total_tokens"] == 0
    parts = [usage["planning"], usage["supervisor"], usage["executor"], *usage["by_step"].values()]
    assert usage["total"]["total_tokens"] == sum(p["total_tokens"] for p in parts)
    assert view["agent"] == {"turns": 2, "max_turns": 8, "tool_calls": 2, "max_tool_calls": 12}


def test_a_question_nothing_matches_asks_the_user_and_the_answer_resumes_it_once(jobs: JobClient) -> None:
    job_id = submit(jobs, NOTHING_Q, agent={"max_turns": 6, "max_tool_calls": 4})
    waiting = jobs.wait(job_id, {"waiting_for_user"})
    question = waiting["waiting"]
    assert question["kind"] == "clarify" and "Which topic do you mean?" in question["question"]
    assert question["options"] == ["revenue", "returns", "orders", "policies"]
    step = waiting["steps"][waiting["current_step_index"]]
    assert step["kind"] == "request_user_feedback" and step["state"] == "waiting" and step["turn"] == 1
    assert json.loads(step["tool_input"])["question"] == question["question"]
    assert waiting["plan"] == {"status": "agent"} and waiting["agent"]["tool_calls"] == 1
    assert jobs.answer(job_id, "returns").status_code == 202
    # The same answer again is accepted again (a client that got no response); another one is refused.
    again = jobs.answer(job_id, "returns", question_id=question["question_id"])
    assert again.status_code == 202 and again.json()["repeated"] is True
    other = jobs.answer(job_id, "orders", question_id=question["question_id"])
    assert other.status_code == 409 and other.json()["error"]["code"] == "ALREADY_ANSWERED"
    view = jobs.wait(job_id)
    assert view["status"] == "completed", view.get("error")
    assert kinds(view) == ["request_user_feedback", "consult_rag", "generate_response"]
    asked, search = view["steps"][0], view["steps"][1]
    assert asked["state"] == "succeeded" and json.loads(asked["tool_output"]) == {"answer": "returns"}
    assert "returns" in json.loads(search["tool_input"])["query"] and search["turn"] == 2
    assert sum(m.startswith("user answered") for m in messages(view)) == 1
    assert any("The user means 'returns'" in m for m in messages(view))
    # The answer is written for the question as the user explained it; the documents still have no blorps.
    assert "do not mention “blorps”" in view["answer"]["text"] and view["answer"]["citations"] == []


def test_sql_the_executor_chooses_waits_for_approval_when_the_job_requires_it(jobs: JobClient) -> None:
    job_id = submit(jobs, SQL_Q, approval={"sql": "always"})
    waiting = jobs.wait(job_id, {"waiting_for_user"})
    question = waiting["waiting"]
    assert question["kind"] == "approval" and question["options"] == ["approve", "edit", "reject", "abort"]
    step = waiting["steps"][waiting["current_step_index"]]
    assert step["kind"] == "execute_azure_sql" and step["state"] == "waiting" and step["turn"] == 1
    assert step["draft"]["sql"] == question["details"]["sql"] and "output" not in step
    assert jobs.answer(job_id, "approve").status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed", view.get("error")
    sql = view["steps"][0]
    assert sql["output"]["sql"] == question["details"]["sql"] and sql["output"]["rows"]
    assert any(c["kind"] == "sql" for c in view["answer"]["citations"])


# --- crashes ----------------------------------------------------------------------------------------


def test_kill_during_a_tool_call_then_restart_runs_only_the_unfinished_call_again(tmp_path: Path) -> None:
    # The SQL writer's model call takes a minute the first time: the SQL tool call is in flight when the host dies.
    env = {"JOB_RETRY_FIRST_INTERVAL_MS": "50", "OFFLINE_LLM_FAULTS": "write_sql:DELAY:1:60000"}
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()
    try:
        jobs = JobClient(host)
        job_id = submit(jobs, COMPOUND_Q)
        wait_for(lambda: executions(host)["execute_azure_sql"] == 1, "the SQL tool call to start")

        # Both calls of the turn started together; the search's result is committed while the SQL call runs.
        def searched() -> bool:
            lines = [e["message"] for e in jobs.view(job_id, log_limit=1000)["log"]["entries"]]
            return any(line.startswith("t1 consult_rag (attempt 1): success") for line in lines)

        wait_for(searched, "the search's result to be committed")
        before = jobs.view(job_id)
        assert [(s["id"], s["kind"], s["state"]) for s in before["steps"]] == [
            ("t1", "consult_rag", "running"),
            ("t2", "execute_azure_sql", "running"),
        ]
        # The turn goes on when both are back: until then no step shows a result it has not taken.
        assert all("output" not in s for s in before["steps"])
        jobs = restart(host, OFFLINE_LLM_FAULTS=None)
        view = jobs.wait(job_id)
        assert view["status"] == "completed", view.get("error")
        assert {c["kind"] for c in view["answer"]["citations"]} == {"document", "sql"}
        assert view["steps"][0]["output"]["chunks"]
        assert view["steps"][1]["attempts"] == 1  # the crash is not a failed attempt: the same call ran again
        done = completions(host, job_id)
        assert set(done.values()) == {1}, done  # no task completed twice
        ran = executions(host)
        # Every committed call ran once; only the call in flight at the kill ran a second time.
        assert ran == per_function(done) + Counter({"execute_azure_sql": 1}), (ran, done)
        assert ran == Counter({"agent_turn": 2, "consult_rag": 1, "execute_azure_sql": 2, "generate_response": 1})
    finally:
        host.stop()


@pytest.mark.parametrize("wait", ["approval", "clarify"])
def test_kill_during_a_wait_then_restart_and_answer_completes_without_rerunning_calls(
    tmp_path: Path, wait: str
) -> None:
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"}).start()
    try:
        jobs = JobClient(host)
        if wait == "approval":
            job_id, reply = submit(jobs, COMPOUND_Q, approval={"sql": "always"}), "approve"
        else:
            job_id, reply = submit(jobs, NOTHING_Q), "returns"
        before = jobs.wait(job_id, {"waiting_for_user"})
        assert before["waiting"]["kind"] == wait
        done_before = {s["id"]: s.get("output") for s in before["steps"] if s["state"] == "succeeded"}
        ran_before = executions(host)
        jobs = restart(host)
        after = jobs.view(job_id)
        assert after["status"] == "waiting_for_user" and after["waiting"] == before["waiting"]
        assert after["steps"] == before["steps"] and after["agent"] == before["agent"]
        assert executions(host) == ran_before  # the restart re-ran nothing: the job only waits
        assert jobs.answer(job_id, reply).status_code == 202
        view = jobs.wait(job_id)
        assert view["status"] == "completed", view.get("error")
        for step_id, output in done_before.items():
            assert next(s for s in view["steps"] if s["id"] == step_id).get("output") == output
        done = completions(host, job_id)
        assert set(done.values()) == {1}, done
        assert executions(host) == per_function(done)  # each activity ran exactly once per completion
        assert sum(m.startswith("user answered") for m in messages(view)) == 1
    finally:
        host.stop()


def test_the_ask_cli_runs_an_agent_job_and_shows_the_same_view(jobs: JobClient, host: DevHostProcess) -> None:
    assert host.keys is not None
    command = [sys.executable, "-m", "devhost", "ask", COMPOUND_Q, "--mode", "agent", "--json"]
    command += ["--url", host.base_url, "--key", host.keys.function]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = json.loads(done.stdout)
    assert shown["mode"] == "agent" and shown["status"] == "completed" and shown["plan"] == {"status": "agent"}
    again = jobs.view(shown["id"])
    assert [(s["id"], s["kind"], s["state"], s.get("turn")) for s in shown["steps"]] == [
        (s["id"], s["kind"], s["state"], s.get("turn")) for s in again["steps"]
    ]
    assert shown["agent"] == again["agent"] and shown["usage"] == again["usage"]
