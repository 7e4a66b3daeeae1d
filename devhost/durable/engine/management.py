"""The client API: start, status, query, events, terminate, suspend, resume, restart, purge."""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import time
import uuid
from datetime import datetime
from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.core import DEFAULT_PAGE_SIZE, PURGE_BATCH, RECLAIM_PAGES, STORE_ERRORS, log
from devhost.durable.engine.dispatch import Dispatcher
from devhost.durable.engine.entities import entity_status
from devhost.durable.engine.rewind import Rewinder
from devhost.durable.engine.state import Instance, Message, Work, parse_json_text, validate_instance_id
from devhost.durable.statuses import ALL_STATUSES, TERMINAL_STATES
from devhost.durable.store import InstanceRow
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
    PreconditionFailed,
)


class Management(Dispatcher):
    """The client API: start, status, query, events, terminate, suspend, resume, rewind, restart, purge."""

    @functools.cached_property
    def _rewinder(self) -> Rewinder:
        return Rewinder(self)

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """Rewind a Failed instance: drop its failures, re-run failed and unfinished work, replay."""
        await self._rewinder.rewind(instance_id, reason)

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
        self._require_started()
        if not remote and self._orchestrators.get(name.lower()) is None:
            if not self.workers.enabled:
                raise InvalidRequest(self._unknown_function_message(name, "orchestrator"))
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
        if instance_id in self._instances:
            # As the extension with overridableExistingInstanceStates=NonRunningStates (DTFx Azure Storage's
            # message); its default, AnyState, would replace the running instance, which devhost never does.
            existing = self._instances[instance_id]
            raise InstanceAlreadyExists(f"An Orchestration instance with the status {existing.status} already exists.")
        inst = Instance(instance_id, name, version or self.app.host.default_version, input_json, time.time())
        inst.remote = remote
        if start_at is not None and start_at > time.time():
            inst.not_before = start_at
        store = self._store
        with self._transaction():
            if store.get_instance(instance_id) is not None:
                store.delete_instance(instance_id)  # a terminal instance with this id is replaced
            store.insert_instance(inst.row())
        # In memory only once the start is committed: a failed commit leaves no instance behind.
        self._instances[instance_id] = inst
        log.info("%s: orchestration '%s' scheduled.", instance_id, name)
        self._schedule(inst)
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
        self._require_started()
        if instance_id.startswith("@"):  # no orchestration id starts with '@': an entity, as the extension shows it
            status = self._entity_status(instance_id, show_input)
            if status is not None and show_history:
                status["historyEvents"] = []  # devhost keeps no history for entities
            return status
        row = self._store.get_instance(instance_id)
        if row is None:
            return None
        status = self._status_dict(row, show_input)
        if show_history:
            events = [json.loads(t) for t in self._store.history(instance_id)]
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
        self._require_started()
        row = self._store.get_instance(instance_id)
        if row is None:
            return None
        if row.status not in TERMINAL_STATES:
            assert self._loop is not None
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiters.setdefault(instance_id, []).append(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), wait_s)
            except TimeoutError:
                pass
            finally:
                waiters = self._waiters.get(instance_id)
                if waiters and fut in waiters:
                    waiters.remove(fut)
        return await self.get_status(instance_id)

    async def wait_for_idle(self, wait_s: float = 30.0) -> bool:
        """Wait until no episode is ready and no activity is queued or running (timers may be armed)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            queue = self._work_queue
            if self._idle(queue):
                await asyncio.sleep(0.005)
                if self._idle(queue):
                    return True
            await asyncio.sleep(0.005)
        return False

    def _idle(self, queue: asyncio.Queue[Work | None] | None) -> bool:
        return (
            not self._ready and self._active_activities == 0 and self._delayed == 0 and (queue is None or queue.empty())
        )

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
        self._require_started()
        wanted = self._check_statuses(statuses)
        page = top if top and top > 0 else DEFAULT_PAGE_SIZE
        after, after_entity = _read_token(continuation)
        low = datetime_to_epoch(created_from) if created_from else None
        high = datetime_to_epoch(created_to) if created_to else None
        items: list[dict[str, Any]] = []
        if after_entity is None:
            rows = self._store.query_by_created(
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
        ents = self._entity_rows(prefix=prefix, created_from=low, created_to=high, after=after_entity, limit=room + 1)
        token = None
        if len(ents) > room:
            ents = ents[:room]
            token = _token(ents[-1][0] if ents else "@")  # "@": the entity listing starts on the next page
        items.extend(entity_status(eid, state, last_op, show_input) for eid, state, last_op in ents)
        return items, token

    def _live_or_error(self, instance_id: str, *, gone: type[Exception] = InstanceGone) -> Instance:
        inst = self._instances.get(instance_id)
        if inst is not None:
            return inst
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        raise gone(f"The instance '{instance_id}' is {row.status}.")

    async def raise_event(self, instance_id: str, event_name: str, input_json: str) -> None:
        """Deliver an external event (held while suspended; buffered by the SDK until awaited)."""
        self._require_started()
        inst = self._live_or_error(instance_id)
        ev = h.event(h.EVENT_RAISED, epoch_to_history(time.time()), Name=event_name, Input=input_json)
        store = self._store
        with self._transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
        inst.inbox.append(Message(ev, None, inbox_id=inbox_id))
        self._schedule(inst)

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        """Terminate a running, pending or suspended instance."""
        self._require_started()
        inst = self._live_or_error(instance_id)
        ts = epoch_to_history(time.time())
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if not inst.texts:
            new_events.append(self._execution_started(inst))
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
        with self._transaction():
            self.endings.finish(inst, new_events, [], "Terminated", output, ts, terminal_events=terminal)

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        """Suspend a running instance: no episodes until resumed; messages are held."""
        self._require_started()
        inst = self._live_or_error(instance_id)
        if inst.status == "Suspended":
            raise self._refused(inst, "suspend")
        ev = h.event(h.EXECUTION_SUSPENDED, epoch_to_history(time.time()), Reason=reason)
        store = self._store
        with self._transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
            inst.status = "Suspended"
            inst.updated = time.time()
            self._save(inst)
        inst.inbox.append(Message(ev, None, inbox_id=inbox_id))
        log.info("%s: orchestration '%s' suspended.", instance_id, inst.name)

    async def resume(self, instance_id: str, reason: str | None) -> None:
        """Resume a suspended instance and deliver the held messages."""
        self._require_started()
        inst = self._live_or_error(instance_id)
        if inst.status != "Suspended":
            raise self._refused(inst, "resume")
        ev = h.event(h.EXECUTION_RESUMED, epoch_to_history(time.time()), Reason=reason)
        store = self._store
        with self._transaction():
            inbox_id = store.insert_inbox(instance_id, None, h.render(ev))
            inst.status = "Running" if inst.texts else "Pending"
            inst.updated = time.time()
            self._save(inst)
        message = Message(ev, None, inbox_id=inbox_id)
        # ExecutionResumed goes right after the last ExecutionSuspended marker, before the held events.
        position = len(inst.inbox)
        for i in range(len(inst.inbox) - 1, -1, -1):
            if inst.inbox[i].event.get("EventType") == h.EXECUTION_SUSPENDED:
                position = i + 1
                break
        inst.inbox.insert(position, message)
        log.info("%s: orchestration '%s' resumed.", instance_id, inst.name)
        self._schedule(inst)

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
            self.hub_name,
        )
        return PreconditionFailed(
            f"Cannot {verb} the orchestration instance {inst.id} because instance is in the {inst.status} state."
        )

    async def restart(self, instance_id: str, new_instance_id: bool = True) -> str:
        """Start the instance's orchestration again with the same input; returns the new (or same) id."""
        self._require_started()
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        target = uuid.uuid4().hex if new_instance_id else instance_id
        remote = bool(json.loads(row.estate or "{}").get("x", False))
        return await self.start_instance(row.name, target, row.input, row.version, remote=remote)

    def instance_row(self, instance_id: str) -> InstanceRow | None:
        """The stored row of an orchestration instance, or None when unknown."""
        self._require_started()
        return self._store.get_instance(instance_id)

    def history_events(self, instance_id: str) -> list[dict[str, Any]]:
        """The stored history of an instance's current execution, oldest first."""
        self._require_started()
        return [json.loads(t) for t in self._store.history(instance_id)]

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
        self._require_started()
        wanted = self._check_statuses(statuses)
        page = top if top and top > 0 else DEFAULT_PAGE_SIZE
        after, _entity = _read_token(continuation)
        rows = self._store.query_by_created(
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
        self._require_started()
        if instance_id.startswith("@"):
            return await self.purge_entity(instance_id)
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        if instance_id in self._instances:
            # Nothing is deleted, as with the MSSQL, Netherite and Scheduler providers (Azure Storage would delete
            # the record of a running instance); the HTTP API answers 200 with instancesDeleted 0.
            log.warning(
                "%s: orchestration '%s' is %s; only finished instances are purged.", instance_id, row.name, row.status
            )
            return 0
        store = self._store
        with self._transaction():
            count = store.delete_instance(instance_id)
        return count

    async def purge_by(self, created_from: datetime, created_to: datetime | None, statuses: list[str] | None) -> int:
        """Delete terminal instances created in a time range (non-terminal statuses are never purged)."""
        self._require_started()
        wanted = self._check_statuses(statuses)
        terminal = sorted(TERMINAL_STATES if wanted is None else set(wanted) & TERMINAL_STATES)
        if not terminal:
            return 0
        store = self._store
        low, high = datetime_to_epoch(created_from), datetime_to_epoch(created_to) if created_to else None
        deleted = 0
        # Batches of one transaction each, yielding in between: a purge of thousands of instances must
        # not hold the event loop (and every running job) for seconds.
        while True:
            with self._transaction():
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
