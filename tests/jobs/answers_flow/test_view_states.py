"""The job view and its log never contradict the job: how it ended, retries, human waits, the plan."""

from __future__ import annotations

from typing import Any

from api.view import build_log, build_view, plan_status, retry_message, step_outputs
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
    lines = [e.message for e in build_log(history, 0, 10).entries]
    assert lines[-1] == "job failed at s1: SEARCH_ERROR: index missing"
    assert not any("Completed" in line for line in lines)
    ok = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Completed", "Result": {"status": "completed"}}]
    assert build_log(ok, 0, 10).entries[0].message == "job completed"
    crashed = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Failed", "Result": "boom"}]
    assert build_log(crashed, 0, 10).entries[0].message == "job failed"
    cancelled = [{"EventType": "ExecutionCompleted", "OrchestrationStatus": "Terminated"}]
    assert build_log(cancelled, 0, 10).entries[0].message == "job cancelled"


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


def test_a_tool_call_line_names_the_tool_that_ran() -> None:
    tool_ok = {"success": True, "data": {"total": 5}}
    history: list[dict[str, Any]] = [
        {
            "EventType": "TaskCompleted",
            "FunctionName": "call_tool",
            "Input": {"task_id": "j1:t2:1", "executor_type": "call_tool", "task": {"tool": "function.growth_rate"}},
            "Result": {"status": "success", "result": tool_ok, "usage": {"total_tokens": 0}},
        },
    ]
    assert [e.message for e in build_log(history, 0, 10).entries] == [
        "t2 call_tool function.growth_rate (attempt 1): success (0 tokens)",
    ]


def test_an_agent_job_has_no_plan_and_its_executor_usage_is_shown() -> None:
    shown = view(
        {"status": "running", "plan_status": "agent", "executor_usage": {"tokens_input": 5, "tokens_output": 6}}
    )
    assert shown["usage"]["executor"]["total_tokens"] == 11 and shown["plan"]["status"] == "agent"


def test_an_executor_turn_line_shows_the_tools_it_called_and_its_reasoning_bounded() -> None:
    def turn(result: dict[str, Any]) -> dict[str, Any]:
        return {
            "EventType": "TaskCompleted",
            "FunctionName": "agent_turn",
            "Input": {"task_id": "j1:agent_turn:2"},
            "Result": {"status": "success", "result": result, "usage": {"total_tokens": 9}},
        }

    calls = [{"id": "c1", "tool": "consult_rag"}, {"id": "c2", "tool": "execute_azure_sql"}]
    history = [
        turn({"reasoning": "Both parts,\n  data and documents.", "tool_calls": calls}),
        turn({"reasoning": "x" * 2000, "tool_calls": [{"id": "c3", "tool": "format_output"}]}),
        turn({"reasoning": "", "tool_calls": []}),
    ]
    lines = [e.message for e in build_log(history, 0, 10).entries]
    assert lines[0] == (
        "agent_turn (attempt 2): success (9 tokens), calls consult_rag, execute_azure_sql"
        " — Both parts, data and documents."
    )
    assert lines[1].startswith("agent_turn (attempt 2): success (9 tokens), calls format_output — xxx")
    assert lines[1].endswith("x…") and len(lines[1]) < 600
    assert lines[2] == "agent_turn (attempt 2): success (9 tokens), calls no tool"
    # A turn is no step: it has no output in the view.
    assert "agent_turn" not in step_outputs(history)[0]


def test_an_agent_job_shows_its_turns_tool_calls_and_executor_usage() -> None:
    steps = [
        {**STEP, "id": "t1", "state": "succeeded", "turn": 1, "tool_input": '{"query": "refunds"}', "tool_output": "2"},
        {"id": "answer", "kind": "generate_response", "title": "Write the answer", "state": "running"},
    ]
    custom = {"status": "running", "plan_status": "agent", "turns": 2, "steps": steps}
    custom["executor_usage"] = {"tokens_input": 5, "tokens_output": 6}
    agent_status = status(custom) | {
        "input": {"request": {"question": "q", "mode": "agent", "agent": {"max_turns": 4}}}
    }
    shown = build_view(agent_status, {}, partials=lambda job, step: None)
    assert shown["mode"] == "agent" and shown["plan"] == {"status": "agent"}
    assert shown["agent"] == {"turns": 2, "max_turns": 4, "tool_calls": 1, "max_tool_calls": 12}
    assert shown["usage"]["executor"]["total_tokens"] == 11
    assert shown["steps"][0]["turn"] == 1 and shown["steps"][0]["tool_input"] == '{"query": "refunds"}'
    assert view({"status": "running"})["agent"] is None  # other modes have no agent block


def test_a_brief_tool_step_is_made_whole_from_the_history() -> None:
    def done(step: str, attempt: int, name: str, task: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        return {
            "EventType": "TaskCompleted",
            "FunctionName": name,
            "ScheduledTime": f"2026-01-02T03:00:0{attempt}Z",
            "Timestamp": f"2026-01-02T03:00:0{attempt}.500Z",
            "Input": {"task_id": f"j1:{step}:{attempt}", "executor_type": name, "task": task},
            "Result": result,
        }

    failed = {"status": "failed", "error": {"code": "TRANSIENT", "message": "x"}, "usage": {"tokens_input": 2}}
    found = {"status": "success", "result": {"chunks": []}, "usage": {"tokens_input": 3, "tokens_output": 4}}
    tool = {"status": "success", "result": {"data": 1}, "usage": {}}
    history = [
        done("t1", 1, "consult_rag", {"query": "refunds"}, failed),
        done("t1", 2, "consult_rag", {"query": "refunds"}, found),
        done("t2", 1, "call_tool", {"tool": "function.percent_change", "arguments": {"old": 1, "new": 2}}, tool),
    ]
    brief = [
        {"id": "t1", "kind": "consult_rag", "state": "succeeded", "turn": 1},
        {"id": "t2", "kind": "function.percent_change", "state": "succeeded", "turn": 2},
        {"id": "t3", "kind": "request_user_feedback", "state": "succeeded", "turn": 2},
    ]
    shown = view({"status": "running", "plan_status": "agent", "steps": brief}, history=history)["steps"]
    first, second, third = shown
    assert first["title"] == "consult_rag (turn 1)" and first["attempts"] == 2 and first["turn"] == 1
    assert first["started_at"] == "2026-01-02T03:00:01Z" and first["ended_at"] == "2026-01-02T03:00:02.500Z"
    assert first["duration_ms"] == 1500 and first["usage"]["total_tokens"] == 9
    assert first["tool_input"] == '{"query": "refunds"}' and first["output"] == {"chunks": []}
    assert second["tool_input"] == '{"old": 1, "new": 2}' and second["output"] == {"data": 1}
    # A call that ran no activity keeps what the state had.
    assert third["title"] == "request_user_feedback (turn 2)" and third["attempts"] == 0 and "tool_input" not in third
