"""Replay a recorded history through the app's real orchestrator, the way devhost does, and diff the actions.

The SDK re-runs the orchestrator over the whole history; the actions it schedules are flattened
depth-first (WhenAll/WhenAny replaced by their children) and compared, in sequence-number order, with
the scheduling events the history recorded. A different action type or name at any position, or a
recorded action the replay no longer schedules, is the non-determinism that would break a job in flight.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# devhost's own flattening and wording: the replay rule is the one the host applies.
from devhost.actions import describe, flatten

# History event type that records a scheduled action → the action types it records.
SCHEDULING_EVENTS = {4: (0, 1, 8), 7: (2, 3), 10: (5,), 14: (7, 9)}
OUT_OF_PROC_MARKER = "$OutOfProcData$:"
# Actions that take no sequence number, so the history holds no scheduling event for them.
UNNUMBERED = {4, 6}


@dataclass(frozen=True)
class Replay:
    """What a replay produced: the orchestrator's state and the first mismatch, if any."""

    state: dict[str, Any]
    mismatch: str | None


def recorded_actions(history: list[dict[str, Any]]) -> list[tuple[int, str | None, int]]:
    """(action type, name, sequence id) of every action the history scheduled, in sequence order."""
    out: list[tuple[int, str | None, int]] = []
    for event in history:
        types = SCHEDULING_EVENTS.get(event["EventType"])
        if types is None:
            continue
        name = event.get("Name") if event["EventType"] in (4, 7) else None
        out.append((types[0], name, int(event["EventId"])))
    return sorted(out, key=lambda r: r[2])


def first_mismatch(recorded: list[tuple[int, str | None, int]], replayed: list[dict[str, Any]]) -> str | None:
    """devhost's flatten-and-diff rule, on the numbered actions: the first difference, said as devhost says it."""
    numbered = [a for a in replayed if a.get("actionType") not in UNNUMBERED]
    for i, (rec_type, rec_name, seq) in enumerate(recorded):
        if i >= len(numbered):
            return (
                "Non-deterministic workflow detected: a previous execution of this orchestration scheduled "
                f"{describe(rec_type, rec_name)} (sequence ID {seq}, action #{i}), but the current replay "
                "execution hasn't scheduled it. Orchestrator code must be deterministic; was it changed while "
                "this instance was running?"
            )
        action = numbered[i]
        act_type = int(action.get("actionType", -1))
        act_name = action.get("functionName") if act_type in (0, 1, 2, 3) else None
        same_type = act_type == rec_type or {act_type, rec_type} <= {0, 1} or {act_type, rec_type} <= {2, 3}
        if not same_type or (rec_name or "").lower() != (act_name or "").lower():
            return (
                "Non-deterministic workflow detected: a previous execution of this orchestration scheduled "
                f"{describe(rec_type, rec_name)} (sequence ID {seq}, action #{i}), but the current replay "
                f"execution scheduled {describe(act_type, act_name)} there instead. Orchestrator code must be "
                "deterministic; was it changed while this instance was running?"
            )
    return None


def context_json(fixture: dict[str, Any]) -> str:
    """The context the host hands the SDK: the whole recorded history, every event already played."""
    history = [{**event, "IsPlayed": True} for event in fixture["history"]]
    return json.dumps(
        {
            "history": history,
            # The stored input is JSON text of the value the host passes (for SDK starts, a JSON string).
            "input": json.loads(fixture["input"]) if fixture["input"] is not None else None,
            "instanceId": fixture["instance_id"],
            "isReplaying": True,
            "parentInstanceId": None,
            "upperSchemaVersion": 1,
            "upperSchemaVersionNew": 2,
        }
    )


def replay(fixture: dict[str, Any], handle: Callable[[str], str]) -> Replay:
    """Run the orchestrator over the recorded history and diff what it schedules against what was recorded."""
    try:
        state = json.loads(handle(context_json(fixture)))
    except Exception as exc:  # an orchestrator that raised: its state rides in the message, as devhost reads it
        text = str(exc)
        at = text.find(OUT_OF_PROC_MARKER)
        state = json.loads(text[at + len(OUT_OF_PROC_MARKER) :]) if at >= 0 else {"error": text}
    replayed = flatten(state.get("actions") or [], [])
    recorded = recorded_actions(fixture["history"])
    mismatch = first_mismatch(recorded, replayed)
    extra = [a for a in replayed if a.get("actionType") not in UNNUMBERED][len(recorded) :]
    if mismatch is None and extra and fixture["runtime_status"] != "Running":
        action = extra[0]
        mismatch = (
            "Non-deterministic workflow detected: the recorded execution had finished, but the current replay "
            f"execution scheduled {describe(int(action['actionType']), action.get('functionName'))} after it."
        )
    return Replay(state, mismatch)
