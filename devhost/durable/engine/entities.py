"""Durable Entities: operations queued per entity, run one batch at a time, state and replies in one commit.

An entity is addressed as ``@name@key``. Operations sent to it (by orchestrations, by clients, by other
entities) are persisted in ``entity_ops`` and run in the order they were sent, one batch per dispatcher
turn, never two batches of one entity at once. A batch is one call of the entity function with the
extension's out-of-process batch request; its result (new state, one result per operation) is written in
the dispatcher's slice transaction together with the replies to the calling orchestrations and the
deletion of the operations it ran, so a crash (even ``kill -9``) leaves all of it or none of it, and the
operations run again after a restart. The shapes are in docs/durable-protocol.md.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from devhost.durable import history as h
from devhost.durable.engine.core import FunctionTable, flog, log
from devhost.durable.engine.state import EntityInstance, EntityOp, Instance, entity_id_of, split_entity_id
from devhost.durable.store import Store
from devhost.durable.timeutil import epoch_to_history, epoch_to_status
from devhost.functions import ids
from devhost.functions.logs import current_invocation
from devhost.functions.model import FunctionInfo, InstanceNotFound, InvalidRequest

# Operations one entity function call runs at most (the rest wait for the next batch); the extension allows
# up to 5000 (maxEntityOperationBatchSize), 1000 keeps a fan-in of replies to few orchestrator replays.
ENTITY_BATCH = 1000


class OperationResult(BaseModel):
    """One operation's outcome in the entity function's reply."""

    isError: bool = False  # noqa: N815 - the wire name
    result: str | None = None
    duration: int = 0
    # A gRPC worker's failure (type, message, stack) for its orchestrations; never part of the JSON protocol.
    failure: dict[str, Any] | None = None


class EntitySignal(BaseModel):
    """A signal an entity sends to another entity."""

    target: dict[str, str]
    name: str
    input: str | None = None
    # A gRPC worker's scheduled signal: not delivered before this epoch time; never part of the JSON protocol.
    notBefore: float | None = None  # noqa: N815 - beside the wire names


class BatchResult(BaseModel):
    """The entity function's reply to one batch request."""

    entityExists: bool  # noqa: N815 - the wire name
    entityState: str | None = None  # noqa: N815
    results: list[OperationResult]
    signals: list[EntitySignal] = []


