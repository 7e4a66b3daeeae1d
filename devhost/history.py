"""History events (DTFx shapes the Durable Python SDK replays) and their status-API presentation.

Events are plain dicts with ``EventType``, ``EventId``, ``IsPlayed`` and ``Timestamp`` first, then
type-specific fields. ``render`` produces the stored JSON text (``IsPlayed: true``); ``unplayed``
turns such a text into the ``IsPlayed: false`` form used for the new events of an episode.
"""

from __future__ import annotations

import json
from typing import Any

EXECUTION_STARTED = 0
EXECUTION_COMPLETED = 1
EXECUTION_TERMINATED = 3
TASK_SCHEDULED = 4
TASK_COMPLETED = 5
TASK_FAILED = 6
SUB_ORCHESTRATION_CREATED = 7
SUB_ORCHESTRATION_COMPLETED = 8
SUB_ORCHESTRATION_FAILED = 9
TIMER_CREATED = 10
TIMER_FIRED = 11
ORCHESTRATOR_STARTED = 12
ORCHESTRATOR_COMPLETED = 13
EVENT_RAISED = 15
GENERIC_EVENT = 17
EXECUTION_SUSPENDED = 19
EXECUTION_RESUMED = 20

EVENT_TYPE_NAMES = (
    "ExecutionStarted",
    "ExecutionCompleted",
    "ExecutionFailed",
    "ExecutionTerminated",
    "TaskScheduled",
    "TaskCompleted",
    "TaskFailed",
    "SubOrchestrationInstanceCreated",
    "SubOrchestrationInstanceCompleted",
    "SubOrchestrationInstanceFailed",
    "TimerCreated",
    "TimerFired",
    "OrchestratorStarted",
    "OrchestratorCompleted",
    "EventSent",
    "EventRaised",
    "ContinueAsNew",
    "GenericEvent",
    "HistoryState",
    "ExecutionSuspended",
    "ExecutionResumed",
)

# DTFx OrchestrationStatus ints (ExecutionCompleted.OrchestrationStatus).
ORCHESTRATION_STATUS = {
    "Running": 0,
    "Completed": 1,
    "ContinuedAsNew": 2,
    "Failed": 3,
    "Canceled": 4,
    "Terminated": 5,
    "Pending": 6,
    "Suspended": 7,
}
ORCHESTRATION_STATUS_NAMES = {v: k for k, v in ORCHESTRATION_STATUS.items()}

# Completion event type → the scheduling event type it answers.
_COMPLETION_OF = {
    TASK_COMPLETED: TASK_SCHEDULED,
    TASK_FAILED: TASK_SCHEDULED,
    SUB_ORCHESTRATION_COMPLETED: SUB_ORCHESTRATION_CREATED,
    SUB_ORCHESTRATION_FAILED: SUB_ORCHESTRATION_CREATED,
}

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_PLAYED = '"IsPlayed":true'
_NOT_PLAYED = '"IsPlayed":false'


def event(event_type: int, timestamp: str, event_id: int = -1, **fields: Any) -> dict[str, Any]:
    """A history event dict with the four required fields first."""
    ev: dict[str, Any] = {"EventType": event_type, "EventId": event_id, "IsPlayed": True, "Timestamp": timestamp}
    ev.update(fields)
    return ev


def render(ev: dict[str, Any]) -> str:
    """Stored JSON text of an event (``IsPlayed: true``)."""
    return _dumps(ev)


def unplayed(text: str) -> str:
    """The ``IsPlayed: false`` form of a rendered event (IsPlayed is the third key)."""
    return text.replace(_PLAYED, _NOT_PLAYED, 1)


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _dumps(value)


def parse_json_or_text(text: Any) -> Any:
    """JSON-decode a payload string; non-JSON text is returned unchanged."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def present(events: list[dict[str, Any]], *, show_history_output: bool, show_input: bool) -> list[dict[str, Any]]:
    """The ``historyEvents`` array of the status API (as the extension returns it)."""
    scheduled: dict[tuple[int, int], dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for ev in events:
        etype = ev.get("EventType")
        if etype in (ORCHESTRATOR_STARTED, ORCHESTRATOR_COMPLETED):
            continue
        if etype in (TASK_SCHEDULED, SUB_ORCHESTRATION_CREATED):
            scheduled[(etype, ev.get("EventId", -1))] = ev
            continue
        name = EVENT_TYPE_NAMES[etype] if isinstance(etype, int) and 0 <= etype < len(EVENT_TYPE_NAMES) else etype
        row: dict[str, Any] = {"EventType": name}
        for key, value in ev.items():
            if key in ("EventType", "EventId", "IsPlayed", "TaskScheduledId"):
                continue
            row[key] = value
        if etype == EXECUTION_STARTED:
            row = {("FunctionName" if k == "Name" else k): v for k, v in row.items()}
            for key in ("OrchestrationInstance", "ParentInstance", "Version", "Tags"):
                row.pop(key, None)
        elif etype == EXECUTION_COMPLETED:
            status = row.get("OrchestrationStatus")
            if isinstance(status, int):
                row["OrchestrationStatus"] = ORCHESTRATION_STATUS_NAMES.get(status, status)
        elif etype == TIMER_FIRED:
            row.pop("TimerId", None)
        elif isinstance(etype, int) and etype in _COMPLETION_OF:
            source = scheduled.get((_COMPLETION_OF[etype], ev.get("TaskScheduledId", -2)))
            if source is not None:
                row["FunctionName"] = source.get("Name")
                row["ScheduledTime"] = source.get("Timestamp")
                if show_input:
                    row["Input"] = parse_json_or_text(source.get("Input"))
        if "Result" in row:
            if show_history_output:
                row["Result"] = parse_json_or_text(row["Result"])
            else:
                del row["Result"]
        if "Input" in row:
            if show_input:
                row["Input"] = parse_json_or_text(row["Input"])
            else:
                del row["Input"]
        rows.append(row)
    return rows
