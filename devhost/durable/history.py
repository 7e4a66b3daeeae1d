"""History events (DTFx shapes the Durable Python SDK replays) and their status-API presentation.

Events are plain dicts with ``EventType``, ``EventId``, ``IsPlayed`` and ``Timestamp`` first, then
type-specific fields. ``render`` produces the stored JSON text (``IsPlayed: true``); ``unplayed``
turns such a text into the ``IsPlayed: false`` form used for the new events of an episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
EVENT_SENT = 14
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


# Event fields the status API never shows.
_HIDDEN_KEYS = frozenset({"EventType", "EventId", "IsPlayed", "TaskScheduledId"})
# ExecutionStarted fields the status API drops.
_STARTED_DROPPED = ("OrchestrationInstance", "ParentInstance", "Version", "Tags")


def _type_name(etype: Any) -> Any:
    """The event type's name; an unknown value is shown as it is."""
    return EVENT_TYPE_NAMES[etype] if isinstance(etype, int) and 0 <= etype < len(EVENT_TYPE_NAMES) else etype


def _shape_started(row: dict[str, Any]) -> dict[str, Any]:
    renamed = {("FunctionName" if k == "Name" else k): v for k, v in row.items()}
    for key in _STARTED_DROPPED:
        renamed.pop(key, None)
    return renamed


def _shape_completed(row: dict[str, Any]) -> dict[str, Any]:
    status = row.get("OrchestrationStatus")
    if isinstance(status, int):
        row["OrchestrationStatus"] = ORCHESTRATION_STATUS_NAMES.get(status, status)
    return row


def _shape_timer_fired(row: dict[str, Any]) -> dict[str, Any]:
    row.pop("TimerId", None)
    return row


_ROW_SHAPERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    EXECUTION_STARTED: _shape_started,
    EXECUTION_COMPLETED: _shape_completed,
    TIMER_FIRED: _shape_timer_fired,
}


def _add_scheduling(row: dict[str, Any], source: dict[str, Any] | None, show_input: bool) -> None:
    """A completion row names the function and time (and input) of the event that scheduled it."""
    if source is None:
        return
    row["FunctionName"] = source.get("Name")
    row["ScheduledTime"] = source.get("Timestamp")
    if show_input:
        row["Input"] = parse_json_or_text(source.get("Input"))


def _show_payload(row: dict[str, Any], key: str, show: bool) -> None:
    """Decode a payload field when it is shown, drop it otherwise."""
    if key not in row:
        return
    if show:
        row[key] = parse_json_or_text(row[key])
    else:
        del row[key]


def _present_event(
    ev: dict[str, Any],
    scheduled: dict[tuple[int, int], dict[str, Any]],
    *,
    show_history_output: bool,
    show_input: bool,
) -> dict[str, Any]:
    """One ``historyEvents`` row; ``scheduled`` holds the scheduling events seen so far."""
    etype: Any = ev.get("EventType")
    row: dict[str, Any] = {"EventType": _type_name(etype)}
    row.update((k, v) for k, v in ev.items() if k not in _HIDDEN_KEYS)
    try:
        shaper = _ROW_SHAPERS.get(etype)
    except TypeError:  # the type comes from stored JSON: an unhashable value is shown as it is
        shaper = None
    if shaper is not None:
        row = shaper(row)
    elif isinstance(etype, int) and etype in _COMPLETION_OF:
        _add_scheduling(row, scheduled.get((_COMPLETION_OF[etype], ev.get("TaskScheduledId", -2))), show_input)
    _show_payload(row, "Result", show_history_output)
    _show_payload(row, "Input", show_input)
    return row


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
        rows.append(_present_event(ev, scheduled, show_history_output=show_history_output, show_input=show_input))
    return rows
