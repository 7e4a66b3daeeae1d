"""What a job's Durable history says it did: activity attempts with their timings and results, messages, episodes.

Reads both history forms (the recorded DTFx form and the status API's); ``shared.runtime.ledger`` prices the counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.durable_functions.models.history import HistoryEventType

from shared.jobs.durable_json import decode

# DTFx event types by number, as the status API names them ("TaskScheduled"), from the SDK's own enum.
_TYPE_NAMES = {t.value: "".join(w.capitalize() for w in t.name.split("_")) for t in HistoryEventType}


@dataclass
class Call:
    """One activity attempt as the history shows it."""

    name: str
    step: str
    scheduled: str | None
    ended: str | None
    task: dict[str, Any]
    result: dict[str, Any]


@dataclass
class Counts:
    """What the history holds, counted once for every backend."""

    started: int = 0
    activities: int = 0
    activities_pending: int = 0
    sub_orchestrations: int = 0
    sub_orchestrations_pending: int = 0
    timers_fired: int = 0
    events_raised: int = 0
    events_sent: int = 0
    lifecycle: int = 0  # suspend, resume, terminate
    episodes: int = 0
    episodes_exact: bool = True
    calls: list[Call] = field(default_factory=list)

    @property
    def actions(self) -> int:
        """Durable Task Scheduler actions (the model in the module docstring)."""
        scheduled_only = self.activities_pending + self.sub_orchestrations_pending
        return (
            self.started
            + 2 * (self.activities + self.sub_orchestrations)
            + scheduled_only
            + self.timers_fired
            + self.events_raised
            + self.events_sent
            + self.lifecycle
        )


def event_type_name(event: Mapping[str, Any]) -> str:
    """The event's type by name, whichever history form it comes in (DTFx integers or the status API's names)."""
    kind = event.get("EventType")
    return _TYPE_NAMES.get(kind, str(kind)) if isinstance(kind, int) else str(kind)


def _step_of(task_id: Any, name: str) -> str:
    parts = str(task_id or "").rsplit(":", 2)
    return parts[1] if len(parts) == 3 and parts[1] else name


def _call(name: str, scheduled: str | None, ended: str | None, inp: Any, result: Any) -> Call:
    given = decode(inp)
    body = decode(result)
    given = given if isinstance(given, dict) else {}
    return Call(
        name=name,
        step=_step_of(given.get("task_id"), name),
        scheduled=scheduled,
        ended=ended,
        task=given,
        result=body if isinstance(body, dict) else {},
    )


def count(history: list[dict[str, Any]]) -> Counts:
    """Count what happened from a history in either form (recorded DTFx events or the status API's rows)."""
    counts = Counts()
    scheduled: dict[int, Mapping[str, Any]] = {}
    subs: set[int] = set()
    raw = any(
        event_type_name(e) in ("TaskScheduled", "OrchestratorStarted", "SubOrchestrationInstanceCreated")
        for e in history
    )
    wakeups = 0
    for event in history:
        kind = event_type_name(event)
        if kind == "ExecutionStarted":
            counts.started += 1
            wakeups += 1
        elif kind == "OrchestratorStarted":
            counts.episodes += 1
        elif kind == "TaskScheduled":
            scheduled[int(event.get("EventId", -1))] = event
        elif kind == "SubOrchestrationInstanceCreated":
            subs.add(int(event.get("EventId", -1)))
        elif kind in ("TaskCompleted", "TaskFailed"):
            wakeups += 1
            counts.activities += 1
            source = scheduled.pop(int(event.get("TaskScheduledId", -2)), None) if raw else None
            if source is not None:
                name, when, inp = str(source.get("Name")), source.get("Timestamp"), source.get("Input")
            else:
                name, when, inp = str(event.get("FunctionName")), event.get("ScheduledTime"), event.get("Input")
            counts.calls.append(_call(name, when, event.get("Timestamp"), inp, event.get("Result")))
        elif kind in ("SubOrchestrationInstanceCompleted", "SubOrchestrationInstanceFailed"):
            wakeups += 1
            counts.sub_orchestrations += 1
            subs.discard(int(event.get("TaskScheduledId", -2)))
        elif kind == "TimerFired":
            wakeups += 1
            counts.timers_fired += 1
        elif kind == "EventRaised":
            wakeups += 1
            counts.events_raised += 1
        elif kind == "EventSent":
            counts.events_sent += 1
        elif kind in ("ExecutionSuspended", "ExecutionResumed", "ExecutionTerminated"):
            wakeups += 1
            counts.lifecycle += 1
    counts.activities_pending = len(scheduled)
    counts.sub_orchestrations_pending = len(subs)
    if not raw:
        # The status API leaves out episodes: at most one per message that wakes the orchestration.
        counts.episodes, counts.episodes_exact = wakeups, False
    return counts


def seconds_between(start: str | None, end: str | None) -> float:
    """Seconds from one ISO time to another (0 when either is missing or unreadable)."""
    if not start or not end:
        return 0.0
    try:
        delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(
            start.replace("Z", "+00:00")
        )
    except ValueError:
        return 0.0
    return max(0.0, delta.total_seconds())


def part_instances(history: list[dict[str, Any]]) -> list[str]:
    """The instance ids of the sub-orchestrations (a run's parts) whose results are in this history."""
    found: list[str] = []
    for event in history:
        kind = event_type_name(event)
        if kind not in (
            "SubOrchestrationInstanceCreated",
            "SubOrchestrationInstanceCompleted",
            "SubOrchestrationInstanceFailed",
        ):
            continue
        given = decode(event.get("Input"))
        instance = event.get("InstanceId") or (given.get("job_id") if isinstance(given, dict) else None)
        if isinstance(instance, str) and instance and instance not in found:
            found.append(instance)
    return found


def history_rows(events: Any) -> list[dict[str, Any]]:
    """The orchestration's own history (the SDK's HistoryEvent objects, or dicts) as recorded-form dicts."""
    rows: list[dict[str, Any]] = []
    for event in events or []:
        if isinstance(event, dict):
            rows.append(event)
            continue
        stamp = getattr(event, "timestamp", None)
        row: dict[str, Any] = {
            "EventType": int(getattr(event, "event_type", -1)),
            "EventId": getattr(event, "event_id", -1),
            "Timestamp": stamp.isoformat() if isinstance(stamp, datetime) else stamp,
        }
        for name in ("Name", "Input", "Result", "TaskScheduledId"):
            value = getattr(event, name, None)
            if value is not None:
                row[name] = value
        rows.append(row)
    return rows


def started_at(history: list[dict[str, Any]]) -> str | None:
    """When the job started: its ExecutionStarted event's time."""
    for event in history:
        if event_type_name(event) == "ExecutionStarted":
            stamp = event.get("Timestamp")
            return str(stamp) if stamp else None
    return None
