"""Recovery: load what is in flight from the store at start, and reload it after the store wrote again."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from devhost.durable.engine.core import STORE_ERRORS, instance_from_row, log
from devhost.durable.engine.state import Instance, Message, Work
from devhost.durable.statuses import RUNNING_STATES
from devhost.durable.store import Store


class RecoverySite(Protocol):
    """What recovery needs of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def track(self, inst: Instance) -> None:
        """Hold ``inst`` as a live (non-terminal) instance."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""

    def forget_all(self) -> None:
        """Drop every live instance and ready item (a reload from the store follows)."""

    def still_failing(self, exc: BaseException) -> None:
        """A probe or reload during healing failed: the fault stays, with this reason."""

    def healed(self) -> None:
        """The store writes again."""


class RecoveredWork(Protocol):
    """Who runs the recovered work items (``ActivityRunner``)."""

    def enqueue(self, work: Work) -> None:
        """Queue a work item of a live execution: for a local worker, or a gRPC worker for a remote instance."""

    def drop_queued(self) -> None:
        """Forget queued (not started) work: it stays in the store and is queued again by a reload."""


class RecoveredTimers(Protocol):
    """Who arms the recovered durable timers (``DurableTimers``)."""

    def arm(self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str) -> None:
        """Arm the timer ``seq`` of ``inst`` (store row ``timer_id``) to fire at ``fire_at`` (epoch seconds)."""


class Reloadable(Protocol):
    """A part with in-memory state that a reload rebuilds from the store (``Entities``, ...)."""

    def recover(self) -> None:
        """Load this part's pending work from the store and schedule it (start, or after a store fault)."""

    def clear(self) -> None:
        """Forget this part's in-memory state (a reload from the store follows)."""


class Recovery:
    """Load what is in flight from the store at start, and reload it after the store wrote again."""

    def __init__(
        self,
        site: RecoverySite,
        *,
        work: RecoveredWork,
        timers: RecoveredTimers,
        entities: Reloadable,
        drop_on_reload: Sequence[Callable[[], None]] = (),
    ) -> None:
        self._site = site
        self._work = work
        self._timers = timers
        self._entities = entities
        # What else memory holds that the store offers again after a reload (remote answers, the workers' queues).
        self._drop_on_reload = tuple(drop_on_reload)

    def recover(self) -> None:
        """Load the instances in flight, queue their work, arm their timers, schedule what has messages."""
        site = self._site
        store = site.store
        for row in store.instances_with_status(sorted(RUNNING_STATES)):
            inst = instance_from_row(row)
            inst.texts = store.history(row.instance_id)
            inst.joined = ",".join(inst.texts)
            for inbox_id, execution_id, body in store.inbox(row.instance_id):
                inst.inbox.append(Message(json.loads(body), execution_id, inbox_id=inbox_id))
            site.track(inst)
        instances = site.instances
        stale_work: list[int] = []
        for work_id, instance_id, execution_id, seq, name, input_text in store.activities():
            owner = instances.get(instance_id)
            if owner is None or owner.execution_id != execution_id or owner.open.get(seq) != "a":
                stale_work.append(work_id)
                continue
            self._work.enqueue(Work(work_id, instance_id, execution_id, seq, name, input_text))
        stale_timers: list[int] = []
        for timer_id, instance_id, execution_id, seq, fire_at, fire_text in store.timers():
            owner = instances.get(instance_id)
            if owner is None or owner.execution_id != execution_id or owner.open.get(seq) != "t":
                stale_timers.append(timer_id)
                continue
            self._timers.arm(owner, execution_id, seq, timer_id, fire_at, fire_text)
        if stale_work or stale_timers:
            store.begin()
            store.delete_activities(stale_work)
            store.delete_timers(stale_timers)
            store.commit()
        for inst in list(instances.values()):
            if not inst.texts or inst.inbox:
                site.schedule(inst)
        self._entities.recover()

    def heal(self) -> bool:
        """Probe the store; when it writes again, reload the in-memory state from it as a start does."""
        site = self._site
        try:
            site.store.probe_write()
        except STORE_ERRORS as exc:
            site.still_failing(exc)
            return False
        # Memory may hold changes of transactions that were rolled back: drop it all and reload.
        site.forget_all()
        self._entities.clear()
        for drop in self._drop_on_reload:
            drop()
        self._work.drop_queued()  # recovery queues every pending activity again from the store
        try:
            self.recover()
        except STORE_ERRORS as exc:
            site.store.rollback()
            site.still_failing(exc)
            return False
        site.healed()
        log.warning("The durable store writes again; %d instances in flight resumed.", len(site.instances))
        return True
