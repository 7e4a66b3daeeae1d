"""The job view and its log never contradict the job: how it ended, retries, human waits, the plan."""

from __future__ import annotations

from typing import Any

from api.view import build_log, build_view, plan_status, retry_message
from shared.jobs.models import JobState


def status(
    custom: dict[str, Any], runtime: str = "Running", history: list[dict[str, Any]] | None = None, output: Any = None
) -> dict[str, Any]:
    return {
        "instanceId": "j1",
        "runtimeStatus": runtime,
        "customStatus": custom,
        "historyEvents": history or [],
        "input": {"request": {"question": "q"}},
        "output": output,
    }


def view(custom: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return build_view(status(custom, **kwargs), {}, partials=lambda job, step: None)


STEP = {"id": "s1", "kind": "consult_rag", "title": "docs"}


def test_a_failed_job_log_says_failed_never_completed() -> None:
    failed = {"status": "failed", "error": {"code": "SEARCH_ERROR", "message": "index missing", "step_id": "s1"}}
    history: list[dict[str, Any]] = [
        {"EventType": "ExecutionStarted"},
        {"EventType": "ExecutionCompleted", "OrchestrationStatus": "Completed", "Result": failed},
    ]
    lines = [e["message"] for e in build_log(history, 0, 10)["entries"]]
    assert lines[-1] == "job failed at s1: SEARCH_ERROR: index missing"
    assert not any("Completed" in line for line in lines)
    ok = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Completed", "Result": {"status": "completed"}}]
    assert build_log(ok, 0, 10)["entries"][0]["message"] == "job completed"
    crashed = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Failed", "Result": "boom"}]
    assert build_log(crashed, 0, 10)["entries"][0]["message"] == "job failed"
    cancelled = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Terminated"}]
    assert build_log(cancelled, 0, 10)["entries"][0]["message"] == "job cancelled"


def test_a_step_waiting_for_a_retry_says_when_and_which_attempt() -> None:
    step = {
        **STEP,
        "state": "retrying",
        "attempts": 1,
        "retry_at": "2026-01-02T03:04:05.678+00:00",
        "next_attempt": 2,
        "max_attempts": 3,
    }
    shown = view({"status": "running", "step_index": 0, "steps": [step]})["steps"][0]
    assert shown["state"] == "retrying"
    assert shown["message"] == "retrying at 03:04:05 (attempt 2 of 3)"
    assert retry_message(None, None, None) == "retrying"
    # A cancelled job's retrying step is cancelled, like a running one.
    assert view({"status": "running", "steps": [step]}, runtime="Terminated")["steps"][0]["state"] == "cancelled"


def test_the_human_wait_is_shown_apart_and_not_in_the_duration() -> None:
    step = {
        **STEP,
        "state": "succeeded",
        "attempts": 2,
        "started_at": "2026-01-02T03:00:00+00:00",
        "ended_at": "2026-01-02T03:01:00+00:00",
        "waited_ms": 45_000,
    }
    shown = view({"status": "completed", "steps": [step]}, runtime="Completed")["steps"][0]
    assert shown["waited_ms"] == 45_000 and shown["duration_ms"] == 15_000


def test_a_failed_job_plan_never_says_planning() -> None:
    assert view({"status": "failed", "plan_status": "failed"}, runtime="Completed")["plan"] == {"status": "failed"}
    # Older jobs (no plan_status in their state) that ended without steps are not "planning" either.
    assert plan_status("Completed", JobState()) == "failed"
    assert plan_status("Failed", None) == "failed"
    assert plan_status("Terminated", JobState()) == "cancelled"
    assert plan_status("Running", JobState()) == "planning"
    assert plan_status("Completed", JobState(plan_status="planned")) == "planned"


def test_the_supervisor_usage_is_its_own_line() -> None:
    usage = {"tokens_input": 3, "tokens_output": 4}
    shown = view({"status": "running", "supervisor_usage": usage, "plan_usage": {"tokens_input": 1}})["usage"]
    assert shown["supervisor"]["total_tokens"] == 7
    assert shown["planning"]["total_tokens"] == 1


def test_the_executor_usage_is_its_own_line() -> None:
    shown = view({"status": "running", "executor_usage": {"tokens_input": 5, "tokens_output": 6}})["usage"]
    assert shown["executor"]["total_tokens"] == 11 and shown["planning"]["total_tokens"] == 0


def test_an_executor_turn_logs_its_reasoning_and_calls_and_a_tool_call_names_its_tool() -> None:
    turn = {
        "reasoning": "The data first,\n then the growth.",
        "tool_calls": [{"id": "a", "tool": "execute_azure_sql"}, {"id": "b", "tool": "function.growth_rate"}],
    }
    tool_ok = {"success": True, "data": {"total": 5}}
    history: list[dict[str, Any]] = [
        {
            "EventType": "TaskCompleted",
            "FunctionName": "agent_turn",
            "Input": {"task_id": "j1:agent_turn:1", "executor_type": "agent_turn"},
            "Result": {"status": "success", "result": turn, "usage": {"total_tokens": 9}},
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "call_tool",
            "Input": {"task_id": "j1:t2:1", "executor_type": "call_tool", "task": {"tool": "function.growth_rate"}},
            "Result": {"status": "success", "result": tool_ok, "usage": {"total_tokens": 0}},
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "agent_turn",
            "Input": {"task_id": "j1:agent_turn:2", "executor_type": "agent_turn"},
            "Result": {"status": "success", "result": {"reasoning": "", "tool_calls": []}, "usage": {}},
        },
    ]
    assert [e["message"] for e in build_log(history, 0, 10)["entries"]] == [
        "agent_turn (attempt 1): success, reasoning: The data first, then the growth.; "
        "tool calls: execute_azure_sql, function.growth_rate (9 tokens)",
        "t2 call_tool function.growth_rate (attempt 1): success (0 tokens)",
        "agent_turn (attempt 2): success, reasoning: (none given); tool calls: none (0 tokens)",
    ]


def test_an_agent_job_has_no_plan_and_its_executor_usage_is_shown() -> None:
    shown = view(
        {"status": "running", "plan_status": "agent", "executor_usage": {"tokens_input": 5, "tokens_output": 6}}
    )
    assert shown["usage"]["executor"]["total_tokens"] == 11 and shown["plan"]["status"] == "agent"
