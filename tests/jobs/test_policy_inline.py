"""The orchestrator's policy, driven inline with scripted executor outputs (the contract, not mocks of it).

End-to-end tests with the real executors on devhost live in test_jobs_e2e.py; these pin the
decisions: retries, model fallback, budget stops and the questions the job asks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.jobs.contracts import ExecutorOutput, Usage

PLAN = {
    "steps": [
        {"id": "s1", "kind": "consult_rag", "title": "docs", "input": {"query": "refunds"}},
        {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}, "depends_on": ["s1"]},
    ]
}
RAG_OK = {"query": "refunds", "chunks": [{"source_id": "policy#1", "title": "Policy", "content": "30 days"}]}
ANSWER_OK = {"answer": "Refunds within 30 days.", "citations": [{"source_id": "policy#1", "kind": "document"}]}


def ok(result: dict[str, Any], tokens: int = 10, model: str | None = "m1") -> dict[str, Any]:
    usage = Usage(tokens_input=tokens, tokens_output=tokens)
    return ExecutorOutput(status="success", result=result, usage=usage, model_used=model).model_dump(mode="json")


def fail(code: str, message: str = "boom", tokens: int = 0) -> dict[str, Any]:
    out = ExecutorOutput.failure(code, message, usage=Usage(tokens_input=tokens))  # type: ignore[arg-type]
    return out.model_dump(mode="json")


class Script:
    """Executor outputs per executor type, in call order; records every call."""

    def __init__(self, **outputs: list[dict[str, Any]]) -> None:
        self.outputs = {k: list(v) for k, v in outputs.items()}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, payload))
        return self.outputs[name].pop(0)


def job_input(**request: Any) -> dict[str, Any]:
    return {
        "job_id": "j1",
        "request": {"question": "What about refunds?", **request},
        "policy": {"max_attempts_per_model": 3, "first_retry_ms": 1, "max_retry_ms": 5, "output_price": {"m1": 1e-6}},
    }


def run(script: Script, answer: Callable[[str], Any] | None = None, **request: Any) -> tuple[dict, InlineContext]:
    ctx = InlineContext(job_input(**request), script, answer)
    return run_inline(job_orchestrator_body, ctx), ctx


def test_happy_path_counts_usage_per_step() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK, 0, None)], generate_response=[ok(ANSWER_OK, 50)])
    result, ctx = run(script)
    assert result["status"] == "completed" and result["answer"] == ANSWER_OK["answer"]
    state = ctx.custom_status
    assert [s["state"] for s in state["steps"]] == ["succeeded", "succeeded"]
    assert state["usage"]["total_tokens"] == 20 + 100
    sources = script.calls[-1][1]["execution_context"]["sources"]
    assert sources == [{"source_id": "policy#1", "kind": "document", "title": "Policy", "content": "30 days"}]


def test_retryable_failures_back_off_then_succeed() -> None:
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[ok(RAG_OK)],
        generate_response=[fail("RATE_LIMITED"), fail("MODEL_TIMEOUT"), ok(ANSWER_OK)],
    )
    result, ctx = run(script)
    assert result["status"] == "completed"
    assert ctx.custom_status["steps"][1]["attempts"] == 3
    attempts = [p["execution_context"]["attempt"] for n, p in script.calls if n == "generate_response"]
    assert attempts == [1, 2, 3]


def test_falls_back_across_allowed_models() -> None:
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[ok(RAG_OK)],
        generate_response=[fail("CONTENT_FILTERED"), ok(ANSWER_OK, model="m2")],
    )
    result, ctx = run(script, constraints={"allowed_models": ["m1", "m2"]})
    assert result["status"] == "completed"
    models = [p["execution_context"]["model"] for n, p in script.calls if n == "generate_response"]
    assert models == ["m1", "m2"]
    assert ctx.custom_status["steps"][1]["model"] == "m2"


def test_exhausted_retries_then_fallback_then_ask_user() -> None:
    failures = [fail("RATE_LIMITED")] * 3
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=failures + [ok(ANSWER_OK)])
    asked: list[str] = []

    def answer(event: str) -> Any:
        asked.append(event)
        return {"answer": "retry"}

    result, _ = run(script, answer)
    assert result["status"] == "completed"
    assert asked == ["answer:s2-q1"]


def test_non_retryable_failure_edit_changes_the_step_input() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR"), ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, lambda e: {"answer": {"action": "edit", "query": "refund policy"}})
    assert result["status"] == "completed"
    queries = [p["task"]["query"] for n, p in script.calls if n == "consult_rag"]
    assert queries == ["refunds", "refund policy"]


def test_abort_fails_at_the_step_and_skip_continues() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR", "index missing")])
    result, ctx = run(script, lambda e: {"answer": "abort"})
    assert result["status"] == "failed"
    assert result["error"] == {
        "code": "SEARCH_ERROR",
        "message": "index missing (aborted by the user)",
        "step_id": "s1",
    }
    assert ctx.custom_status["steps"][0]["state"] == "failed"

    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR")], generate_response=[ok(ANSWER_OK)])
    result, ctx = run(script, lambda e: {"answer": "skip"})
    assert result["status"] == "completed"
    assert [s["state"] for s in ctx.custom_status["steps"]] == ["skipped", "succeeded"]


def test_budget_stops_before_the_call_that_could_exceed_it() -> None:
    script = Script(plan=[ok(PLAN, tokens=100)], consult_rag=[ok(RAG_OK, 0)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, constraints={"max_tokens": 500, "budget": {"max_total_tokens": 600}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    assert result["error"]["step_id"] == "s2"
    assert [n for n, _ in script.calls] == ["plan", "consult_rag"]  # the answer call never ran


def test_cost_budget_uses_the_output_price() -> None:
    script = Script(plan=[ok(PLAN, tokens=100)], consult_rag=[ok(RAG_OK, 0)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, constraints={"max_tokens": 1000, "budget": {"max_estimated_cost": 0.0005}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    assert "USD" in result["error"]["message"]


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_unanswered_question_expires() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR")])
    result, _ = run(script, None, wait={"timeout_seconds": 1})
    assert result["status"] == "failed" and result["error"]["code"] == "WAIT_EXPIRED"

    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR")], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, None, wait={"timeout_seconds": 1, "on_expiry": "default"})
    assert result["status"] == "completed"  # the declared default for a failed step is skip


def first_question(script: Script, reply: str, **request: Any) -> dict[str, Any]:
    """The waiting question of the job's custom status when it is first asked (then answered with ``reply``)."""
    seen: list[dict[str, Any]] = []
    contexts: list[InlineContext] = []

    def answer(event: str) -> Any:
        seen.append(contexts[0].custom_status["waiting"])
        return {"answer": reply}

    contexts.append(InlineContext(job_input(**request), script, answer))
    run_inline(job_orchestrator_body, contexts[0])
    assert seen, contexts[0].custom_status
    return seen[0]