class EntitiesSite(Protocol):
    """What entities need of the engine core (``EngineCore``)."""

    functions: FunctionTable

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    @property
    def stopping(self) -> bool:
        """Whether the engine is stopping (nothing new is scheduled)."""

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""

    def transaction(self) -> AbstractContextManager[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def make_ready(self, item: Instance | EntityInstance) -> None:
        """Queue an instance or entity for the dispatcher and wake it."""

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        """Persist an event for ``target`` (inside the open transaction) and schedule it."""


class WorkerPresence(Protocol):
    """Whether gRPC sidecar workers are served (``ExternalWorkers``): then an unknown entity runs at one."""

    @property
    def enabled(self) -> bool:
        """Whether a gRPC endpoint serves workers (then unknown functions run at one)."""


class Entities:
    """Durable Entities: operations queued per entity, run one batch at a time, state and replies in one commit.

    It owns the entities with operations waiting (an entity without pending operations lives in the store only).
    """

    def __init__(self, site: EntitiesSite, workers: WorkerPresence) -> None:
        self._site = site
        self._workers = workers
        self._entities: dict[str, EntityInstance] = {}
        self.batches_run = 0

    # ----- the entities with operations waiting ---------------------------------------------

    def get(self, entity_id: str) -> EntityInstance | None:
        """The entity with operations waiting under ``entity_id``, if any."""
        return self._entities.get(entity_id)

    def waiting(self) -> list[EntityInstance]:
        """Every entity with operations waiting (a snapshot)."""
        return list(self._entities.values())

    def __contains__(self, entity_id: object) -> bool:
        return entity_id in self._entities

    def __len__(self) -> int:
        return len(self._entities)

    def forget_if_idle(self, ent: EntityInstance) -> None:
        """Drop ``ent`` once it has nothing queued and holds no lock (it lives in the store only then)."""
        if self._entities.get(ent.id) is ent and not ent.queue and ent.lock is None:
            del self._entities[ent.id]

    def clear(self) -> None:
        """Forget every entity (a reload from the store follows, or the engine stops)."""
        self._entities.clear()

    # ----- sending -------------------------------------------------------------------------

    def send_op(self, entity_id: str, request: dict[str, Any]) -> None:
        """Persist an operation for an entity (inside the caller's transaction); it runs after the commit."""
        op_id = self._site.store.insert_entity_op(entity_id, h.dumps(request))
        ent = self._entities.get(entity_id)
        if ent is None:
            ent = self._entities[entity_id] = EntityInstance(entity_id)
        ent.queue.append(EntityOp(op_id, request))
        self._site.defer(functools.partial(self.schedule, ent))

    def schedule(self, ent: EntityInstance) -> None:
        """Queue ``ent`` for the dispatcher when it has operations and none in flight."""
        if (
            ent.queued
            or ent.flight is not None
            or self._site.stopping
            or self._entities.get(ent.id) is not ent
            or not ent.queue
        ):
            return
        ent.queued = True
        self._site.make_ready(ent)

    def recover(self) -> None:
        """Load every pending operation from the store and queue its entity (start, or after a store fault)."""
        for op_id, entity_id, body in self._site.store.entity_ops():
            ent = self._entities.get(entity_id)
            if ent is None:
                ent = self._entities[entity_id] = EntityInstance(entity_id)
            ent.queue.append(EntityOp(op_id, json.loads(body)))
        for ent in self._entities.values():
            self.schedule(ent)

    # ----- one batch -----------------------------------------------------------------------

    def episode(self, ent: EntityInstance) -> None:
        """Run the next batch of an entity's operations; effects go into the open slice transaction."""
        batch = [ent.queue.popleft() for _ in range(min(len(ent.queue), ENTITY_BATCH))]
        if batch:
            self.batches_run += 1
            found = self._site.store.get_entity(ent.id)
            state = found[0] if found else None
            fn = self._site.functions.entities.get(ent.name)
            if fn is None:
                message = self._site.functions.unknown(ent.name, "entity")
                result = _failed_batch(len(batch), message, found is not None, state)
            else:
                result = self._invoke_entity(fn, ent, found is not None, state, batch)
            self.apply_batch(ent, batch, result, existed=found is not None)
            self._site.store.delete_entity_ops([op.op_id for op in batch])
        if ent.queue:
            self.schedule(ent)
        elif self._entities.get(ent.id) is ent:
            del self._entities[ent.id]

    def _invoke_entity(
        self, fn: FunctionInfo, ent: EntityInstance, exists: bool, state: str | None, batch: list[EntityOp]
    ) -> BatchResult:
        """Call the entity function with one batch request; a broken call fails every operation of the batch."""
        request = {
            "self": {"name": ent.name, "key": ent.key},
            "exists": exists,
            "state": state,
            "batch": [
                {
                    "name": op.request.get("op"),
                    "input": op.request.get("input"),
                    "isSignal": bool(op.request.get("signal")),
                }
                for op in batch
            ],
        }
        invocation_id = ids.invocation_id()
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        token = current_invocation.set((fn.name, invocation_id))
        try:
            reply = fn.user_function(h.dumps(request))
            result = BatchResult.model_validate_json(reply if isinstance(reply, str | bytes) else h.dumps(reply))
            if len(result.results) != len(batch):
                raise ValueError(f"the entity returned {len(result.results)} results for {len(batch)} operations")
            outcome = "Succeeded"
        except (ValidationError, ValueError, TypeError) as exc:
            outcome, result = "Failed", _failed_batch(len(batch), f"Invalid entity batch result: {exc}", exists, state)
        except Exception as exc:
            outcome, result = "Failed", _failed_batch(len(batch), f"{type(exc).__name__}: {exc}", exists, state)
        finally:
            current_invocation.reset(token)
        if outcome == "Failed":
            flog.error("Exception while executing function: Functions.%s (Id=%s)", fn.name, invocation_id)
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            outcome,
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        return result

    def apply_batch(self, ent: EntityInstance, batch: list[EntityOp], result: BatchResult, *, existed: bool) -> None:
        """Write the new state, reply to each calling orchestration, send the entity's own signals."""
        now = time.time()
        if result.entityExists:
            self._site.store.put_entity(ent.id, result.entityState, now)
        elif existed:
            self._site.store.delete_entity(ent.id)
            log.info("%s: entity deleted.", ent.id)
        ts = epoch_to_history(now)
        for op, outcome in zip(batch, result.results, strict=True):
            if outcome.isError:
                log.warning("%s: operation '%s' failed: %s", ent.id, op.request.get("op"), outcome.result)
            if not op.request.get("signal"):
                self._reply(op.request, outcome, ts)
        for signal in result.signals:
            target = entity_id_of(signal.target.get("name", ""), signal.target.get("key", ""))
            request = entity_request(signal.name, signal.input, signal=True, ts=ts, parent=ent.id)
            if signal.notBefore:
                request["notBefore"] = signal.notBefore
            self.send_op(target, request)

    def _reply(self, request: dict[str, Any], outcome: OperationResult, ts: str) -> None:
        """Deliver an operation's result to the orchestration that called it (dropped if that execution ended)."""
        parent = self._site.instances.get(str(request.get("parent")))
        if parent is None or parent.execution_id != request.get("parentExecution"):
            return
        if parent.remote:
            # A gRPC worker gets EntityOperationCompleted/Failed (devhost.durable.sidecar.convert reads these fields).
            failure = outcome.failure or {"ErrorType": "EntityOperationFailed", "ErrorMessage": outcome.result}
            fields: dict[str, Any] = {"FailureDetails": failure} if outcome.isError else {"Input": outcome.result}
            ev = h.event(h.EVENT_RAISED, ts, Name=request.get("id"), EntityResponse=True, **fields)
        else:
            response: dict[str, Any] = {"result": outcome.result if outcome.result is not None else "null"}
            if outcome.isError:
                response["exceptionType"] = "Error"
            ev = h.event(h.EVENT_RAISED, ts, Name=request.get("id"), Input=h.dumps(response))
        self._site.send_inbox(parent, ev, parent.execution_id)

    # ----- client API ----------------------------------------------------------------------

    async def signal_entity(
        self, name: str, key: str, operation: str, input_text: str | None, *, not_before: float | None = None
    ) -> None:
        """Send a one-way operation to an entity (the extension's SignalEntityAsync); ``not_before``: a gRPC
        client's scheduled signal (run by its worker no earlier)."""
        self._site.require_started()
        entity_id = entity_id_of(name, key)
        if not self.is_remote(name) and name.lower() not in self._site.functions.entities:
            raise InvalidRequest(self._site.functions.unknown(name, "entity"))
        request = entity_request(operation, input_text, signal=True, ts=epoch_to_history(time.time()))
        if not_before:
            request["notBefore"] = not_before
        with self._site.transaction():
            self.send_op(entity_id, request)

    def is_remote(self, name: str) -> bool:
        """An entity whose function is not in the app runs at a gRPC worker, while an endpoint serves one."""
        return self._workers.enabled and name.lower() not in self._site.functions.entities

    def entity_record(self, entity_id: str) -> tuple[str | None, float] | None:
        """(state JSON text, last operation time) of an existing entity, or None."""
        self._site.require_started()
        return self._site.store.get_entity(entity_id)

    def entity_records(
        self, *, prefix: str, op_from: float | None, op_to: float | None, after: str | None, limit: int
    ) -> list[tuple[str, str | None, float]]:
        """Existing entities by id prefix and last operation time, after an id, at most ``limit``."""
        self._site.require_started()
        return self._site.store.query_entities(prefix=prefix, op_from=op_from, op_to=op_to, after=after, limit=limit)

    async def read_entity_state(self, name: str, key: str) -> tuple[bool, str | None]:
        """(exists, state JSON text) of an entity."""
        self._site.require_started()
        found = self._site.store.get_entity(entity_id_of(name, key))
        return (found is not None, found[0] if found else None)

    async def list_entities(
        self,
        *,
        name: str | None,
        op_from: float | None,
        op_to: float | None,
        top: int,
        continuation: str | None,
        fetch_state: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Existing entities (of one name, or all) as the extension's DurableEntityStatus, one page at a time."""
        self._site.require_started()
        after: str | None = None
        if continuation:
            try:
                after = base64.b64decode(continuation.encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
            except (ValueError, binascii.Error, UnicodeError) as exc:
                raise InvalidRequest("The continuation token is not valid.") from exc
            if not after.startswith("@"):
                raise InvalidRequest("The continuation token is not valid.")
        prefix = entity_id_of(name, "") if name else "@"
        rows = self._site.store.query_entities(prefix=prefix, op_from=op_from, op_to=op_to, after=after, limit=top + 1)
        token = None
        if len(rows) > top:
            rows = rows[:top]
            token = base64.urlsafe_b64encode(rows[-1][0].encode("utf-8")).decode("ascii")
        items = []
        for entity_id, state, last_op in rows:
            entity_name, key = split_entity_id(entity_id)
            items.append(
                {
                    "entityId": {"name": entity_name, "key": key},
                    "lastOperationTime": epoch_to_status(last_op),
                    "state": h.parse_json_or_text(state) if fetch_state and state is not None else None,
                }
            )
        return items, token

    # ----- entities as instances (the extension's /instances endpoints) ---------------------

    def status(self, entity_id: str, show_input: bool) -> dict[str, Any] | None:
        """An existing entity as the instance status the extension shows for ``@name@key``, or None."""
        found = self._site.store.get_entity(entity_id)
        return None if found is None else entity_status(entity_id, found[0], found[1], show_input)

    def rows(
        self, *, prefix: str | None, created_from: float | None, created_to: float | None, after: str | None, limit: int
    ) -> list[tuple[str, str | None, float]]:
        """Existing entities for the instance listing (an orchestration id prefix matches no entity)."""
        if prefix and not prefix.startswith("@"):
            return []
        return self._site.store.query_entities(
            prefix=prefix or "@", op_from=created_from, op_to=created_to, after=after, limit=limit
        )

    async def purge(self, entity_id: str) -> int:
        """Delete an entity and its state (DELETE instances/@name@key); 0 while it has operations to run."""
        self._site.require_started()
        if self._site.store.get_entity(entity_id) is None:
            raise InstanceNotFound(f"No instance with ID '{entity_id}' was found.")
        if entity_id in self._entities:
            # The same rule as for orchestrations: nothing in flight is purged (its operations would
            # otherwise recreate it half-way).
            log.warning("%s: entity has operations to run; only idle entities are purged.", entity_id)
            return 0
        with self._site.transaction():
            return self._site.store.delete_entity(entity_id)


def entity_request(
    operation: str, input_text: str | None, *, signal: bool, ts: str, parent: str | None = None
) -> dict[str, Any]:
    """A request message in the extension's shape (``op``, ``signal``, ``input``, ``id``, ``parent``...)."""
    request: dict[str, Any] = {"op": operation, "id": str(uuid.uuid4()), "timestamp": ts}
    if signal:
        request["signal"] = True
    if input_text is not None:
        request["input"] = input_text
    if parent is not None:
        request["parent"] = parent
    return request


def entity_status(entity_id: str, state: str | None, last_op: float, show_input: bool) -> dict[str, Any]:
    """An entity in the instance status shape: ``Running`` while it exists, its state in ``input``.

    The extension (Azure Storage) stores an entity as an orchestration instance whose input is the
    entity's scheduler state; devhost shows ``{"exists": true, "state": <state JSON text>}`` and, keeping
    no creation time for entities, the last operation time as both times.
    """
    name, _key = split_entity_id(entity_id)
    when = epoch_to_status(last_op)
    return {
        "name": name,
        "instanceId": entity_id,
        "runtimeStatus": "Running",
        "input": {"exists": True, "state": state} if show_input else None,
        "customStatus": None,
        "output": None,
        "createdTime": when,
        "lastUpdatedTime": when,
    }


def _failed_batch(count: int, message: str, exists: bool, state: str | None) -> BatchResult:
    """A batch whose every operation failed with ``message``; the state stays as it was."""
    error = OperationResult(isError=True, result=h.dumps(message))
    return BatchResult(entityExists=exists, entityState=state, results=[error] * count)
