"""Calls with a retry policy (as DTFx retries them): one root per call, its attempts and the timers between.

Stateless: what it knows of a call lives on the instance (``roots``, ``rmap``), so replay and recovery need
nothing from here; a step only writes the next attempt or retry timer into the episode's decisions.
"""

from __future__ import annotations

from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.state import Decisions, Instance
from devhost.durable.timeutil import (
    epoch_to_history,
)


def add_retry_root(
    inst: Instance,
    seq: int,
    kind: str,
    name: str,
    input_text: str | None,
    action: dict[str, Any],
    explicit_id: str | None,
    version: str | None,
) -> None:
    """Record a new call with a retry policy whose first attempt is ``seq``."""
    options = action.get("retryOptions") or {}
    inst.roots.append(
        {
            "k": kind,
            "n": name,
            "i": input_text,
            "id": explicit_id,
            "v": version,
            "first": int(options.get("firstRetryIntervalInMilliseconds") or 0),
            "max": int(options.get("maxNumberOfAttempts") or 1),
            "att": 1,
            "s": [seq],
        }
    )
    inst.rmap[seq] = [len(inst.roots) - 1, "attempt"]


def retry_step(inst: Instance, ev: dict[str, Any], ts: str, ts_epoch: float, d: Decisions) -> None:
    """Host side of with-retry (as DTFx retries): a failed attempt arms a retry timer; its firing reschedules."""
    et = ev["EventType"]
    if et in (h.TASK_FAILED, h.SUB_ORCHESTRATION_FAILED):
        entry = inst.rmap.pop(ev["TaskScheduledId"])
        root = inst.roots[entry[0]]
        seq = inst.next_seq
        inst.next_seq += 1
        fire_at = ts_epoch + root["first"] / 1000.0
        fire_text = epoch_to_history(fire_at)
        d.events.append(h.event(h.TIMER_CREATED, ts, seq, FireAt=fire_text))
        d.timers.append((seq, fire_at, fire_text))
        inst.open[seq] = "t"
        inst.rmap[seq] = [entry[0], "timer"]
        root["t"] = seq
        return
    entry = inst.rmap.pop(ev["TimerId"])
    root = inst.roots[entry[0]]
    if root["att"] >= root["max"]:
        return  # the SDK now fails the task with the last error
    root["att"] += 1
    seq = inst.next_seq
    inst.next_seq += 1
    inst.rmap[seq] = [entry[0], "attempt"]
    root.setdefault("s", []).append(seq)
    if root["k"] == "a":
        d.events.append(h.event(h.TASK_SCHEDULED, ts, seq, Name=root["n"], Version="", Input=root["i"]))
        d.work.append((seq, root["n"], root["i"]))
        inst.open[seq] = "a"
    else:
        child_id = root["id"] or f"{inst.execution_id}:{seq}"
        d.events.append(
            h.event(
                h.SUB_ORCHESTRATION_CREATED,
                ts,
                seq,
                Name=root["n"],
                InstanceId=child_id,
                Input=root["i"],
                Version=root["v"] or "",
            )
        )
        d.children.append((seq, root["n"], child_id, root["i"], root["v"]))
        inst.open[seq] = "o"