def deadline_of(waiting: dict[str, Any]) -> float:
    """Seconds from the question to its deadline."""
    asked, expires = (datetime.fromisoformat(waiting[k]) for k in ("asked_at", "expires_at"))
    return (expires - asked).total_seconds()


@pytest.mark.parametrize(
    ("request_args", "deadline_s", "fallback"),
    [
        ({}, 3 * 86_400, None),  # the default wait: 3 days, then WAIT_EXPIRED
        ({"wait": {"on_expiry": "default"}}, 3 * 86_400, "skip"),
        ({"wait": {"timeout_seconds": 600, "on_expiry": "default"}}, 600, "skip"),
    ],
)
def test_the_waiting_question_says_its_deadline_and_what_happens_at_it(
    request_args: dict[str, Any], deadline_s: int, fallback: str | None
) -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR")], generate_response=[ok(ANSWER_OK)])
    waiting = first_question(script, "skip", **request_args)
    assert deadline_of(waiting) == deadline_s and waiting.get("expiry_default") == fallback


@pytest.mark.parametrize(
    ("approval", "deadline_s", "fallback"),
    [
        ({"sql": "always"}, 3 * 86_400, None),  # as long as any question
        ({"sql": "always", "timeout_seconds": 60, "on_timeout": "reject"}, 60, "reject"),
    ],
)
def test_an_approval_waits_as_long_as_any_question_unless_it_says_otherwise(
    approval: dict[str, Any], deadline_s: int, fallback: str | None
) -> None:
    draft = ok({"sql": "SELECT 1", "tables": ["returns"], "sensitive_tables": [], "draft": True})
    script = Script(plan=[ok(SQL_PLAN)], execute_azure_sql=[draft], generate_response=[ok(ANSWER_OK)])
    waiting = first_question(script, "reject", approval=approval)
    assert deadline_of(waiting) == deadline_s and waiting.get("expiry_default") == fallback


