"""Engine state and the primitives every part uses: ready queue, store transaction, history appends."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from devhost.durable import history as h
from devhost.durable.decoded import DecodedHistories
from devhost.durable.engine.activities import ActivityRunner
from devhost.durable.engine.endings import Endings
from devhost.durable.engine.state import EntityInstance, Instance, Message, ParentRef, Work
from devhost.durable.engine.timers import DurableTimers
from devhost.durable.engine.workers import ExternalWorkers
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import InstanceRow, Store, StoreFault
from devhost.durable.timeutil import (
    epoch_to_history,
)
from devhost.functions.logs import host_logger
from devhost.functions.model import (
    EngineError,
    LoadedApp,
)
from devhost.functions.threads import DaemonThreadPool

log = host_logger("devhost.durable")


flog = host_logger("devhost.host")


MAX_BATCH = 500


SLICE_BUDGET_S = 0.01


# Fan-in coalescing: episodes cheaper than this never wait; the wait is capped at the max delay.
COALESCE_MIN_COST_S = 0.02


COALESCE_MAX_DELAY_S = 0.5


DEFAULT_PAGE_SIZE = 100


# Instances deleted per purge transaction, and free pages returned to the file system per step.
PURGE_BATCH = 200


RECLAIM_PAGES = 2048


CUSTOM_STATUS_LIMIT_KB = 16


# While the store cannot write, the dispatcher probes it after this delay, doubling up to the maximum.
HEAL_FIRST_S = 0.05


HEAL_MAX_S = 2.0


# What a store failure looks like: SQLite's own errors, or a commit the store reports as lost.
STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, StoreFault)


OUT_OF_PROC_MARKER = "\n\n$OutOfProcData$:"


# Completion event type → the history field naming the sequence id it completes.
_SEQ_FIELD = {
    h.TASK_COMPLETED: "TaskScheduledId",
    h.TASK_FAILED: "TaskScheduledId",
    h.SUB_ORCHESTRATION_COMPLETED: "TaskScheduledId",
    h.SUB_ORCHESTRATION_FAILED: "TaskScheduledId",
    h.TIMER_FIRED: "TimerId",
}


class StoreUnavailable(EngineError):
    """The durable store cannot persist right now (disk full, I/O error); retry later."""

    status_code = 503
    code = "STORE_UNAVAILABLE"


class EngineCore:
    """Engine state and the primitives every part uses: ready queue, store transaction, history appends."""

    def __init__(
        self, app: LoadedApp, data_dir: Path, *, synchronous: str = "NORMAL", reset_store: bool = False
    ) -> None:
        self.app = app
        self._reset_store = reset_store
        # Why the store cannot write, while it cannot (None when healthy); set by _store_failed only.
        self._fault: str | None = None
        self.store_faults = 0
        self.hub_name = app.host.hub_name
        safe_hub = re.sub(r"[^A-Za-z0-9_-]", "_", self.hub_name)
        self.db_path = Path(data_dir) / f"durable-{safe_hub}.sqlite3"
        self._store = Store(self.db_path, synchronous=synchronous)
        self._instances: dict[str, Instance] = {}
        # Orchestration instances with messages to deliver, and entities with operations to run.
        self._ready: deque[Instance | EntityInstance] = deque()
        # Entities with operations waiting (an entity without pending operations lives in the store only).
        self._entities: dict[str, EntityInstance] = {}
        self._ready_event: asyncio.Event | None = None
        self._work_queue: asyncio.Queue[Work | None] | None = None
        # Episodes and activities of remote instances, for workers of the gRPC sidecar protocol
        # (devhost.durable.sidecar), and the workers' answers to episodes, applied by the dispatcher in its
        # next slice (group commit).
        self.workers = ExternalWorkers()
        self._remote_done: deque[Any] = deque()
        # Activity workers (their tasks start with the engine); a result is a message to deliver.
        self.activity_runner = ActivityRunner(self)
        # How an execution ends (completion, failure, continue-as-new, the parent told).
        self.endings = Endings(self)
        # Durable timers, armed on the loop once their creation commits; a fired one is a message to deliver.
        self.timers = DurableTimers(is_live=lambda inst: self._instances.get(inst.id) is inst, deliver=self._deliver)
        self._after: list[Callable[[], None]] = []
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pool: DaemonThreadPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopping = False
        self._active_activities = 0
        self._delayed = 0
        self._orchestrators = {f.durable_name.lower(): f for f in app.by_kind("orchestrator") if f.durable_name}
        self._activities = {f.durable_name.lower(): f for f in app.by_kind("activity") if f.durable_name}
        self._entity_fns = {f.durable_name.lower(): f for f in app.by_kind("entity") if f.durable_name}
        self._max_actions = app.host.max_orchestration_actions
        self._timeout = app.host.function_timeout_s
        # The durableClient binding JSON for functions that have one (an activity may raise events, start
        # orchestrations...): the host attaches it once its HTTP API is up (attach_client).
        self.client_binding: Callable[[], str] | None = None
        # Counters for tests and benchmarks (episodes replayed, activity executions started).
        self.episodes_run = 0
        self._decoded = DecodedHistories()  # decoded history prefixes: an episode decodes only its new events
        self.activities_run = 0
        self.entity_batches_run = 0

    def attach_client(self, binding: Callable[[], str]) -> None:
        """Where activities with a durableClient binding get its JSON (the host's Durable HTTP API)."""
        self.client_binding = binding

    def _instance_from_row(self, row: InstanceRow) -> Instance:
        inst = Instance(row.instance_id, row.name, row.version, row.input, row.created)
        inst.execution_id = row.execution_id
        inst.status = row.status
        inst.output_text = row.output
        inst.custom_status_text = row.custom_status
        inst.updated = row.updated
        if row.parent_id:
            inst.parent = ParentRef(
                row.parent_id, row.parent_execution or "", row.parent_seq or 0, row.parent_name or ""
            )
        inst.load_estate(row.estate)
        return inst

    def _schedule(self, inst: Instance) -> None:
        if (
            inst.queued
            or inst.flight is not None  # a worker runs its episode: the next one waits for that completion
            or inst.status in TERMINAL_STATES
            or inst.status == "Suspended"
            or self._stopping
        ):
            return
        if inst.not_before and not inst.texts and self._not_yet(inst):
            return
        if inst.last_cost > COALESCE_MIN_COST_S and len(inst.open) > len(inst.inbox):
            # A long replay while more results are still expected (fan-in): wait up to the last
            # replay's cost so the next episode takes a bigger batch. Keeps fan-in replays from
            # going quadratic; sequential steps (nothing else expected) never wait.
            not_before = inst.last_end + min(inst.last_cost, COALESCE_MAX_DELAY_S)
            delay = not_before - time.monotonic()
            if delay > 0:
                if inst.wake_handle is None and self._loop is not None:
                    inst.wake_handle = self._loop.call_later(delay, self._wake, inst)
                    self._delayed += 1
                return
        inst.queued = True
        self._ready.append(inst)
        event = self._ready_event
        if event is not None and not event.is_set():
            event.set()

    def _not_yet(self, inst: Instance) -> bool:
        """A scheduled start still in the future: wake the instance then (once), not now."""
        delay = inst.not_before - time.time()
        if delay <= 0:
            return False
        if inst.wake_handle is None and self._loop is not None:
            inst.wake_handle = self._loop.call_later(delay, self._start_due, inst)
        return True

    def _start_due(self, inst: Instance) -> None:
        inst.wake_handle = None
        if self._instances.get(inst.id) is inst:
            self._schedule(inst)

    def _wake(self, inst: Instance) -> None:
        inst.wake_handle = None
        self._delayed -= 1
        if inst.queued or not inst.inbox:
            return
        inst.last_cost = 0.0  # the coalescing window is over: run now
        self._schedule(inst)

    def _deliver(self, instance_id: str, message: Message) -> None:
        inst = self._instances.get(instance_id)
        if inst is None or inst.status in TERMINAL_STATES:
            return
        if message.execution_id is not None and message.execution_id != inst.execution_id:
            return
        inst.inbox.append(message)
        self._schedule(inst)

    @property
    def store_fault(self) -> str | None:
        """Why the durable store cannot write right now, or None when it works."""
        return self._fault

    def _store_failed(self, exc: BaseException) -> None:
        """Enter the fault state: nothing of the failed transaction counts; the dispatcher heals."""
        self._store.rollback()
        self._after.clear()
        if self._fault is None:
            self.store_faults += 1
            log.error("The durable store cannot write (%s); new work is refused with 503 until it recovers.", exc)
        self._fault = f"{type(exc).__name__}: {exc}"
        if self._ready_event is not None:
            self._ready_event.set()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing.

        On a store error the transaction is rolled back and the engine enters the fault state; the
        dispatcher then reloads memory from the store, which undoes any in-memory change made here.
        Callers must not await inside the block.
        """
        if self._fault is not None:
            raise StoreUnavailable(f"The durable store cannot write right now ({self._fault}); retry later.")
        store = self._store
        try:
            store.begin()
            yield
            store.commit()
        except STORE_ERRORS as exc:
            self._store_failed(exc)
            raise StoreUnavailable(f"The durable store cannot write right now ({exc}); retry later.") from exc
        except BaseException:
            store.rollback()
            self._after.clear()
            raise
        after, self._after = self._after, []
        for callback in after:
            callback()

    def _seq_of(self, ev: dict[str, Any]) -> int | None:
        key = _SEQ_FIELD.get(ev.get("EventType", -1))
        return ev.get(key) if key else None

    def _forget_message(self, m: Message) -> None:
        """Drop a message that no longer applies, deleting whatever persists it."""
        store = self._store
        if m.inbox_id is not None:
            store.delete_inbox((m.inbox_id,))
        if m.work_id is not None:
            store.delete_activities((m.work_id,))
        if m.timer_id is not None:
            store.delete_timers((m.timer_id,))

    def _execution_started(self, inst: Instance) -> dict[str, Any]:
        p = inst.parent
        parent = (
            {
                "Name": p.name,
                "Version": "",
                "TaskScheduleId": p.seq,
                "OrchestrationInstance": {"InstanceId": p.instance_id, "ExecutionId": p.execution_id},
            }
            if p
            else None
        )
        return h.event(
            h.EXECUTION_STARTED,
            epoch_to_history(inst.started_at),
            Name=inst.name,
            Version=inst.version or "",
            Input=inst.input_text,
            OrchestrationInstance={"InstanceId": inst.id, "ExecutionId": inst.execution_id},
            ParentInstance=parent,
            Tags=None,
            ScheduledStartTime=epoch_to_history(inst.not_before) if inst.not_before else None,
            Generation=inst.generation,
        )

    def _append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        """Append an episode's events (new, decisions, OrchestratorCompleted) to history."""
        texts = [e if isinstance(e, str) else h.render(e) for e in new_events]
        texts.extend(h.render(e) for e in decided)
        texts.append(h.render(h.event(h.ORCHESTRATOR_COMPLETED, ts)))
        self._store.append_history(inst.id, len(inst.texts), texts)
        inst.texts.extend(texts)
        joined = ",".join(texts)
        inst.joined = f"{inst.joined},{joined}" if inst.joined else joined

    def _save(self, inst: Instance) -> None:
        self._store.update_instance(
            inst.id,
            execution_id=inst.execution_id,
            status=inst.status,
            input_text=inst.input_text,
            output=inst.output_text,
            custom_status=inst.custom_status_text,
            updated=inst.updated,
            estate=inst.estate(),
        )

    def _enqueue_work(self, work: Work) -> None:
        inst = self._instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or self._work_queue is None:
            return
        if inst.remote:
            self.workers.offer_activity(work)
            return
        self._work_queue.put_nowait(work)

    def _unknown_function_message(self, name: str, kind: str) -> str:
        known = {"orchestrator": self._orchestrators, "entity": self._entity_fns}.get(kind, self._activities)
        names = ", ".join(f"'{f.durable_name}'" for f in known.values())
        return (
            f"The function '{name}' doesn't exist, is disabled, or is not an {kind} function. "
            f"Additional info: The following are the known {kind} functions: {names}."
        )

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("The durable engine is not running; call start() first.")

    def _wake_waiters(self, instance_id: str) -> None:
        for fut in self._waiters.pop(instance_id, []):
            if not fut.done():
                fut.set_result(None)
