"""The replay gate across SDK lines: a JSON-protocol history replayed under the ``durabletask`` SDK's executor.

A team moving an app from ``azure-functions-durable`` 1.x (the JSON protocol) to the gRPC line (``durabletask``,
and ``azure-functions-durable`` 2.x built on it) ports its orchestrators; the jobs in flight then resume on the
new code. ``python -m devhost replay --durabletask MODULE PATH ...`` converts each recorded history to the
protocol's events (devhost.durable.sidecar.convert, the same mapping the gRPC endpoint serves workers) and runs the
SDK's own orchestration executor over it with the orchestrator of the same name from MODULE: the SDK raises its
``NonDeterminismError`` where the ported code schedules something else than the history recorded, and the gate
names the instance with that message.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from durabletask import worker as dt_worker
from durabletask.internal import orchestrator_service_pb2 as pb

from devhost.durable.sidecar import convert

logger = logging.getLogger("devhost.replay")
_QUIET = logging.getLogger("devhost.replay.durabletask")
_QUIET.setLevel(logging.CRITICAL)


def load_module(spec: str, app_dir: Path) -> ModuleType:
    """The module that holds the ported orchestrators (a dotted name, importable from the app root)."""
    if str(app_dir) not in sys.path:
        sys.path.insert(0, str(app_dir))
    return importlib.import_module(spec)


def orchestrators(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The module's functions by name, lower-case: ``durabletask`` registers an orchestrator under its name."""
    return {name.lower(): fn for name, fn in vars(module).items() if callable(fn) and not isinstance(fn, type)}


def judge(instance_id: str, history: list[dict[str, Any]], fn: Callable[..., Any], failed: bool) -> str | None:
    """Replay one recorded JSON history under the SDK's executor; the reason it would break, or None.

    ``failed``: the recorded execution ended failed (a failure on replay is then the same outcome).
    """
    events = _renumbered(convert.history(history))
    starts = [i for i, e in enumerate(events) if e.HasField("orchestratorStarted")]
    if not starts:
        return "the history has no episode to replay"
    # The last episode's events are "new" to the executor, the rest already played: as a worker sees them.
    old, new = events[: starts[-1]], events[starts[-1] :]
    registry: Any = dt_worker._Registry()  # type: ignore[no-untyped-call]
    registry.add_named_orchestrator(_recorded_name(events), fn)
    executor = dt_worker._OrchestrationExecutor(registry, _QUIET, dt_worker.JsonDataConverter())
    try:
        results = executor.execute(instance_id, old, new)
    except Exception as exc:  # the executor itself gave up (it catches the orchestrator's own errors)
        return f"the durabletask executor could not replay it: {type(exc).__name__}: {exc}"
    finished = any(e.HasField("executionCompleted") for e in events)
    completion = next((a.completeOrchestration for a in results.actions if a.HasField("completeOrchestration")), None)
    if completion is not None and completion.orchestrationStatus == pb.ORCHESTRATION_STATUS_FAILED and not failed:
        details = completion.failureDetails
        return f"{details.errorType}: {details.errorMessage}".strip()
    if finished and completion is None:
        return "the recorded execution had finished, but the replay under durabletask no longer finishes"
    if not finished and completion is not None:
        return "the recorded execution is still running, but the replay under durabletask finishes without it"
    return None


# Events that take a sequence number, and the fields of later events that point back at one.
_NUMBERED = ("taskScheduled", "timerCreated", "subOrchestrationInstanceCreated", "eventSent")
_POINTERS = {
    "taskCompleted": "taskScheduledId",
    "taskFailed": "taskScheduledId",
    "timerFired": "timerId",
    "subOrchestrationInstanceCompleted": "taskScheduledId",
    "subOrchestrationInstanceFailed": "taskScheduledId",
}


def _renumbered(events: list[pb.HistoryEvent]) -> list[pb.HistoryEvent]:
    """The history with the JSON protocol's sequence numbers (DTFx: 0, 1, ...) as durabletask counts (1, 2, ...).

    Only the numbering differs between the lines; the order and the names of the actions are what a port must
    keep, and what the SDK's executor checks.
    """
    numbered = [e.eventId for e in events if e.WhichOneof("eventType") in _NUMBERED]
    if not numbered or min(numbered) != 0:
        return events
    out = []
    for event in events:
        copy = pb.HistoryEvent()
        copy.CopyFrom(event)
        kind = copy.WhichOneof("eventType")
        if kind in _NUMBERED:
            copy.eventId += 1
        elif kind in _POINTERS:
            inner = getattr(copy, kind)
            setattr(inner, _POINTERS[kind], getattr(inner, _POINTERS[kind]) + 1)
        out.append(copy)
    return out


def _recorded_name(events: list[pb.HistoryEvent]) -> str:
    return next((e.executionStarted.name for e in events if e.HasField("executionStarted")), "")
