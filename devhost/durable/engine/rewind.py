"""Rewind: re-open the failed tasks of a failed instance (and of its failed children) and re-run them."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.core import instance_from_row
from devhost.durable.engine.state import Decisions, Instance, Message
from devhost.durable.store import Store
from devhost.durable.store_schema import InstanceRow
from devhost.durable.timeutil import (
    epoch_to_history,
    parse_history_time,
)
from devhost.functions.logs import host_logger
from devhost.functions.model import (
    InstanceNotFound,
    PreconditionFailed,
)

log = host_logger("devhost.durable")


def _reopen_exhausted_retry(inst: Instance) -> tuple[set[int], int | None]:
    """The attempt ids of with-retry calls that stay failed, and the retry timer a rewind removes (if any).

    Attempts of with-retry calls normally stay failed: removing one would shift the ids the SDK
    allocates. The exception is the exhausted call whose final retry timer took the last id (the
    usual cause of the failure): its last attempt is re-opened and that timer removed.
    """
    retry_seqs = {seq for root in inst.roots for seq in root.get("s", ())}
    for index, root in enumerate(inst.roots):
        timer_seq = root.get("t")
        if root.get("att", 1) >= root.get("max", 1) and timer_seq is not None and timer_seq == inst.next_seq - 1:
            last_attempt = root["s"][-1]
            retry_seqs.discard(last_attempt)
            inst.next_seq -= 1
            inst.rmap[last_attempt] = [index, "attempt"]
            root.pop("t", None)
            return retry_seqs, timer_seq
    return retry_seqs, None


def _rewound_history(
    events: list[dict[str, Any]], retry_seqs: set[int], dropped_timer: int | None
) -> tuple[list[dict[str, Any]], dict[int, str], dict[int, dict[str, Any]]]:
    """The history a rewind keeps, the failed tasks it re-opens (seq -> kind), and every scheduling event by seq."""
    scheduled: dict[int, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    reopened: dict[int, str] = {}
    for ev in events:
        et = ev.get("EventType")
        if dropped_timer is not None and (
            (et == h.TIMER_CREATED and ev.get("EventId") == dropped_timer)
            or (et == h.TIMER_FIRED and ev.get("TimerId") == dropped_timer)
        ):
            continue
        if et in (h.TASK_SCHEDULED, h.SUB_ORCHESTRATION_CREATED, h.TIMER_CREATED):
            scheduled[ev["EventId"]] = ev
        if et == h.EXECUTION_COMPLETED:
            continue
        if et in (h.TASK_FAILED, h.SUB_ORCHESTRATION_FAILED):
            seq = ev.get("TaskScheduledId", -1)
            if seq not in retry_seqs:
                reopened[seq] = "a" if et == h.TASK_FAILED else "o"
                continue
        kept.append(ev)
    return kept, reopened, scheduled


class RewindSite(Protocol):
    """What a rewind needs of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""

    def transaction(self) -> AbstractContextManager[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing."""

    def track(self, inst: Instance) -> None:
        """Hold ``inst`` as a live (non-terminal) instance."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""


class DecisionWriter(Protocol):
    """Who persists an episode's decisions (``ActionHandlers``)."""

    def persist_decisions(self, inst: Instance, d: Decisions) -> None:
        """Write the episode's work items, timers, cancellations and children; dispatch after commit."""


class Rewinder:
    """Rewind: re-open the failed tasks of a failed instance (and of its failed children) and re-run them."""

    def __init__(self, site: RewindSite, decisions: DecisionWriter) -> None:
        self._site = site
        self._decisions = decisions

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """Rewind a Failed instance: drop its failures, re-run failed and unfinished work, replay."""
        self._site.require_started()
        if instance_id in self._site.instances:
            raise PreconditionFailed(f"Only failed instances can be rewound; '{instance_id}' is still running.")
        row = self._site.store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        if row.status != "Failed":
            raise PreconditionFailed(f"Only failed instances can be rewound; '{instance_id}' is {row.status}.")
        with self._site.transaction():
            self._rewind_locked(row, reason)

    def _rewind_locked(self, row: InstanceRow, reason: str | None) -> None:
        store = self._site.store
        inst = instance_from_row(row)
        events = [json.loads(t) for t in store.history(row.instance_id)]
        retry_seqs, dropped_timer = _reopen_exhausted_retry(inst)
        kept, reopened, scheduled = _rewound_history(events, retry_seqs, dropped_timer)
        inst.open.update(reopened)
        texts = [h.render(e) for e in kept]
        store.replace_history(inst.id, texts)
        store.delete_instance_work(inst.id)
        inst.texts = texts
        inst.joined = ",".join(texts)
        inst.status = "Running" if texts else "Pending"
        inst.output_text = None
        inst.updated = time.time()
        self._site.track(inst)
        self._decisions.persist_decisions(inst, self._rerun_open_tasks(inst, scheduled, reason))
        marker = h.event(h.GENERIC_EVENT, epoch_to_history(time.time()), Data=f"Rewound: {reason or ''}")
        inbox_id = store.insert_inbox(inst.id, None, h.render(marker))
        inst.inbox.append(Message(marker, None, inbox_id=inbox_id))
        self._site.save(inst)
        log.info("%s: orchestration '%s' rewound.", inst.id, inst.name)
        self._site.defer(functools.partial(self._site.schedule, inst))

    def _rerun_open_tasks(self, inst: Instance, scheduled: dict[int, dict[str, Any]], reason: str | None) -> Decisions:
        """Re-run every open task: failed ones and those a failing episode recorded but never ran."""
        d = Decisions()
        for seq, kind in sorted(inst.open.items()):
            source = scheduled.get(seq)
            if source is None:
                continue
            if kind == "a":
                d.work.append((seq, source.get("Name") or "", source.get("Input")))
            elif kind == "t":
                fire_text = source.get("FireAt") or epoch_to_history(time.time())
                d.timers.append((seq, parse_history_time(fire_text), fire_text))
            elif kind == "o":
                self._rerun_child(inst, seq, source, reason, d)
        return d

    def _rerun_child(self, inst: Instance, seq: int, source: dict[str, Any], reason: str | None, d: Decisions) -> None:
        """A failed sub-orchestration is rewound too; one that never started is started."""
        child_id = source.get("InstanceId") or f"{inst.execution_id}:{seq}"
        child_row = self._site.store.get_instance(child_id)
        if child_row is not None and child_row.status == "Failed":
            self._rewind_locked(child_row, reason)
        elif child_id not in self._site.instances:
            d.children.append(
                (seq, source.get("Name") or "", child_id, source.get("Input"), source.get("Version") or None)
            )
