"""Orchestrator actions as the Python SDK emits them, and the replay check devhost applies to them.

Pure functions over the SDK's action JSON: no engine state. The engine and the replay tests
(tests/replay) use the same rule, so "non-deterministic" means the same thing in both.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ActionType(IntEnum):
    """The SDK's ``actionType`` values."""

    CALL_ACTIVITY = 0
    CALL_ACTIVITY_WITH_RETRY = 1
    CALL_SUB_ORCHESTRATOR = 2
    CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
    CONTINUE_AS_NEW = 4
    CREATE_TIMER = 5
    WAIT_FOR_EXTERNAL_EVENT = 6
    CALL_ENTITY = 7
    CALL_HTTP = 8
    SIGNAL_ENTITY = 9
    WHEN_ANY = 11
    WHEN_ALL = 12


# The names the Durable extension uses in its messages.
_NAMES = {
    ActionType.CALL_ACTIVITY: "CallActivity",
    ActionType.CALL_ACTIVITY_WITH_RETRY: "CallActivityWithRetry",
    ActionType.CALL_SUB_ORCHESTRATOR: "CallSubOrchestrator",
    ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY: "CallSubOrchestratorWithRetry",
    ActionType.CONTINUE_AS_NEW: "ContinueAsNew",
    ActionType.CREATE_TIMER: "CreateTimer",
    ActionType.WAIT_FOR_EXTERNAL_EVENT: "WaitForExternalEvent",
    ActionType.CALL_ENTITY: "CallEntity",
    ActionType.CALL_HTTP: "CallHttp",
    ActionType.SIGNAL_ENTITY: "SignalEntity",
}
_FUNCTION_CALLS = {
    ActionType.CALL_ACTIVITY,
    ActionType.CALL_ACTIVITY_WITH_RETRY,
    ActionType.CALL_SUB_ORCHESTRATOR,
    ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY,
}
_NOT_DETERMINISTIC = (
    "Non-deterministic workflow detected: a previous execution of this orchestration scheduled {recorded} "
    "(sequence ID {seq}, action #{index}), but the current replay execution {instead}. Orchestrator code must "
    "be deterministic; was it changed while this instance was running?"
)


def flatten(actions: Any, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Depth-first primitive actions of the SDK's cumulative action list (WhenAll/WhenAny expanded)."""
    for action in actions:
        if isinstance(action, list):
            flatten(action, out)
        elif action.get("actionType") in (ActionType.WHEN_ANY, ActionType.WHEN_ALL):
            flatten(action.get("compoundActions") or [], out)
        else:
            out.append(action)
    return out


def action_name(action: dict[str, Any]) -> str | None:
    """The function, event or entity an action names (None for timers and the like)."""
    t = action.get("actionType")
    if t in _FUNCTION_CALLS:
        return action.get("functionName")
    if t == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return action.get("externalEventName")
    if t in (ActionType.CALL_ENTITY, ActionType.SIGNAL_ENTITY):
        return action.get("instanceId")  # the entity, "@name@key"
    return None


def describe(action_type: Any, name: str | None) -> str:
    """An action as the extension's messages name it: "CallActivity 'plan'"."""
    try:
        kind = _NAMES.get(ActionType(action_type), f"action type {action_type}")
    except ValueError:
        kind = f"action type {action_type}"
    return f"{kind} '{name}'" if name else kind


def first_mismatch(mapped: list[list[Any]], flat: list[dict[str, Any]], *, check_missing: bool) -> str | None:
    """The first replayed action that differs from the recorded one ([type, name, seq] each), said as DTFx says it.

    With ``check_missing`` a recorded action the replay no longer schedules is a mismatch too.
    """
    for index in range(min(len(mapped), len(flat))):
        recorded_type, recorded_name, seq = mapped[index]
        action = flat[index]
        t, name = action.get("actionType"), action_name(action)
        if recorded_type != t or (recorded_name or "").lower() != (name or "").lower():
            instead = f"scheduled {describe(t, name)} there instead"
            return _NOT_DETERMINISTIC.format(
                recorded=describe(recorded_type, recorded_name), seq=seq, index=index, instead=instead
            )
    if check_missing and len(flat) < len(mapped):
        recorded_type, recorded_name, seq = mapped[len(flat)]
        return _NOT_DETERMINISTIC.format(
            recorded=describe(recorded_type, recorded_name), seq=seq, index=len(flat), instead="hasn't scheduled it"
        )
    return None
