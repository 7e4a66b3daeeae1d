"""Forks of planned jobs the offline planner never makes, over HTTP on devhost with the fake OpenAI server scripting
the model (issue 30): a plan with an ``agent`` step before the fork point, and a hybrid job the Supervisor replanned.

What ran is read from each fork's own Durable history: nothing carried over runs again (no Executor turn, no SQL, no
planning call), and the carried results reach the steps that run (the answer is given the same sources).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.jobclient import JobClient
from tests.jobs.test_fork_e2e import activities_run, fork, started

AOAI_KEY = "fake-aoai-key-fork"
MONTHLY_SQL = (
    "SELECT strftime('%m', order_date) AS month, COUNT(*) AS orders FROM orders "
    "WHERE order_date < '2025-07-01' GROUP BY month ORDER BY month"
)
QUESTION = "How did orders per month go in the first half, and what does the policy say about refunds?"
ANSWER = {"answer": "Orders rose [sql:s1].", "citations": [], "claims": []}


def step(step_id: str, kind: str, depends_on: list[str] | None = None, **inp: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": kind, "title": f"{kind} {step_id}", "input": inp, "depends_on": depends_on or []}


def call(tool: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "arguments_json": json.dumps(arguments)}


def turn(*calls: dict[str, Any], reasoning: str) -> JsonReply:
    return JsonReply({"reasoning": reasoning, "tool_calls": list(calls)})


def decision(action: str, reason: str) -> JsonReply:
    return JsonReply({"action": action, "reason": reason})


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=AOAI_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def host(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "LLM_PROVIDER": "azure_openai",
        "AZURE_OPENAI_ENDPOINT": llm.endpoint,
        "AZURE_OPENAI_API_KEY": AOAI_KEY,
        "AZURE_OPENAI_CHAT_DEPLOYMENT": "fork-dep",
        "SQL_PROVIDER": "sqlite",
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("fork-fakes-host"), env=env)
    proc.start(timeout_s=120)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def answer_sources(llm: FakeOpenAI) -> str:
    """What the last answer request was given (its user message: the question, the sources, the notes)."""
    return llm.requests_for("write_answer")[-1].user_text


def test_a_fork_after_an_agent_step_runs_no_turn_or_call_again(
    llm: FakeOpenAI, host: DevHostProcess, jobs: JobClient
) -> None:
    llm.reset()
    plan = {
        "steps": [
            step("s1", "agent", question="Orders per month"),
            step("s2", "generate_response", ["s1"], question=QUESTION),
        ]
    }
    llm.always(JsonReply(plan), task="plan")
    llm.script(
        turn(call("execute_azure_sql", {"question": "Orders per month", "sql": MONTHLY_SQL}, "q"), reasoning="R1"),
        turn(call("format_output", {}, "end"), reasoning="R2 done"),
        task="agent_turn",
    )
    llm.always(JsonReply(ANSWER), task="write_answer")
    origin = jobs.wait(jobs.submit(QUESTION), timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    given = answer_sources(llm)
    assert 'source="sql:s1-t1"' in given  # the agent step's rows reached the answer
    turns = len(llm.requests_for("agent_turn"))

    resp = fork(jobs, origin["id"], "s2", constraints={"max_tokens": 900})
    assert resp.json()["carried_over"] == ["s1"]
    view = jobs.wait(started(resp), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert [name for name, _ in activities_run(host, view["id"])] == ["load_fork_base", "generate_response"]
    assert len(llm.requests_for("agent_turn")) == turns  # no Executor turn
    # The agent step's result, rebuilt from the origin's turns and calls, is what the answer is given again.
    assert answer_sources(llm) == given
    out = view["steps"][0]["output"]
    assert view["steps"][0]["carried_over"] is True
    assert out["tool_calls"] == [{"id": "q", "tool": "execute_azure_sql", "success": True}]
    assert out["turns"] == 2 and out["reasoning"] == ["R1", "R2 done"] and out["question"] == "Orders per month"
    assert [row[1] for row in out["parts"][0]["rows"]] == [row[1] for row in origin_rows(origin)]
    # What the carried step used in the origin (its calls and the Executor's turns) is counted apart, all of it.
    used = origin["usage"]
    carried = used["total"]["total_tokens"] - used["planning"]["total_tokens"] - used["by_step"]["s2"]["total_tokens"]
    assert view["usage"]["carried_over"]["total_tokens"] == carried > 0


def origin_rows(view: dict[str, Any]) -> list[list[Any]]:
    (sql_call,) = view["steps"][0]["tool_calls"]
    return list(sql_call["output"]["rows"])


def test_a_replanned_hybrid_job_forks_with_the_plan_in_force_at_the_fork_point(
    llm: FakeOpenAI, host: DevHostProcess, jobs: JobClient
) -> None:
    llm.reset()
    first = {"steps": [step("s1", "execute_azure_sql", question="Orders per month", sql=MONTHLY_SQL),
                       step("s2", "generate_response", ["s1"], question=QUESTION)]}  # fmt: skip
    again = {"steps": [step("s1", "consult_rag", query="refunds after 30 days"),
                       step("s2", "generate_response", ["s1"], question=QUESTION)]}  # fmt: skip
    llm.script(JsonReply(first), JsonReply(again), task="plan")
    llm.script(decision("replan", "the plan forgot the policy"), task="supervise")
    llm.always(decision("continue", "enough"), task="supervise")
    llm.always(JsonReply(ANSWER), task="write_answer")
    origin = jobs.wait(jobs.submit(QUESTION, mode="hybrid"), timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    assert [s["id"] for s in origin["steps"]] == ["s1", "s1r1", "s2r1"]
    given = answer_sources(llm)

    # At the answer: the plan in force (the replan, its answer citing what ran before it) without any planning.
    at_answer = jobs.wait(started(fork(jobs, origin["id"], "s2r1")), timeout_s=180)
    assert at_answer["status"] == "completed", at_answer.get("error")
    assert [n for n, _ in activities_run(host, at_answer["id"])] == ["load_fork_base", "generate_response"]
    assert answer_sources(llm) == given
    assert [s["id"] for s in at_answer["steps"] if s.get("carried_over")] == ["s1", "s1r1"]

    # At the replanned lookup with an edit: it runs, the Supervisor looks after it, then the answer; no plan call.
    plans = len(llm.requests_for("plan"))
    at_lookup = jobs.wait(started(fork(jobs, origin["id"], "s1r1", query="store credit")), timeout_s=180)
    assert at_lookup["status"] == "completed", at_lookup.get("error")
    ran = [n for n, _ in activities_run(host, at_lookup["id"])]
    assert ran == ["load_fork_base", "consult_rag", "supervise", "generate_response"], ran
    assert len(llm.requests_for("plan")) == plans
    assert [s["id"] for s in at_lookup["steps"]] == ["s1", "s1r1", "s2r1"]
    assert at_lookup["steps"][1]["output"]["query"] == "store credit"
    assert "sql:s1" in answer_sources(llm)  # the replan's answer still cites the SQL step carried over


def test_what_a_person_told_the_supervisor_reaches_the_steps_after_the_fork_point(
    llm: FakeOpenAI, host: DevHostProcess, jobs: JobClient
) -> None:
    llm.reset()
    plan = {
        "steps": [
            step("s1", "consult_rag", query="refunds after 30 days"),
            step("s2", "generate_response", question=QUESTION),
        ]
    }
    llm.always(JsonReply(plan), task="plan")
    asked = {"action": "ask_user", "reason": "which store?", "question": "Which store?", "options": ["online", "shop"]}
    llm.script(JsonReply(asked), task="supervise")
    llm.always(JsonReply(ANSWER), task="write_answer")
    job_id = jobs.submit(QUESTION, mode="hybrid")
    waiting = jobs.wait(job_id, {"waiting_for_user"}, timeout_s=180)["waiting"]
    assert waiting["step_id"] == "s1" and waiting["question"] == "Which store?", waiting
    assert jobs.answer(job_id, "online only").status_code == 202
    origin = jobs.wait(job_id, timeout_s=180)
    assert origin["status"] == "completed", origin.get("error")
    given = answer_sources(llm)
    assert "(online only)" in given  # the answer's question carries what the person said

    view = jobs.wait(started(fork(jobs, job_id, "s2", constraints={"max_tokens": 900})), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    # Nobody is asked again; the answer step is given the same question and sources as in the origin.
    assert [n for n, _ in activities_run(host, view["id"])] == ["load_fork_base", "generate_response"]
    assert view["waiting"] is None and answer_sources(llm) == given
