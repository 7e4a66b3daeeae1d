"""Agent mode: the Executor's loop, its bounds, its waits, its failures and the trust barriers, driven inline.

Scripted tests give the Executor's turns as executor outputs (the contract, not mocks of it); the
offline tests run the real executors, the offline Executor included.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.settings import Settings
from tests.jobs.test_policy_inline import ANSWER_OK, RAG_OK, Script, fail, ok

OFFLINE = Clients(Settings(llm_provider="offline", search_provider="local", sql_provider="sqlite"))
SQL_ROWS = {"sql": "SELECT 1", "columns": ["x"], "rows": [[1]], "row_count": 1, "dialect": "sqlite"}


def turn(*calls: tuple[str, dict[str, Any]], reasoning: str = "thinking") -> dict[str, Any]:
    tool_calls = [{"id": f"c{i}", "tool": t, "arguments_json": json.dumps(a)} for i, (t, a) in enumerate(calls, 1)]
    return ok({"reasoning": reasoning, "tool_calls": tool_calls})


DONE = turn(("format_output", {}), reasoning="done")


def job(script: Any, answer: Any = None, **request: Any) -> tuple[dict[str, Any], InlineContext]:
    payload = {
        "job_id": "j1",
        "request": {"question": "What about refunds?", "mode": "agent", **request},
        "policy": {"max_attempts_per_model": 3, "first_retry_ms": 1, "max_retry_ms": 5, "output_price": {"m1": 1e-6}},
    }
    ctx = InlineContext(payload, script, answer)
    return run_inline(job_orchestrator_body, ctx), ctx


def names(script: Script) -> list[str]:
    return [n for n, _ in script.calls]


def transcript_seen(script: Script, index: int = -1) -> list[dict[str, Any]]:
    turns = [p for n, p in script.calls if n == "agent_turn"]
    return turns[index]["task"]["transcript"]


def test_turns_call_tools_as_steps_then_the_answer_cites_what_they_found() -> None:
    script = Script(
        agent_turn=[turn(("consult_rag", {"query": "refunds"}), ("execute_azure_sql", {"question": "refunds"})), DONE],
        consult_rag=[ok(RAG_OK)],
        execute_azure_sql=[ok(SQL_ROWS)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = job(script)
    assert result["status"] == "completed" and result["answer"] == ANSWER_OK["answer"]
    assert names(script) == ["agent_turn", "consult_rag", "execute_azure_sql", "agent_turn", "generate_response"]
    state = ctx.custom_status
    assert state["plan_status"] == "agent" and state["turns"] == 2
    assert [(s["id"], s["kind"], s["state"], s.get("turn")) for s in state["steps"]] == [
        ("t1", "consult_rag", "succeeded", 1),
        ("t2", "execute_azure_sql", "succeeded", 1),
        ("answer", "generate_response", "succeeded", None),
    ]
    assert state["steps"][0]["tool_input"] == '{"query": "refunds"}'
    assert state["steps"][1]["tool_output"] == "1 rows (x)"
    assert state["executor_usage"]["total_tokens"] == 40  # two turns of 20 tokens, apart from the tools
    sources = script.calls[-1][1]["execution_context"]["sources"]
    assert {s["source_id"] for s in sources} == {"policy#1", "sql:t1"} or len(sources) == 2
    # The second turn saw both results in the envelope.
    seen = transcript_seen(script)
    assert [(r["tool"], r["success"]) for r in seen] == [("consult_rag", True), ("execute_azure_sql", True)]


def test_a_failed_tool_goes_back_to_the_model_which_recovers() -> None:
    script = Script(
        agent_turn=[
            turn(("execute_azure_sql", {"question": "refunds"})),
            turn(("consult_rag", {"query": "refunds"}), reasoning="the data has no refunds; documents then"),
            DONE,
        ],
        execute_azure_sql=[fail("SQL_REJECTED", "no table holds refunds")],
        consult_rag=[ok(RAG_OK)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = job(script, answer=lambda event: pytest.fail(f"asked the user: {event}"))
    assert result["status"] == "completed"
    seen = transcript_seen(script, 1)
    assert seen[0]["success"] is False and seen[0]["error"] == {
        "code": "SQL_REJECTED",
        "message": "no table holds refunds",
    }
    assert [s["state"] for s in ctx.custom_status["steps"]] == ["failed", "succeeded", "succeeded"]


def test_a_retryable_tool_failure_is_retried_by_the_policy_not_the_model() -> None:
    script = Script(
        agent_turn=[turn(("consult_rag", {"query": "refunds"})), DONE],
        consult_rag=[fail("TRANSIENT"), fail("RATE_LIMITED"), ok(RAG_OK)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = job(script)
    assert result["status"] == "completed"
    assert ctx.custom_status["steps"][0]["attempts"] == 3
    assert transcript_seen(script)[0]["success"] is True


def test_a_model_that_never_stops_is_stopped_by_its_bounds() -> None:
    forever = turn(("consult_rag", {"query": "refunds"}), ("consult_rag", {"query": "refunds again"}))
    script = Script(agent_turn=[forever] * 10, consult_rag=[ok(RAG_OK)] * 10, generate_response=[ok(ANSWER_OK)])
    result, ctx = job(script, agent={"max_turns": 10, "max_tool_calls": 5})
    assert result["status"] == "completed"
    assert names(script).count("consult_rag") == 5
    assert names(script)[-1] == "generate_response"

    script = Script(agent_turn=[forever] * 3, consult_rag=[ok(RAG_OK)] * 6, generate_response=[ok(ANSWER_OK)])
    result, ctx = job(script, agent={"max_turns": 3, "max_tool_calls": 50})
    assert result["status"] == "completed" and names(script).count("agent_turn") == 3
    # Each turn is told what is left of its bounds.
    turns = [p["task"] for n, p in script.calls if n == "agent_turn"]
    assert [(t["turns_left"], t["calls_left"]) for t in turns] == [(3, 50), (2, 48), (1, 46)]


def test_the_budget_is_checked_before_every_model_call() -> None:
    script = Script(agent_turn=[turn(("consult_rag", {"query": "refunds"}))] * 5, consult_rag=[ok(RAG_OK)] * 5)
    result, _ = job(script, constraints={"max_tokens": 10, "budget": {"max_total_tokens": 45}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    # The first turn and its lookup spent 40 tokens: the next turn's max_tokens (10) no longer fits 45.
    assert names(script) == ["agent_turn", "consult_rag"]


def test_the_executor_asks_the_user_and_the_answer_resumes_that_question_once() -> None:
    asked: list[str] = []

    def answer(event: str) -> Any:
        asked.append(event)
        return {"answer": "online orders"}

    script = Script(
        agent_turn=[
            turn(("request_user_feedback", {"question": "Which orders?", "options": ["online", "store"]})),
            DONE,
        ],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = job(script, answer)
    assert result["status"] == "completed" and asked == ["answer:t1-q1"]
    assert transcript_seen(script)[0]["data"] == {"answer": "online orders"}
    assert ctx.custom_status["questions_asked"] == 1
    # The answer is written for the question as the user explained it (as a planned job's clarification).
    assert script.calls[-1][1]["task"]["question"] == "What about refunds? (online orders)"


def test_get_job_state_is_read_only_and_runs_no_activity() -> None:
    script = Script(agent_turn=[turn(("get_job_state", {})), DONE], generate_response=[ok(ANSWER_OK)])
    job(script)
    assert names(script) == ["agent_turn", "agent_turn", "generate_response"]
    data = transcript_seen(script)[0]["data"]
    assert data["steps"][0]["tool"] == "get_job_state" and data["tool_calls_left"] == 11


@pytest.mark.parametrize(
    ("tool", "arguments", "why"),
    [
        ("execute_azure_sql", {"question": "refunds", "allow_sensitive": True}, "allow_sensitive"),
        ("execute_azure_sql", {"question": "refunds", "approved_sql": "SELECT * FROM customers_pii"}, "approved_sql"),
        ("consult_rag", {"query": ""}, "query"),
        ("call_tool", {"tool": "http.anything", "arguments": {}}, "unknown tool"),
        ("agent_turn", {}, "unknown tool"),
        ("http.weather", {"city": "Oslo"}, "unknown tool"),  # a family tool the job does not allow
        ("plan", {"question": "x"}, "unknown tool"),
    ],
)
def test_model_written_calls_never_widen_what_the_job_may_do(tool: str, arguments: dict[str, Any], why: str) -> None:
    script = Script(agent_turn=[turn((tool, arguments)), DONE], generate_response=[ok(ANSWER_OK)])
    result, ctx = job(script)
    assert result["status"] == "completed"
    assert names(script) == ["agent_turn", "agent_turn", "generate_response"]  # nothing ran for the call
    record = transcript_seen(script)[0]
    assert (
        record["success"] is False and record["error"]["code"] == "INVALID_INPUT" and why in record["error"]["message"]
    )
    assert ctx.custom_status["steps"][0]["state"] == "failed"


def test_arguments_that_are_not_an_object_are_refused() -> None:
    bad = ok({"reasoning": "", "tool_calls": [{"id": "c1", "tool": "consult_rag", "arguments_json": "[1, 2]"}]})
    script = Script(agent_turn=[bad, DONE], generate_response=[ok(ANSWER_OK)])
    job(script)
    assert transcript_seen(script)[0]["error"]["code"] == "INVALID_INPUT"


def test_sql_the_model_asks_for_still_needs_the_approval_the_job_requires() -> None:
    draft = ok({"sql": "SELECT 1", "tables": ["orders"], "sensitive_tables": [], "draft": True})
    approvals: list[str] = []

    def answer(event: str) -> Any:
        approvals.append(event)
        return {"answer": "approve"}

    script = Script(
        agent_turn=[turn(("execute_azure_sql", {"question": "orders by region"})), DONE],
        execute_azure_sql=[draft, ok(SQL_ROWS)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, _ = job(script, answer, approval={"sql": "always"})
    assert result["status"] == "completed" and approvals == ["answer:t1-q1"]
    runs = [p["execution_context"] for n, p in script.calls if n == "execute_azure_sql"]
    assert runs[0]["sql_mode"] == "draft" and runs[1]["approved_sql"] == "SELECT 1"


def test_an_invalid_turn_ends_the_loop_with_an_answer_from_what_was_found() -> None:
    script = Script(agent_turn=[ok({"tool_calls": "nope"})], generate_response=[ok(ANSWER_OK)])
    result, _ = job(script)
    assert result["status"] == "completed" and names(script) == ["agent_turn", "generate_response"]


# --- the offline Executor, end to end over the real executors ---------------------------------------------


def offline(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    # Clients of their own: another test may have left process-wide clients pointing elsewhere.
    return run_executor(payload, expected_type=name, clients=OFFLINE)


def test_offline_executor_looks_up_each_part_in_parallel_then_answers() -> None:
    question = "What was the revenue by region, and what does the refund policy say about damaged items?"
    calls: list[str] = []

    def act(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        calls.append(name)
        return offline(name, payload)

    result, ctx = job(act, question=question)
    assert result["status"] == "completed"
    assert calls == ["agent_turn", "execute_azure_sql", "consult_rag", "agent_turn", "generate_response"]
    steps = ctx.custom_status["steps"]
    assert [s["turn"] for s in steps[:2]] == [1, 1]  # both lookups came from one turn
    cited = {c["source_id"] for c in result["citations"]}
    assert "sql:t1" in cited and any(c.startswith("policies/") for c in cited)


def test_offline_executor_asks_when_nothing_matches_and_searches_the_answer() -> None:
    asked: list[str] = []

    def answer(event: str) -> Any:
        asked.append(event)
        return {"answer": "returns"}

    result, ctx = job(offline, answer, question="Tell me about blorps")
    assert result["status"] == "completed" and asked == ["answer:t1-q1"]
    kinds = [s["kind"] for s in ctx.custom_status["steps"]]
    assert kinds == ["request_user_feedback", "consult_rag", "generate_response"]


def test_a_job_at_its_bounds_fits_the_custom_status_limit_and_the_answer_sources() -> None:
    # 64 tool calls whose inputs and outputs fill their 200 characters: in full they would not fit 16 KB.
    long = "refunds " * 200
    eight = turn(*[("consult_rag", {"query": f"{i} {long}"}) for i in range(8)])
    # Each lookup finds 8 passages, one of them found before: 449 distinct sources for an answer that takes 200.
    rags = [
        ok(
            {
                "query": long,
                "chunks": [{"source_id": f"p{n}#{i}" if i else "p#0", "title": long[:150]} for i in range(8)],
            }
        )
        for n in range(64)
    ]
    # Every call is spent after the eighth turn: no ninth turn is asked for (it could run nothing).
    script = Script(agent_turn=[eight] * 8, consult_rag=rags, generate_response=[ok(ANSWER_OK)])
    payload = {
        "job_id": "j1",
        "request": {
            "question": "What about refunds?",
            "mode": "agent",
            "agent": {"max_turns": 32, "max_tool_calls": 64},
        },
        "policy": {"max_attempts_per_model": 3, "first_retry_ms": 1, "max_retry_ms": 5, "output_price": {"m1": 1e-6}},
    }
    ctx = InlineContext(payload, script)
    sizes: list[int] = []

    def publish(status: Any) -> None:
        # Measured as the host measures it: compact JSON in UTF-16 (devhost's episodes, the extension's check).
        sizes.append(len(json.dumps(status, separators=(",", ":"), ensure_ascii=False).encode("utf-16-le")))
        ctx.custom_status = status

    ctx.set_custom_status = publish  # type: ignore[method-assign]
    result = run_inline(job_orchestrator_body, ctx)
    assert result["status"] == "completed"
    assert max(sizes) <= 16 * 1024
    steps = ctx.custom_status["steps"]
    assert len(steps) == 65 and ctx.custom_status["turns"] == 8
    # The oldest calls are brief; the latest keep their whole entry; none lost its state or turn.
    assert steps[0] == {"id": "t1", "kind": "consult_rag", "state": "succeeded", "turn": 1}
    assert steps[63]["title"] == "consult_rag (turn 8)" and steps[63]["tool_output"].startswith("8 passages")
    assert [s.get("turn") for s in steps[:64]] == [1 + i // 8 for i in range(64)]
    assert all(s["state"] == "succeeded" for s in steps)
    sources = script.calls[-1][1]["execution_context"]["sources"]
    assert len(sources) == 200 and len({s["source_id"] for s in sources}) == 200
    assert sources[:2] == [
        {"source_id": "p#0", "kind": "document", "title": long[:150], "content": ""},
        {"source_id": "p0#1", "kind": "document", "title": long[:150], "content": ""},
    ]


def test_a_turn_that_cannot_work_stops_the_job_and_one_that_failed_otherwise_answers() -> None:
    script = Script(agent_turn=[fail("CONFIG_ERROR", "the job allows tool 'http.x', which is not configured")])
    result, _ = job(script)
    assert result["status"] == "failed" and result["error"]["code"] == "CONFIG_ERROR"
    assert result["error"]["message"].startswith("the Executor failed: ")

    script = Script(agent_turn=[fail("BAD_REQUEST", "not JSON")], generate_response=[ok(ANSWER_OK)])
    result, _ = job(script)
    assert result["status"] == "completed" and names(script) == ["agent_turn", "generate_response"]


class FanOutRecorder(InlineContext):
    """An inline context that records how many activities each fan-out started together."""

    fan_outs: list[int]

    def task_all(self, tasks: list[Any]) -> Any:
        self.fan_outs.append(len(tasks))
        return super().task_all(tasks)


def fan_out_job(script: Script, **request: Any) -> tuple[dict[str, Any], FanOutRecorder]:
    payload = {
        "job_id": "j1",
        "request": {"question": "What about refunds?", "mode": "agent", **request},
        "policy": {"max_attempts_per_model": 3, "first_retry_ms": 1, "max_retry_ms": 5},
    }
    ctx = FanOutRecorder(payload, script, lambda _event: {"answer": "approve"})
    ctx.fan_outs = []
    return run_inline(job_orchestrator_body, ctx), ctx


def test_the_calls_of_one_turn_that_need_no_person_start_together() -> None:
    calls = (("consult_rag", {"query": "refunds"}), ("execute_azure_sql", {"question": "refunds"}))
    script = Script(
        agent_turn=[turn(*calls, ("consult_rag", {"query": "returns"})), DONE],
        consult_rag=[ok(RAG_OK), fail("TRANSIENT"), ok(RAG_OK)],
        execute_azure_sql=[ok(SQL_ROWS)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = fan_out_job(script)
    assert result["status"] == "completed" and ctx.fan_outs == [3]
    # The failed first attempt (the second search) is retried by the policy on its own, as any step.
    steps = ctx.custom_status["steps"]
    assert [s["attempts"] for s in steps[:3]] == [1, 1, 2]
    first_ids = [p["task_id"] for n, p in script.calls[1:4]]
    assert first_ids == ["j1:t1:1", "j1:t2:1", "j1:t3:1"]


def test_a_call_that_may_need_a_person_is_not_started_ahead() -> None:
    draft = ok({"sql": "SELECT 1", "tables": ["orders"], "sensitive_tables": [], "draft": True})
    script = Script(
        agent_turn=[turn(("execute_azure_sql", {"question": "q"}), ("consult_rag", {"query": "refunds"})), DONE],
        execute_azure_sql=[draft, ok(SQL_ROWS)],
        consult_rag=[ok(RAG_OK)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = fan_out_job(script, approval={"sql": "always"})
    assert result["status"] == "completed" and ctx.fan_outs == []  # one call alone is no fan-out
    assert [n for n, _ in script.calls][1:4] == ["execute_azure_sql", "execute_azure_sql", "consult_rag"]


# --- an agent step inside a planned job --------------------------------------------------------------------

AGENT_PLAN = {
    "steps": [
        {"id": "s1", "kind": "agent", "title": "work it", "input": {"question": "refunds and their numbers"}},
        {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}, "depends_on": ["s1"]},
    ]
}


def test_a_planned_agent_step_works_its_part_with_tools_and_the_answer_cites_what_it_found() -> None:
    script = Script(
        plan=[ok(AGENT_PLAN)],
        agent_turn=[turn(("consult_rag", {"query": "refunds"}), ("execute_azure_sql", {"question": "refunds"})), DONE],
        consult_rag=[ok(RAG_OK)],
        execute_azure_sql=[ok({**SQL_ROWS, "source_id": "sql:s1-t2"})],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = job(script, mode="deterministic")
    assert result["status"] == "completed"
    steps = ctx.custom_status["steps"]
    # The plan's steps stay as planned; the agent step's calls are its own, numbered after it.
    assert [(s["id"], s["kind"], s["state"]) for s in steps] == [
        ("s1", "agent", "succeeded"),
        ("s2", "generate_response", "succeeded"),
    ]
    assert steps[0]["tool_output"] == "2 tool calls in 2 turns"
    turns = [p["task"] for n, p in script.calls if n == "agent_turn"]
    assert turns[0]["question"] == "refunds and their numbers"
    assert [p["task_id"] for n, p in script.calls if n in ("consult_rag", "execute_azure_sql")] == [
        "j1:s1-t1:1",
        "j1:s1-t2:1",
    ]
    sources = script.calls[-1][1]["execution_context"]["sources"]
    assert {s["source_id"] for s in sources} == {"policy#1", "sql:s1-t2"}
    assert ctx.custom_status["executor_usage"]["total_tokens"] == 40
    assert result["status"] == "completed"
    agent_out = next(p for n, p in script.calls if n == "generate_response")["execution_context"]["sources"]
    assert agent_out  # the step's lookups are the answer's sources


def test_the_view_shows_an_agent_steps_calls_from_the_history() -> None:
    from api.view import agent_step_calls

    history = [
        {
            "EventType": "TaskCompleted",
            "FunctionName": "consult_rag",
            "ScheduledTime": "2026-01-01T00:00:00.000Z",
            "Timestamp": "2026-01-01T00:00:00.250Z",
            "Input": {"task_id": "j1:s1-t1:1", "executor_type": "consult_rag", "task": {"query": "refunds"}},
            "Result": {"status": "success", "result": RAG_OK, "usage": {"total_tokens": 0}},
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "call_tool",
            "ScheduledTime": "2026-01-01T00:00:01Z",
            "Timestamp": "2026-01-01T00:00:01.1Z",
            "Input": {
                "task_id": "j1:s1-t2:2",
                "executor_type": "call_tool",
                "task": {"tool": "function.growth_rate", "arguments": {"values": [1, 2]}},
            },
            "Result": {"status": "failed", "error": {"code": "TOOL_ERROR", "message": "no"}, "usage": {}},
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "consult_rag",
            "Input": {"task_id": "j1:t1:1", "executor_type": "consult_rag", "task": {"query": "x"}},
            "Result": {"status": "success", "result": RAG_OK},
        },
    ]
    calls = agent_step_calls(history, {"s1"})["s1"]
    assert [(c["id"], c["tool"], c["state"], c["attempts"], c["duration_ms"]) for c in calls] == [
        ("s1-t1", "consult_rag", "succeeded", 1, 250),
        ("s1-t2", "function.growth_rate", "failed", 2, 100),
    ]
    assert calls[0]["input"] == {"query": "refunds"} and calls[0]["output"] == RAG_OK
    assert calls[1]["input"] == {"values": [1, 2]} and calls[1]["error"]["code"] == "TOOL_ERROR"


def test_an_agent_step_takes_only_a_question() -> None:
    plan = {
        "steps": [
            {"id": "s1", "kind": "agent", "title": "w", "input": {"question": "q", "tools": ["http.x"]}},
            {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
        ]
    }
    result, _ = job(Script(plan=[ok(plan)]), mode="deterministic")
    assert result["status"] == "failed" and "input.tools may not be set on a agent step" in result["error"]["message"]
