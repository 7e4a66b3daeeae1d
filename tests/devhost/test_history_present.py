"""``history.present``: the status API's ``historyEvents`` shapes (pure function)."""

from typing import Any

import pytest

from devhost.durable import history as h


def _events() -> list[dict[str, Any]]:
    return [
        h.event(h.ORCHESTRATOR_STARTED, "t0"),
        h.event(
            h.EXECUTION_STARTED,
            "t1",
            Name="orch",
            Input='{"a":1}',
            OrchestrationInstance={"InstanceId": "i"},
            ParentInstance=None,
            Version="",
            Tags=None,
        ),
        h.event(h.TASK_SCHEDULED, "t2", 0, Name="act", Input='"\\"x\\""'),
        h.event(h.SUB_ORCHESTRATION_CREATED, "t3", 1, Name="sub", Input="plain", InstanceId="s"),
        h.event(h.TIMER_CREATED, "t4", 2, FireAt="t9"),
        h.event(h.ORCHESTRATOR_COMPLETED, "t5"),
        h.event(h.TASK_COMPLETED, "t6", TaskScheduledId=0, Result='{"r":2}'),
        h.event(h.SUB_ORCHESTRATION_FAILED, "t7", TaskScheduledId=1, Reason="boom", Details="d"),
        h.event(h.TASK_FAILED, "t7b", TaskScheduledId=42, Reason="orphan"),
        h.event(h.TIMER_FIRED, "t8", TimerId=2, FireAt="t9"),
        h.event(h.EVENT_RAISED, "t8b", Name="go", Input="not json"),
        h.event(h.EXECUTION_COMPLETED, "t9", OrchestrationStatus=1, Result="[1]"),
        h.event(h.EXECUTION_COMPLETED, "t9b", OrchestrationStatus=99),
        h.event(99, "t10", Other=1),
        h.event("Custom", "t11"),  # type: ignore[arg-type]  # an event type the host never writes
    ]


@pytest.mark.parametrize(("output", "inputs"), [(True, True), (False, False), (True, False), (False, True)])
def test_present_shapes_every_kind(output: bool, inputs: bool) -> None:
    rows = h.present(_events(), show_history_output=output, show_input=inputs)

    def inp(value: Any) -> dict[str, Any]:
        return {"Input": value} if inputs else {}

    def res(value: Any) -> dict[str, Any]:
        return {"Result": value} if output else {}

    expected = [
        {"EventType": "ExecutionStarted", "Timestamp": "t1", "FunctionName": "orch", **inp({"a": 1})},
        {"EventType": "TimerCreated", "Timestamp": "t4", "FireAt": "t9"},
        {
            "EventType": "TaskCompleted",
            "Timestamp": "t6",
            **res({"r": 2}),
            "FunctionName": "act",
            "ScheduledTime": "t2",
            # the scheduled input is decoded twice (once when copied, once as the row's Input)
            **inp("x"),
        },
        {
            "EventType": "SubOrchestrationInstanceFailed",
            "Timestamp": "t7",
            "Reason": "boom",
            "Details": "d",
            "FunctionName": "sub",
            "ScheduledTime": "t3",
            **inp("plain"),
        },
        {"EventType": "TaskFailed", "Timestamp": "t7b", "Reason": "orphan"},
        {"EventType": "TimerFired", "Timestamp": "t8", "FireAt": "t9"},
        {"EventType": "EventRaised", "Timestamp": "t8b", "Name": "go", **inp("not json")},
        {"EventType": "ExecutionCompleted", "Timestamp": "t9", "OrchestrationStatus": "Completed", **res([1])},
        {"EventType": "ExecutionCompleted", "Timestamp": "t9b", "OrchestrationStatus": 99},
        {"EventType": 99, "Timestamp": "t10", "Other": 1},
        {"EventType": "Custom", "Timestamp": "t11"},
    ]
    assert rows == expected
    assert [list(r) for r in rows] == [list(r) for r in expected]  # key order too
