"""Entity batches run by external workers (the gRPC sidecar protocol), and the critical sections of entity locks.

An entity whose function is not in the app (while a gRPC endpoint serves the engine) is run by a worker: its
next batch of operations, with its state, is handed to one, and the worker's answer commits as a batch of
the app's own entities does (state, replies and deleted operations together). Lock requests of a gRPC
orchestration's ``lock_entities`` are handled here, not by the worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.entities import ENTITY_BATCH, BatchResult, EntitySignal, OperationResult
from devhost.durable.engine.remote.orchestrations import Failure
from devhost.durable.engine.remote.workers import EntityFlight, Item
from devhost.durable.engine.state import EntityInstance, EntityOp, Instance, split_entity_id
from devhost.durable.store import Store
from devhost.durable.timeutil import epoch_to_history


class RemoteEntitiesSite(Protocol):
    """What remote entity batches need of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the engine runs on (None before start)."""

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""

    def transaction(self) -> AbstractContextManager[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        """Persist an event for ``target`` (inside the open transaction) and schedule it."""


class EntityQueues(Protocol):
    """The entities with operations waiting (``Entities``)."""

    def get(self, entity_id: str) -> EntityInstance | None:
        """The entity with operations waiting under ``entity_id``, if any."""

    def waiting(self) -> list[EntityInstance]:
        """Every entity with operations waiting (a snapshot)."""

    def schedule(self, ent: EntityInstance) -> None:
        """Queue ``ent`` for the dispatcher when it has operations and none in flight."""

    def forget_if_idle(self, ent: EntityInstance) -> None:
        """Drop ``ent`` once it has nothing queued and holds no lock (it lives in the store only then)."""

    def send_op(self, entity_id: str, request: dict[str, Any]) -> None:
        """Persist an operation for an entity (inside the caller's transaction); it runs after the commit."""

    def apply_batch(self, ent: EntityInstance, batch: list[EntityOp], result: BatchResult, *, existed: bool) -> None:
        """Write the new state, reply to each calling orchestration, send the entity's own signals."""


class EntityWorkers(Protocol):
    """The gRPC sidecar's work queues (``ExternalWorkers``)."""

    def new_token(self, instance_id: str) -> str:
        """A fresh token for an orchestration episode or entity batch."""

    def offer_entity(self, flight: EntityFlight) -> None:
        """Queue an entity batch for the next worker."""

    def claim(self, token: str) -> Item | None:
        """The held item a completion names, no longer held; None for an unknown or already used token."""


class RemoteEntities:
    """Entity batches run by external workers, and the critical sections of entity locks."""

    def __init__(self, site: RemoteEntitiesSite, entities: EntityQueues, workers: EntityWorkers) -> None:
        self._site = site
        self._entities = entities
        self._workers = workers
        self.batches_run = 0

    def episode(self, ent: EntityInstance) -> None:
        """Hand the entity's next batch of operations, with its state, to a worker (after the slice commits)."""
        if ent.flight is not None:
            return
        batch, waiting, again = self._due_operations(ent)
        if again:
            self._site.defer(lambda: self._entities.schedule(ent))  # a lock was released: look at the queue again
        if not batch:
            loop = self._site.loop
            if waiting is not None and loop is not None:  # only scheduled signals: wake up for the first
                loop.call_later(max(0.0, waiting - time.time()), self._entities.schedule, ent)
            else:
                self._entities.forget_if_idle(ent)
            return
        found = self._site.store.get_entity(ent.id)
        token = self._workers.new_token(ent.id)
        flight = EntityFlight(token, ent.id, batch, found[0] if found else None, found is not None)
        ent.flight = flight
        self.batches_run += 1
        self._site.defer(lambda: self._workers.offer_entity(flight))

    def _due_operations(self, ent: EntityInstance) -> tuple[list[EntityOp], float | None, bool]:
        """The next batch of operations to run (in order), when the first scheduled one left waiting is due, and
        whether a lock was released (so what waited on it is looked at again).

        Lock messages are handled here, not by the worker: a lock request takes a free entity (and goes on to
        the next entity of its lock set, or is granted to the orchestration), waits while another critical
        section holds it; while held, only the holder's operations run; the holder's unlock frees it.
        """
        now = time.time()
        self._adopt_held_lock(ent)
        due: list[EntityOp] = []
        kept: list[EntityOp] = []
        released = False
        while ent.queue and len(due) < ENTITY_BATCH:
            op = ent.queue.popleft()
            request = op.request
            not_before = request.get("notBefore")
            if not_before and float(not_before) > now:
                kept.append(op)
            elif "lock" in request:
                if ent.lock is None:
                    self._take_lock(ent, op)
                else:
                    kept.append(op)
            elif "unlock" in request:
                self._site.store.delete_entity_ops([op.op_id])
                if ent.lock is not None and ent.lock.request.get("held") == request["unlock"]:
                    self._site.store.delete_entity_ops([ent.lock.op_id])
                    ent.lock, released = None, True
                    break
            elif ent.lock is not None and request.get("parent") != ent.lock.request.get("parent"):
                kept.append(op)  # another caller's operation waits for the critical section to end
            else:
                due.append(op)
        ent.queue.extendleft(reversed(kept))
        waiting = [float(op.request["notBefore"]) for op in kept if op.request.get("notBefore")]
        return due, (min(waiting) if waiting and not due else None), released

    @staticmethod
    def _adopt_held_lock(ent: EntityInstance) -> None:
        """After a restart the lock an entity held is its "held" op in the queue: take it out and hold it."""
        if ent.lock is not None:
            return
        for op in ent.queue:
            if "held" in op.request:
                ent.queue.remove(op)
                ent.lock = op
                return

    def _take_lock(self, ent: EntityInstance, op: EntityOp) -> None:
        """Lock the entity for a critical section; pass the request on to the next entity, or grant it."""
        request = op.request
        held = {"held": request["lock"], "parent": request.get("parent")}
        self._site.store.delete_entity_ops([op.op_id])
        ent.lock = EntityOp(self._site.store.insert_entity_op(ent.id, h.dumps(held)), held)
        lock_set, position = list(request.get("lockSet") or []), int(request.get("position", 0))
        if position + 1 < len(lock_set):
            self._entities.send_op(lock_set[position + 1], {**request, "position": position + 1})
            return
        parent = self._site.instances.get(str(request.get("parent")))
        if parent is None or parent.execution_id != request.get("parentExecution"):
            return  # the orchestration is gone: its unlock never comes (purging the entity's owner does not free it)
        ev = h.event(h.EVENT_RAISED, epoch_to_history(time.time()), Name=request["lock"], EntityLockGranted=True)
        self._site.send_inbox(parent, ev, parent.execution_id)

    def complete_remote_entity(
        self,
        token: str,
        results: list[tuple[str | None, Failure | None]],
        state: str | None,
        signals: list[tuple[str, str, str | None, float | None]],
        batch_failure: Failure | None = None,
    ) -> None:
        """Apply a worker's batch result: new state (None: deleted), one result per operation, signals it sent.

        As for the app's entities, the state, the replies and the deletion of the operations commit together.
        ``batch_failure``: the whole batch failed; every operation fails with it and the state stays.
        """
        self._site.require_started()
        flight = self._workers.claim(token)
        if not isinstance(flight, EntityFlight):
            return
        ent = self._entities.get(flight.entity_id)
        if ent is None or ent.flight is not flight:
            return
        ent.flight = None
        batch = flight.batch
        if batch_failure is None and len(results) != len(batch):
            message = f"the worker returned {len(results)} results for {len(batch)} operations"
            batch_failure = Failure("InvalidBatchResult", message)
        if batch_failure is not None:
            results, state, signals = [(None, batch_failure)] * len(batch), flight.state, []
        outcomes = [
            OperationResult(result=result)
            if failure is None
            else OperationResult(isError=True, result=h.dumps(failure.message), failure=failure.details())
            for result, failure in results
        ]
        sent = []
        for target, operation, input_text, not_before in signals:
            name, key = split_entity_id(target)
            target_ref = {"name": name, "key": key}
            sent.append(EntitySignal(target=target_ref, name=operation, input=input_text, notBefore=not_before))
        result = BatchResult(entityExists=state is not None, entityState=state, results=outcomes, signals=sent)
        with self._site.transaction():
            self._entities.apply_batch(ent, batch, result, existed=flight.existed)
            self._site.store.delete_entity_ops([op.op_id for op in batch])
        if ent.queue:
            self._entities.schedule(ent)
        else:
            self._entities.forget_if_idle(ent)

    async def release_orphaned_locks(self) -> int:
        """Free entities whose critical section belongs to an orchestration that is no longer running."""
        self._site.require_started()
        orphaned = []
        for ent in self._entities.waiting():
            if ent.lock is None and ent.queue:
                self._adopt_held_lock(ent)
            if ent.lock is not None and str(ent.lock.request.get("parent")) not in self._site.instances:
                orphaned.append(ent)
        if not orphaned:
            return 0
        with self._site.transaction():
            self._site.store.delete_entity_ops([ent.lock.op_id for ent in orphaned if ent.lock is not None])
        for ent in orphaned:
            ent.lock = None
            if ent.queue:
                self._entities.schedule(ent)
            else:
                self._entities.forget_if_idle(ent)
        return len(orphaned)

    def offer_again(self, flight: EntityFlight) -> None:
        """A worker gave an entity batch back (or its stream closed): queue its operations again."""
        ent = self._entities.get(flight.entity_id)
        if ent is not None and ent.flight is flight:
            ent.flight = None
            ent.queue.extendleft(reversed(flight.batch))
            self._entities.schedule(ent)
