"""An invalid plan gets exactly one repair turn, with its own attempt number and the problems found."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from api.view import build_view
from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.jobs.contracts import ExecutorOutput, Usage
from tests.jobs.test_policy_inline import ANSWER_OK, PLAN, RAG_OK, Script, job_input, ok, run

BAD_PLAN = {"steps": [{"id": "s1", "kind": "consult_rag", "title": "docs", "input": {"query": "refunds"}}]}


def rejected(message: str, output: dict[str, Any] | None = BAD_PLAN, tokens: int = 7) -> dict[str, Any]:
    result = {"rejected_output": json.dumps(output)} if output is not None else None
    out = ExecutorOutput.failure(
        "BAD_REQUEST",  # type: ignore[arg-type]
        message,
        usage=Usage(tokens_input=tokens, tokens_output=tokens),
        result=result,
    )
    return out.model_dump(mode="json")


def plan_calls(script: Script) -> list[dict[str, Any]]:
    return [payload for name, payload in script.calls if name == "plan"]


def test_a_rejected_plan_is_repaired_once_and_the_job_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orchestrators.job")
    problem = "the plan is not valid: a plan needs a step that writes the answer (generate_response)"
    script = Script(plan=[rejected(problem), ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script)
    assert result["status"] == "completed", result
    first, second = plan_calls(script)
    assert "repair" not in first["task"]
    assert second["task"]["repair"] == {"rejected_output": json.dumps(BAD_PLAN), "problems": problem}
    # Each planning call has its own attempt number and task id.
    assert [p["task_id"] for p in (first, second)] == ["j1:plan:1", "j1:plan:2"]
    assert [p["execution_context"]["attempt"] for p in (first, second)] == [1, 2]
    assert "planning attempt 1" in caplog.text and "planning attempt 2" in caplog.text
    assert "one repair turn" in caplog.text
    # Both calls' tokens count toward planning.
    assert result["usage"]["total_tokens"] >= 14 + 20


def test_a_second_rejection_fails_the_job_with_both_reasons() -> None:
    script = Script(plan=[rejected("first problem"), rejected("second problem")])
    result, _ = run(script)
    assert result["status"] == "failed" and result["error"]["code"] == "BAD_REQUEST"
    message = result["error"]["message"]
    assert message.startswith("planning failed: first problem; after one repair turn: second problem"), message
    assert len(plan_calls(script)) == 2


def test_an_output_that_cannot_be_shown_back_is_not_repaired() -> None:
    # A reply cut at max_tokens carries no rejected output: repairing it would only repeat the cut.
    cut = "the output of 'm1' was cut at max_tokens=64; raise constraints.max_tokens"
    script = Script(plan=[rejected(cut, output=None)])
    result, _ = run(script)
    assert result["status"] == "failed" and cut in result["error"]["message"]
    assert len(plan_calls(script)) == 1


def test_a_valid_plan_takes_one_planning_call() -> None:
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)])
    result, _ = run(script)
    assert result["status"] == "completed"
    assert [p["task_id"] for p in plan_calls(script)] == ["j1:plan:1"]


# --- Planning out of automatic tries on a transient fault (issue 26): a person may retry or abort ----------------


def _down(message: str = "could not reach the LLM endpoint http://127.0.0.1:9/v1: ConnectError") -> dict[str, Any]:
    out = ExecutorOutput.failure("UPSTREAM_ERROR", message, retry_after_ms=5000)  # type: ignore[arg-type]
    return out.model_dump(mode="json")


def test_planning_out_of_tries_waits_for_a_person_who_may_retry() -> None:
    script = Script(
        plan=[_down(), _down(), _down(), ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(ANSWER_OK)]
    )
    asked: list[str] = []
    ctx = InlineContext(job_input(), script, lambda event: answer(event))

    def answer(event: str) -> Any:
        asked.append(event)
        # The published state reads back, and the job view shows the question (no step: the job asks).
        shown = build_view({"instanceId": "j1", "runtimeStatus": "Running", "customStatus": ctx.custom_status}, {})
        assert shown["status"] == "waiting_for_user" and shown["waiting"]["step_id"] is None
        assert shown["waiting"]["options"] == ["retry", "abort"]
        return {"answer": "retry"}

    result = run_inline(job_orchestrator_body, ctx)
    assert result["status"] == "completed", result
    assert asked == ["answer:job-q1"]  # a question of the job, not of a step
    assert [p["task_id"] for p in plan_calls(script)] == [f"j1:plan:{n}" for n in (1, 2, 3, 4)]
    assert ctx.custom_status["status"] == "completed" and ctx.custom_status["plan_status"] == "planned"


def test_planning_out_of_tries_is_aborted_by_a_person_with_its_error() -> None:
    script = Script(plan=[_down()] * 3)
    result, _ = run(script, lambda event: {"answer": "abort"})
    assert result["status"] == "failed" and result["error"]["code"] == "UPSTREAM_ERROR"
    assert "planning failed (UPSTREAM_ERROR): could not reach" in result["error"]["message"]
    assert result["error"]["message"].endswith("(aborted by the user)")
    assert len(plan_calls(script)) == 3


def test_a_plan_the_model_got_wrong_still_fails_without_a_question() -> None:
    script = Script(plan=[rejected("bad", output=None)])
    asked: list[str] = []
    result, _ = run(script, lambda event: asked.append(event))
    assert result["status"] == "failed" and asked == []
