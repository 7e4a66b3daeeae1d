"""The client API: start, status, query, events, terminate, suspend, resume, restart, purge."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.core import (
    DEFAULT_PAGE_SIZE,
    PURGE_BATCH,
    RECLAIM_PAGES,
    STORE_ERRORS,
    FunctionTable,
    execution_started,
    log,
)
from devhost.durable.engine.entities import WorkerPresence, entity_status
from devhost.durable.engine.state import Instance, Message, parse_json_text, validate_instance_id
from devhost.durable.statuses import ALL_STATUSES, TERMINAL_STATES
from devhost.durable.store import Store
from devhost.durable.store_schema import InstanceRow
from devhost.durable.timeutil import (
    datetime_to_epoch,
    epoch_to_history,
    epoch_to_status,
)
from devhost.functions.model import (
    InstanceAlreadyExists,
    InstanceGone,
    InstanceNotFound,
    InvalidRequest,
    LoadedApp,
    PreconditionFailed,
)


class ManagementSite(Protocol):
    """What the client API needs of the engine core (``EngineCore``)."""

    app: LoadedApp
    hub_name: str
    functions: FunctionTable

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    @property
    def has_ready(self) -> bool:
        """Whether an instance or entity waits for the dispatcher."""

    @property
    def delayed(self) -> int:
        """Instances waiting out a fan-in coalescing window."""

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""

    def transaction(self) -> AbstractContextManager[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing."""

    def track(self, inst: Instance) -> None:
        """Hold ``inst`` as a live (non-terminal) instance."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""

    def add_waiter(self, instance_id: str) -> asyncio.Future[None]:
        """A future resolved when the instance ends."""

    def remove_waiter(self, instance_id: str, fut: asyncio.Future[None]) -> None:
        """Stop waiting with ``fut``."""


class EntityRecords(Protocol):
    """The entities as the instance endpoints show them (``Entities``)."""

    def status(self, entity_id: str, show_input: bool) -> dict[str, Any] | None:
        """An existing entity as the instance status the extension shows for ``@name@key``, or None."""

    def rows(
        self, *, prefix: str | None, created_from: float | None, created_to: float | None, after: str | None, limit: int
    ) -> list[tuple[str, str | None, float]]:
        """Existing entities for the instance listing (an orchestration id prefix matches no entity)."""

    async def purge(self, entity_id: str) -> int:
        """Delete an entity and its state (DELETE instances/@name@key); 0 while it has operations to run."""


class Terminator(Protocol):
    """Who ends an execution (``Endings``)."""

    def finish(
        self,
        inst: Instance,
        new_events: Sequence[dict[str, Any] | str],
        decided: list[dict[str, Any]],
        status: str,
        output: Any,
        ts: str,
        *,
        terminal_events: list[dict[str, Any]] | None = None,
    ) -> None:
        """Move an instance to a terminal status: history tail, row, cleanup, parent notification."""


class Idleness(Protocol):
    """Whether activities run or wait (``ActivityRunner``)."""

    def idle(self) -> bool:
        """No activity runs or waits in the queue."""


class Management:
    """The client API: start, status, query, events, terminate, suspend, resume, restart, purge."""

    def __init__(
        self,
        site: ManagementSite,
        *,
        entities: EntityRecords,
        endings: Terminator,
        activities: Idleness,
        workers: WorkerPresence,
    ) -> None:
        self._site = site
        self._entities = entities
        self._endings = endings
        self._activities = activities
        self._workers = workers

    async def start_instance(
        self,
        name: str,
        instance_id: str | None,
        input_json: str | None,
        version: str | None = None,
        *,
        remote: bool = False,
        start_at: float | None = None,
    ) -> str:
        """Create and schedule a new orchestration instance (``start_at``: not before then); returns its id.

        ``remote``: the orchestration runs at a worker of the gRPC sidecar protocol, not in this app; so does
        one no function of the app implements while a gRPC endpoint serves this engine (e.g. started over HTTP).
        """
        self._site.require_started()
        if not remote and self._site.functions.orchestrators.get(name.lower()) is None:
            if not self._workers.enabled:
                raise InvalidRequest(self._site.functions.unknown(name, "orchestrator"))
            remote = True
        if instance_id is None:
            instance_id = uuid.uuid4().hex
        else:
            validate_instance_id(instance_id)
        if input_json is not None:
            try:
                json.loads(input_json)
            except ValueError as exc:
                raise InvalidRequest(f"The orchestration input is not valid JSON: {exc}") from exc
        if instance_id in self._site.instances:
            # As the extension with overridableExistingInstanceStates=NonRunningStates (DTFx Azure Storage's
            # message); its default, AnyState, would replace the running instance, which devhost never does.
            existing = self._site.instances[instance_id]
            raise InstanceAlreadyExists(f"An Orchestration instance with the status {existing.status} already exists.")
        inst = Instance(instance_id, name, version or self._site.app.host.default_version, input_json, time.time())
        inst.remote = remote
        if start_at is not None and start_at > time.time():
            inst.not_before = start_at
        store = self._site.store
        with self._site.transaction():
            if store.get_instance(instance_id) is not None:
                store.delete_instance(instance_id)  # a terminal instance with this id is replaced
            store.insert_instance(inst.row())
        # In memory only once the start is committed: a failed commit leaves no instance behind.
        self._site.track(inst)
        log.info("%s: orchestration '%s' scheduled.", instance_id, name)
        self._site.schedule(inst)
        return instance_id

    async def get_status(
        self,
        instance_id: str,
        *,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = True,
    ) -> dict[str, Any] | None:
        """The extension's status JSON of an instance, or None when unknown."""
        self._site.require_started()
        if instance_id.startswith("@"):  # no orchestration id starts with '@': an entity, as the extension shows it
            status = self._entities.status(instance_id, show_input)
            if status is not None and show_history:
                status["historyEvents"] = []  # devhost keeps no history for entities
            return status
        row = self._site.store.get_instance(instance_id)
        if row is None:
            return None
        status = self._status_dict(row, show_input)
        if show_history:
            events = [json.loads(t) for t in self._site.store.history(instance_id)]
            status["historyEvents"] = h.present(events, show_history_output=show_history_output, show_input=show_input)
        return status

    @staticmethod
    def _status_dict(row: InstanceRow, show_input: bool) -> dict[str, Any]:
        return {
            "name": row.name,
            "instanceId": row.instance_id,
            "runtimeStatus": row.status,
            "input": parse_json_text(row.input) if show_input else None,
            "customStatus": parse_json_text(row.custom_status),
            "output": parse_json_text(row.output),
            "createdTime": epoch_to_status(row.created),
            "lastUpdatedTime": epoch_to_status(row.updated),
        }

    async def wait_for_completion(self, instance_id: str, wait_s: float | None = None) -> dict[str, Any] | None:
        """Wait until the instance is terminal (or the timeout passes); returns its status."""
        self._site.require_started()
        row = self._site.store.get_instance(instance_id)
        if row is None:
            return None
        if row.status not in TERMINAL_STATES:
            fut = self._site.add_waiter(instance_id)
            try:
                await asyncio.wait_for(asyncio.shield(fut), wait_s)
            except TimeoutError:
                pass
            finally:
                self._site.remove_waiter(instance_id, fut)
        return await self.get_status(instance_id)

    async def wait_for_idle(self, wait_s: float = 30.0) -> bool:
        """Wait until no episode is ready and no activity is queued or running (timers may be armed)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self._idle():
                await asyncio.sleep(0.005)
                if self._idle():
                    return True
            await asyncio.sleep(0.005)
        return False

    def _idle(self) -> bool:
        return not self._site.has_ready and self._activities.idle() and self._site.delayed == 0

    @staticmethod
    def _check_statuses(statuses: list[str] | None) -> list[str] | None:
        if not statuses:
            return None
        by_lower = {s.lower(): s for s in ALL_STATUSES}
        result = []
        for s in statuses:
            name = by_lower.get(s.strip().lower())
            if name is None:
                raise InvalidRequest(f"Unknown runtime status '{s}'. Valid values: {', '.join(sorted(ALL_STATUSES))}.")
            result.append(name)
        return result

    async def query(
        self,
        *,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        statuses: list[str] | None = None,
        prefix: str | None = None,
        top: int | None = None,
        continuation: str | None = None,
        show_input: bool = True,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Instances matching the filters, in created-time order, then existing entities, one page at a time."""
        self._site.require_started()
        wanted = self._check_statuses(statuses)
        page = top if top and top > 0 else DEFAULT_PAGE_SIZE
        after, after_entity = _read_token(continuation)
        low = datetime_to_epoch(created_from) if created_from else None
        high = datetime_to_epoch(created_to) if created_to else None
        items: list[dict[str, Any]] = []
        if after_entity is None:
            rows = self._site.store.query_by_created(
                created_from=low, created_to=high, statuses=wanted, prefix=prefix or None, after=after, limit=page + 1
            )
            if len(rows) > page:
                rows = rows[:page]
                # repr() of a float reads back exactly: the next page starts right after this row.
                return [self._status_dict(row, show_input) for _, _, row in rows], _token(
                    f"{rows[-1][0]!r}:{rows[-1][1]}"
                )
            items = [self._status_dict(row, show_input) for _, _, row in rows]
        if wanted is not None and "Running" not in wanted:
            return items, None
        # Then the entities, which the extension lists as Running instances '@name@key' (Azure Storage keeps
        # them as orchestration instances); their last operation time stands for the created time.
        room = page - len(items)
        ents = self._entities.rows(prefix=prefix, created_from=low, created_to=high, after=after_entity, limit=room + 1)
        token = None
        if len(ents) > room:
            ents = ents[:room]
            token = _token(ents[-1][0] if ents else "@")  # "@": the entity listing starts on the next page
        items.extend(entity_status(eid, state, last_op, show_input) for eid, state, last_op in ents)
        return items, token

    def _live_or_error(self, instance_id: str, *, gone: type[Exception] = InstanceGone) -> Instance:
        inst = self._site.instances.get(instance_id)
        if inst is not None:
            return inst
        row = self._site.store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        raise gone(f"The instance '{instance_id}' is {row.status}.")

    async def raise_event(self, instance_id: str, event_name: str, input_json: str) -> None:
        """Deliver an external event (held while suspended; buffered by the SDK until awaited)."""
        self._site.require_started()
        inst = self._live_or_error(instance_id)
        ev = h.event(h.EVENT_RAISED, epoch_to_history(time.time()), Name=event_name, Input=input_json)
        store = self._site.store
        with self._site.transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
        inst.inbox.append(Message(ev, None, inbox_id=inbox_id))
        self._site.schedule(inst)

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        """Terminate a running, pending or suspended instance."""
        self._site.require_started()
        inst = self._live_or_error(instance_id)
        ts = epoch_to_history(time.time())
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if not inst.texts:
            new_events.append(execution_started(inst))
        output = parse_json_text(reason)
        result_text = h.dumps(output)
        terminal = [
            h.event(h.EXECUTION_TERMINATED, ts, Input=reason),
            h.event(
                h.EXECUTION_COMPLETED,
                ts,
                inst.next_seq,
                OrchestrationStatus=h.ORCHESTRATION_STATUS["Terminated"],
                Result=result_text,
            ),
        ]
        with self._site.transaction():
            self._endings.finish(inst, new_events, [], "Terminated", output, ts, terminal_events=terminal)

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        """Suspend a running instance: no episodes until resumed; messages are held."""
        self._site.require_started()
        inst = self._live_or_error(instance_id)
        if inst.status == "Suspended":
            raise self._refused(inst, "suspend")
        ev = h.event(h.EXECUTION_SUSPENDED, epoch_to_history(time.time()), Reason=reason)
        store = self._site.store
        with self._site.transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
            inst.status = "Suspended"
            inst.updated = time.time()
            self._site.save(inst)
        inst.inbox.append(Message(ev, None, inbox_id=inbox_id))
        log.info("%s: orchestration '%s' suspended.", instance_id, inst.name)

    async def resume(self, instance_id: str, reason: str | None) -> None:
        """Resume a suspended instance and deliver the held messages."""
        self._site.require_started()
        inst = self._live_or_error(instance_id)
        if inst.status != "Suspended":
            raise self._refused(inst, "resume")
        ev = h.event(h.EXECUTION_RESUMED, epoch_to_history(time.time()), Reason=reason)
        store = self._site.store
        with self._site.transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
            inst.status = "Running" if inst.texts else "Pending"
            inst.updated = time.time()
            self._site.save(inst)
        message = Message(ev, None, inbox_id=inbox_id)
        # ExecutionResumed goes right after the last ExecutionSuspended marker, before the held events.
        position = len(inst.inbox)
        for i in range(len(inst.inbox) - 1, -1, -1):
            if inst.inbox[i].event.get("EventType") == h.EXECUTION_SUSPENDED:
                position = i + 1
                break
        inst.inbox.insert(position, message)
        log.info("%s: orchestration '%s' resumed.", instance_id, inst.name)
        self._site.schedule(inst)

    def _refused(self, inst: Instance, verb: str) -> PreconditionFailed:
        """The extension's answer to suspend/resume in the wrong state: a warning line and an InvalidOperation."""
        # DurableClient.SuspendAsync/ResumeAsync: ExtensionWarningEvent logs "{details}. InstanceId: ..." (the
        # doubled period is the extension's), then InvalidOperationException, which the HTTP API answers with 500.
        log.warning(
            "Cannot %s orchestration instance in the %s state.. InstanceId: %s. Function: %s. HubName: %s.",
            verb,
            inst.status,
            inst.id,
            inst.name,
            self._site.hub_name,
        )
        return PreconditionFailed(
            f"Cannot {verb} the orchestration instance {inst.id} because instance is in the {inst.status} state."
        )

    async def restart(self, instance_id: str, new_instance_id: bool = True) -> str:
        """Start the instance's orchestration again with the same input; returns the new (or same) id."""
        self._site.require_started()
        row = self._site.store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        target = uuid.uuid4().hex if new_instance_id else instance_id
        remote = bool(json.loads(row.estate or "{}").get("x", False))
        return await self.start_instance(row.name, target, row.input, row.version, remote=remote)

    def instance_row(self, instance_id: str) -> InstanceRow | None:
        """The stored row of an orchestration instance, or None when unknown."""
        self._site.require_started()
        return self._site.store.get_instance(instance_id)

    def history_events(self, instance_id: str) -> list[dict[str, Any]]:
        """The stored history of an instance's current execution, oldest first."""
        self._site.require_started()
        return [json.loads(t) for t in self._site.store.history(instance_id)]

    async def query_rows(
        self,
        *,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        statuses: list[str] | None = None,
        prefix: str | None = None,
        top: int | None = None,
        continuation: str | None = None,
    ) -> tuple[list[InstanceRow], str | None]:
        """Orchestration instances (no entities) matching the filters, in created-time order, one page at a time."""
        self._site.require_started()
        wanted = self._check_statuses(statuses)
        page = top if top and top > 0 else DEFAULT_PAGE_SIZE
        after, _entity = _read_token(continuation)
        rows = self._site.store.query_by_created(
            created_from=datetime_to_epoch(created_from) if created_from else None,
            created_to=datetime_to_epoch(created_to) if created_to else None,
            statuses=wanted,
            prefix=prefix or None,
            after=after,
            limit=page + 1,
        )
        if len(rows) <= page:
            return [row for _, _, row in rows], None
        rows = rows[:page]
        return [row for _, _, row in rows], _token(f"{rows[-1][0]!r}:{rows[-1][1]}")

    async def purge(self, instance_id: str) -> int:
        """Delete a terminal instance and its history; returns 1, or 0 for an instance still in flight."""
        self._site.require_started()
        if instance_id.startswith("@"):
            return await self._entities.purge(instance_id)
        row = self._site.store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        if instance_id in self._site.instances:
            # Nothing is deleted, as with the MSSQL, Netherite and Scheduler providers (Azure Storage would delete
            # the record of a running instance); the HTTP API answers 200 with instancesDeleted 0.
            log.warning(
                "%s: orchestration '%s' is %s; only finished instances are purged.", instance_id, row.name, row.status
            )
            return 0
        store = self._site.store
        with self._site.transaction():
            count = store.delete_instance(instance_id)
        return count

    async def purge_by(self, created_from: datetime, created_to: datetime | None, statuses: list[str] | None) -> int:
        """Delete terminal instances created in a time range (non-terminal statuses are never purged)."""
        self._site.require_started()
        wanted = self._check_statuses(statuses)
        terminal = sorted(TERMINAL_STATES if wanted is None else set(wanted) & TERMINAL_STATES)
        if not terminal:
            return 0
        store = self._site.store
        low, high = datetime_to_epoch(created_from), datetime_to_epoch(created_to) if created_to else None
        deleted = 0
        # Batches of one transaction each, yielding in between: a purge of thousands of instances must
        # not hold the event loop (and every running job) for seconds.
        while True:
            with self._site.transaction():
                count = store.purge_batch(low, high, terminal, PURGE_BATCH)
            deleted += count
            if count < PURGE_BATCH:
                break
            await asyncio.sleep(0)
        # Hand the freed pages back to the file system, a slice at a time (no transaction is open here).
        try:
            left = store.reclaim_space(RECLAIM_PAGES) if deleted else 0
            while left:
                await asyncio.sleep(0)
                before, left = left, store.reclaim_space(RECLAIM_PAGES)
                if left >= before:  # nothing more to hand back (e.g. pages a reader still holds)
                    break
        except STORE_ERRORS as exc:  # the purge is committed; handing pages back can wait for the next one
            store.rollback()
            log.warning("Reclaiming the purged space failed: %s", exc)
        return deleted


def _token(text: str) -> str:
    """A continuation token: an orchestration's ``created:ord`` or the last entity id listed."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")


def _read_token(continuation: str | None) -> tuple[tuple[float, int] | None, str | None]:
    """(orchestration position, entity id) a continuation token names; (None, None) for the first page."""
    if not continuation:
        return None, None
    try:
        text = base64.urlsafe_b64decode(continuation.encode("ascii")).decode("utf-8")
        if text.startswith("@"):
            return None, text
        created_text, ord_text = text.split(":")
        return (float(created_text), int(ord_text)), None
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise InvalidRequest("The continuation token is not valid.") from exc
