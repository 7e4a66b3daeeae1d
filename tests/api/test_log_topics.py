"""Each log line says what it is about in fields (topic, activity, failed, step_id), in the view and the stream:
a client tells an Executor turn, a failed attempt or a person's answer apart without reading the English."""

from __future__ import annotations

import json
from typing import Any

from api.events_derive import committed_events
from api.view_log import build_log, line_facts
from shared.jobs.events import LogEvent

TURN = {"task_id": "j:agent_turn:1", "executor_type": "agent_turn"}
CALL = {"task_id": "j:t1:2", "executor_type": "execute_azure_sql"}


def task(name: str, given: dict[str, Any], result: Any, kind: str = "TaskCompleted") -> dict[str, Any]:
    return {"EventType": kind, "FunctionName": name, "Input": json.dumps(given), "Result": json.dumps(result),
            "Timestamp": "2026-11-28T10:00:00Z", "Reason": "worker died"}  # fmt: skip


def news(body: dict[str, Any]) -> dict[str, Any]:
    event = {"EventType": "EventRaised", "Name": "part-news:1", "Timestamp": "2026-11-28T10:00:00Z"}
    return event | {"Input": json.dumps({"instance": "j:review", "question_id": "q1@review", **body})}


ASKED = {
    "question_id": "q1@review", "kind": "clarify", "question": "Ship it?", "options": ["yes", "no"],
    "asked_at": "2026-11-28T10:00:00Z", "expires_at": "2026-11-29T10:00:00Z",
}  # fmt: skip


def test_an_executor_turn_a_failed_attempt_and_a_step_call_are_told_apart() -> None:
    assert line_facts(task("agent_turn", TURN, {"status": "success", "result": {}})) == {
        "topic": "task", "activity": "agent_turn", "failed": False}  # fmt: skip
    failed = line_facts(task("agent_turn", TURN, {"status": "failed", "error": {"code": "X", "message": "m"}}))
    assert failed["failed"] is True and "step_id" not in failed
    crashed = line_facts(task("agent_turn", TURN, None, kind="TaskFailed"))
    assert crashed["failed"] is True
    call = line_facts(task("execute_azure_sql", CALL, {"status": "success", "result": {"rows": []}}))
    assert call == {"topic": "task", "activity": "execute_azure_sql", "failed": False, "step_id": "t1"}


def test_answers_and_questions_are_told_apart() -> None:
    answered = {"EventType": "EventRaised", "Name": "answer:q1", "Input": json.dumps({"answer": "approve"})}
    assert line_facts(answered) == {"topic": "answer"}
    assert line_facts(news({"ended": "answered"})) == {"topic": "answer"}
    assert line_facts(news({"asked": ASKED})) == {"topic": "question"}
    assert line_facts(news({"ended": "expired"})) == {"topic": "question"}
    assert line_facts({"EventType": "EventRaised", "Name": "part-news:2", "Input": "not news"}) == {"topic": "question"}
    assert line_facts({"EventType": "TimerFired"}) == {"topic": "timer"}
    assert line_facts({"EventType": "ExecutionStarted"}) == {"topic": "job"}


def test_the_view_log_and_the_stream_carry_the_same_facts() -> None:
    history = [
        {"EventType": "ExecutionStarted", "Timestamp": "2026-11-28T10:00:00Z"},
        task("agent_turn", TURN, {"status": "failed", "error": {"code": "X", "message": "m"}}),
        {"EventType": "EventRaised", "Name": "answer:q1", "Input": "{}", "Timestamp": "2026-11-28T10:00:01Z"},
    ]
    entries = build_log(history, 0, 10).entries
    assert [(e.topic, e.activity, e.failed) for e in entries] == [
        ("job", None, None), ("task", "agent_turn", True), ("answer", None, None)]  # fmt: skip
    logs = [e for e in committed_events(history, "Running", None, None) if isinstance(e, LogEvent)]
    assert [(e.topic, e.activity, e.failed) for e in logs] == [(e.topic, e.activity, e.failed) for e in entries]