def test_planning_failure_fails_the_job() -> None:
    script = Script(plan=[fail("AUTH_FAILED", "bad key")])
    result, ctx = run(script)
    assert result["status"] == "failed" and result["error"]["code"] == "AUTH_FAILED"
    assert ctx.custom_status["status"] == "failed"


def test_ask_user_step_feeds_the_answer_to_later_steps() -> None:
    plan = {
        "steps": [
            {"id": "s1", "kind": "ask_user", "title": "clarify", "input": {"question": "Which?", "options": ["a"]}},
            {"id": "s2", "kind": "consult_rag", "title": "docs", "input": {"query": "refunds"}, "depends_on": ["s1"]},
            {"id": "s3", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
        ]
    }
    script = Script(plan=[ok(plan)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, lambda e: {"answer": "online orders"})
    assert result["status"] == "completed"
    assert script.calls[1][1]["task"]["query"] == "refunds (online orders)"


def test_hybrid_supervisor_can_retry_a_step_a_bounded_number_of_times() -> None:
    retry = ok({"action": "retry", "reason": "thin results"})
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[ok(RAG_OK)] * 4,
        supervise=[retry] * 4,
        generate_response=[ok(ANSWER_OK)],
    )
    result, _ = run(script, mode="hybrid")
    assert result["status"] == "completed"
    assert sum(1 for n, _ in script.calls if n == "consult_rag") == 3  # first run + 2 supervisor retries


def test_hybrid_supervisor_can_switch_the_tool_once() -> None:
    switch = ok({"action": "choose_tool", "reason": "numbers live in SQL", "executor_type": "execute_azure_sql"})
    sql_ok = ok({"sql": "SELECT 1", "columns": ["x"], "rows": [[1]], "row_count": 1, "dialect": "sqlite"})
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[ok(RAG_OK)],
        execute_azure_sql=[sql_ok],
        supervise=[switch, ok({"action": "continue", "reason": "fine"})],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = run(script, mode="hybrid")
    assert result["status"] == "completed"
    assert [n for n, _ in script.calls] == [
        "plan",
        "consult_rag",
        "supervise",
        "execute_azure_sql",
        "supervise",
        "generate_response",
    ]
    assert ctx.custom_status["steps"][0]["kind"] == "execute_azure_sql"
    assert script.calls[3][1]["task"]["question"] == "refunds"


def test_hybrid_supervisor_replans_the_remaining_steps() -> None:
    replan = ok({"action": "replan", "reason": "need the data too"})
    new_plan = {
        "steps": [
            {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": {"question": "returns by region"}},
            {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
        ]
    }
    sql_ok = ok({"sql": "SELECT 1", "columns": ["x"], "rows": [[1]], "row_count": 1, "dialect": "sqlite"})
    script = Script(
        plan=[ok(PLAN), ok(new_plan)],
        consult_rag=[ok(RAG_OK)],
        supervise=[replan, ok({"action": "continue", "reason": "ok"})],
        execute_azure_sql=[sql_ok],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = run(script, mode="hybrid")
    assert result["status"] == "completed"
    assert [s["id"] for s in ctx.custom_status["steps"]] == ["s1", "s1r1", "s2r1"]
    assert ctx.custom_status["replans"] == 1


# ----- issue 9: states that never contradict, edits that replace what they edit -------------------

SQL_PLAN = {
    "steps": [
        {
            "id": "s1",
            "kind": "execute_azure_sql",
            "title": "data",
            "input": {"question": "returns by region", "sql": "DELETE FROM returns"},
        },
        {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
    ]
}
SQL_ROWS = {"sql": "SELECT 1", "columns": ["x"], "rows": [[1]], "row_count": 1, "dialect": "sqlite"}


class Recording(InlineContext):
    """An inline context that keeps every custom status it was given (a copy per publish)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statuses: list[dict[str, Any]] = []

    def set_custom_status(self, status: Any) -> None:
        super().set_custom_status(status)
        self.statuses.append(json.loads(json.dumps(status)))


def run_recorded(script: Script, answer: Callable[[str], Any] | None = None, **request: Any) -> tuple[dict, Recording]:
    ctx = Recording(job_input(**request), script, answer)
    return run_inline(job_orchestrator_body, ctx), ctx


def test_a_step_waiting_out_a_backoff_is_retrying_with_when_and_which_attempt() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[fail("RATE_LIMITED"), ok(ANSWER_OK)])
    result, ctx = run_recorded(script)
    assert result["status"] == "completed"
    retrying = [s["steps"][1] for s in ctx.statuses if s.get("steps") and s["steps"][1]["state"] == "retrying"]
    assert retrying, "the backoff was never published as retrying"
    assert retrying[0]["next_attempt"] == 2 and retrying[0]["max_attempts"] == 3 and retrying[0]["retry_at"]
    # Once the next attempt runs, the retry fields are gone and the step says running, then succeeded.
    final = ctx.custom_status["steps"][1]
    assert final["state"] == "succeeded" and "retry_at" not in final and "next_attempt" not in final


def test_waiting_for_a_human_is_counted_apart_and_is_not_an_attempt() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR"), ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])

    def slow_retry(event: str) -> Any:
        time.sleep(0.05)  # a human takes a while; not a timing assertion, a lower bound on the recorded wait
        return {"answer": "retry"}

    result, ctx = run_recorded(script, slow_retry)
    assert result["status"] == "completed"
    step = ctx.custom_status["steps"][0]
    assert step["attempts"] == 2  # two executor calls; the wait between them is no attempt
    assert step["waited_ms"] >= 50 and "waiting_since" not in step
    waiting = [s["steps"][0] for s in ctx.statuses if s.get("steps") and s["steps"][0]["state"] == "waiting"]
    assert waiting and waiting[0]["waiting_since"]


def test_planning_failure_marks_the_plan_failed() -> None:
    script = Script(plan=[fail("AUTH_FAILED", "bad key")])
    result, ctx = run(script)
    assert result["status"] == "failed"
    assert ctx.custom_status["plan_status"] == "failed"
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    assert run(script)[1].custom_status["plan_status"] == "planned"


def test_hybrid_counts_the_supervisor_apart_from_planning() -> None:
    script = Script(
        plan=[ok(PLAN, tokens=7)],
        consult_rag=[ok(RAG_OK, 0)],
        supervise=[ok({"action": "continue", "reason": "fine"}, tokens=11)],
        generate_response=[ok(ANSWER_OK, 5)],
    )
    result, ctx = run(script, mode="hybrid")
    assert result["status"] == "completed"
    state = ctx.custom_status
    assert state["plan_usage"]["total_tokens"] == 14
    assert state["supervisor_usage"]["total_tokens"] == 22
    assert state["usage"]["total_tokens"] == 14 + 22 + 10


def test_a_question_edit_after_a_rejected_draft_drops_the_rejected_sql() -> None:
    rejected = fail("SQL_REJECTED", "SQL rejected (not_select): only SELECT")
    draft = ok({"sql": "SELECT 1", "tables": ["returns"], "sensitive_tables": [], "draft": True})
    script = Script(
        plan=[ok(SQL_PLAN)], execute_azure_sql=[rejected, draft, ok(SQL_ROWS)], generate_response=[ok(ANSWER_OK)]
    )
    answers = {"answer:s1-q1": {"action": "edit", "question": "returns by region in Q3"}, "answer:s1-q2": "approve"}
    result, _ = run(script, lambda e: {"answer": answers[e]}, approval={"sql": "always"})
    assert result["status"] == "completed"
    tasks = [p["task"] for n, p in script.calls if n == "execute_azure_sql"]
    assert tasks[0] == {"question": "returns by region", "sql": "DELETE FROM returns"}
    # The edit replaced the question, and the SQL the guard rejected did not stick to the step.
    assert tasks[1] == {"question": "returns by region in Q3"}
    assert tasks[2] == {"question": "returns by region in Q3", "sql": "SELECT 1"}


def test_a_question_edit_after_a_rejected_run_drops_the_rejected_sql() -> None:
    rejected = fail("SQL_REJECTED", "SQL rejected (not_select): only SELECT")
    script = Script(plan=[ok(SQL_PLAN)], execute_azure_sql=[rejected, ok(SQL_ROWS)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script, lambda e: {"answer": {"action": "edit", "question": "returns in Q3"}})
    assert result["status"] == "completed"
    tasks = [p["task"] for n, p in script.calls if n == "execute_azure_sql"]
    assert tasks == [{"question": "returns by region", "sql": "DELETE FROM returns"}, {"question": "returns in Q3"}]


def test_a_supervisor_question_after_a_step_leaves_it_succeeded() -> None:
    ask = ok({"action": "ask_user", "reason": "which one", "question": "Online or in store?", "options": ["online"]})
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[ok(RAG_OK)],
        supervise=[ask],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = run_recorded(script, lambda e: {"answer": "online"}, mode="hybrid")
    assert result["status"] == "completed"
    after = [s["steps"][0]["state"] for s in ctx.statuses if s.get("steps")]
    # While asked it shows waiting; once answered it is succeeded again, never "running".
    assert "waiting" in after and after[after.index("waiting") + 1 :][:1] == ["succeeded"]
    assert ctx.custom_status["steps"][0]["state"] == "succeeded" and ctx.custom_status["steps"][0]["waited_ms"] == 0


def test_the_answer_is_told_which_steps_did_not_run_and_why() -> None:
    draft = ok({"sql": "SELECT 1", "tables": ["returns"], "sensitive_tables": [], "draft": True})
    script = Script(plan=[ok(SQL_PLAN)], execute_azure_sql=[draft], generate_response=[ok(ANSWER_OK)])
    result, ctx = run(script, lambda e: {"answer": "reject"}, approval={"sql": "always"})
    assert result["status"] == "completed"
    step = ctx.custom_status["steps"][0]
    assert (step["state"], step["note"]) == ("skipped", "the user rejected its SQL query")
    answer_call = [p for n, p in script.calls if n == "generate_response"][0]
    assert answer_call["execution_context"]["step_notes"] == [
        "The step 'data' did not run: the user rejected its SQL query."
    ]

    script = Script(plan=[ok(PLAN)], consult_rag=[fail("SEARCH_ERROR")], generate_response=[ok(ANSWER_OK)])
    result, ctx = run(script, lambda e: {"answer": "skip"})
    answer_call = [p for n, p in script.calls if n == "generate_response"][0]
    assert answer_call["execution_context"]["step_notes"] == [
        "The step 'docs' did not run: the user chose to skip it after it failed (SEARCH_ERROR)."
    ]


def test_no_notes_when_every_step_ran() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    run(script)
    answer_call = [p for n, p in script.calls if n == "generate_response"][0]
    assert answer_call["execution_context"]["step_notes"] == []


def test_hybrid_supervisor_reruns_a_step_whose_retries_the_policy_spent() -> None:
    # Three transient failures spend the policy's attempts; nobody answers, so the step is skipped; the
    # Supervisor's re-runs are counted apart from those attempts, so it may still run the step again.
    retry = ok({"action": "retry", "reason": "skipped after a transient failure"})
    script = Script(
        plan=[ok(PLAN)],
        consult_rag=[fail("TRANSIENT"), fail("TRANSIENT"), fail("TRANSIENT"), ok(RAG_OK)],
        supervise=[retry, ok({"action": "continue", "reason": "fine"})],
        generate_response=[ok(ANSWER_OK)],
    )
    result, ctx = run(script, mode="hybrid", wait={"timeout_seconds": 1, "on_expiry": "default"})
    assert result["status"] == "completed"
    assert sum(1 for n, _ in script.calls if n == "consult_rag") == 4
    assert ctx.custom_status["steps"][0]["state"] == "succeeded"
