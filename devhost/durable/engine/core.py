"""The engine core: the live instances, the ready queue, the store transaction and the primitives every part uses.

``EngineCore`` is a part like the others: the engine holds one and hands it to each part behind the protocol
of what that part needs (``CoreSite`` in the part's module). It owns its fields; the parts change them only
through its methods (``track``, ``untrack``, ``defer``, ``make_ready``, ``store_failed``, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.state import EntityInstance, Instance, Message, ParentRef, cancel_handles
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import Store
from devhost.durable.store_schema import InstanceRow, StoreFault
from devhost.durable.timeutil import epoch_to_history
from devhost.functions.logs import host_logger
from devhost.functions.model import EngineError, FunctionInfo, LoadedApp

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


def seq_of(ev: dict[str, Any]) -> int | None:
    """The sequence id a completion event completes (None for other events)."""
    key = _SEQ_FIELD.get(ev.get("EventType", -1))
    return ev.get(key) if key else None


def forget_message(store: Store, m: Message) -> None:
    """Drop a message that no longer applies, deleting whatever persists it."""
    if m.inbox_id is not None:
        store.delete_inbox((m.inbox_id,))
    if m.work_id is not None:
        store.delete_activities((m.work_id,))
    if m.timer_id is not None:
        store.delete_timers((m.timer_id,))


def instance_from_row(row: InstanceRow) -> Instance:
    """The in-memory instance a stored row describes (its history is loaded separately)."""
    inst = Instance(row.instance_id, row.name, row.version, row.input, row.created)
    inst.execution_id = row.execution_id
    inst.status = row.status
    inst.output_text = row.output
    inst.custom_status_text = row.custom_status
    inst.updated = row.updated
    if row.parent_id:
        inst.parent = ParentRef(row.parent_id, row.parent_execution or "", row.parent_seq or 0, row.parent_name or "")
    inst.load_estate(row.estate)
    return inst


def execution_started(inst: Instance) -> dict[str, Any]:
    """The ``ExecutionStarted`` event of an instance's current execution."""
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


class FunctionTable:
    """The app's durable functions by kind and lower-cased name (read-only)."""

    def __init__(self, app: LoadedApp) -> None:
        self.orchestrators: Mapping[str, FunctionInfo] = MappingProxyType(
            {f.durable_name.lower(): f for f in app.by_kind("orchestrator") if f.durable_name}
        )
        self.activities: Mapping[str, FunctionInfo] = MappingProxyType(
            {f.durable_name.lower(): f for f in app.by_kind("activity") if f.durable_name}
        )
        self.entities: Mapping[str, FunctionInfo] = MappingProxyType(
            {f.durable_name.lower(): f for f in app.by_kind("entity") if f.durable_name}
        )

    def unknown(self, name: str, kind: str) -> str:
        """The extension's message for a function name the app does not have (of ``kind``)."""
        known = {"orchestrator": self.orchestrators, "entity": self.entities}.get(kind, self.activities)
        names = ", ".join(f"'{f.durable_name}'" for f in known.values())
        return (
            f"The function '{name}' doesn't exist, is disabled, or is not an {kind} function. "
            f"Additional info: The following are the known {kind} functions: {names}."
        )


class EngineCore:
    """The live instances, the ready queue, the store transaction and the primitives every part uses."""

    def __init__(self, app: LoadedApp, data_dir: Path, *, synchronous: str = "NORMAL") -> None:
        self.app = app
        self.hub_name = app.host.hub_name
        safe_hub = re.sub(r"[^A-Za-z0-9_-]", "_", self.hub_name)
        self.db_path = Path(data_dir) / f"durable-{safe_hub}.sqlite3"
        self.store = Store(self.db_path, synchronous=synchronous)
        self.functions = FunctionTable(app)
        self.max_actions = app.host.max_orchestration_actions
        self.timeout = app.host.function_timeout_s
        # Why the store cannot write, while it cannot (None when healthy).
        self._fault: str | None = None
        self.store_faults = 0
        self._instances: dict[str, Instance] = {}
        self.instances: Mapping[str, Instance] = MappingProxyType(self._instances)
        # Orchestration instances with messages to deliver, and entities with operations to run.
        self._ready: deque[Instance | EntityInstance] = deque()
        self._ready_event: asyncio.Event | None = None
        self._after: list[Callable[[], None]] = []
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopping = False
        self._delayed = 0

    # ----- lifecycle -------------------------------------------------------------------------

    def open(self, loop: asyncio.AbstractEventLoop, *, reset: bool) -> None:
        """Open the store on ``loop`` (``reset``: start from an empty store)."""
        self._loop = loop
        self._ready_event = asyncio.Event()
        self.store.open(self.hub_name, reset=reset)
        self._fault = None
        self._stopping = False

    def mark_started(self) -> None:
        """Recovery is done: the client API is open."""
        self._started = True

    def begin_stopping(self) -> None:
        """Schedule nothing more (what is pending stays in the store)."""
        self._stopping = True

    def close(self) -> None:
        """Cancel the waiters, forget the live state and close the store."""
        for inst in self._instances.values():
            cancel_handles(inst)
        self._delayed = 0
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
        self.store.close()
        self._instances.clear()
        self._ready.clear()
        self._started = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the engine runs on (None before start)."""
        return self._loop

    @property
    def started(self) -> bool:
        """Whether the engine is running."""
        return self._started

    @property
    def stopping(self) -> bool:
        """Whether the engine is stopping (nothing new is scheduled)."""
        return self._stopping

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""
        if not self._started:
            raise RuntimeError("The durable engine is not running; call start() first.")

    # ----- live instances --------------------------------------------------------------------

    def track(self, inst: Instance) -> None:
        """Hold ``inst`` as a live (non-terminal) instance."""
        self._instances[inst.id] = inst

    def untrack(self, instance_id: str) -> None:
        """Forget a live instance (it ended)."""
        self._instances.pop(instance_id, None)

    def is_live(self, inst: Instance) -> bool:
        """Whether ``inst`` is still the live instance of its id."""
        return self._instances.get(inst.id) is inst

    def forget_all(self) -> None:
        """Drop every live instance and ready item (a reload from the store follows)."""
        for inst in self._instances.values():
            cancel_handles(inst)
        self._instances.clear()
        self._ready.clear()
        self._delayed = 0

    # ----- ready queue -----------------------------------------------------------------------

    def make_ready(self, item: Instance | EntityInstance) -> None:
        """Queue an instance or entity for the dispatcher and wake it."""
        self._ready.append(item)
        self.wake_dispatcher()

    def wake_dispatcher(self) -> None:
        """Wake the dispatcher (new ready items, answers or a fault)."""
        event = self._ready_event
        if event is not None and not event.is_set():
            event.set()

    def pop_ready(self) -> Instance | EntityInstance | None:
        """The next ready item, or None."""
        return self._ready.popleft() if self._ready else None

    @property
    def has_ready(self) -> bool:
        """Whether an instance or entity waits for the dispatcher."""
        return bool(self._ready)

    @property
    def delayed(self) -> int:
        """Instances waiting out a fan-in coalescing window."""
        return self._delayed

    async def wait_for_ready(self) -> None:
        """Sleep until ``wake_dispatcher``."""
        event = self._ready_event
        assert event is not None
        event.clear()
        await event.wait()

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""
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
        self.make_ready(inst)

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
        if self.is_live(inst):
            self.schedule(inst)

    def _wake(self, inst: Instance) -> None:
        inst.wake_handle = None
        self._delayed -= 1
        if inst.queued or not inst.inbox:
            return
        inst.last_cost = 0.0  # the coalescing window is over: run now
        self.schedule(inst)

    def deliver(self, instance_id: str, message: Message) -> None:
        """Hand a message to a live instance's current execution (dropped otherwise) and schedule it."""
        inst = self._instances.get(instance_id)
        if inst is None or inst.status in TERMINAL_STATES:
            return
        if message.execution_id is not None and message.execution_id != inst.execution_id:
            return
        inst.inbox.append(message)
        self.schedule(inst)

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        """Persist an event for ``target`` (inside the open transaction) and schedule it."""
        inbox_id = self.store.insert_inbox(target.id, execution_id, h.render(ev))
        target.inbox.append(Message(ev, execution_id, inbox_id=inbox_id))
        self.schedule(target)

    # ----- transactions and faults -----------------------------------------------------------

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""
        self._after.append(callback)

    def take_deferred(self) -> list[Callable[[], None]]:
        """The callbacks of the transaction that just committed, handed over once."""
        after, self._after = self._after, []
        return after

    @property
    def fault(self) -> str | None:
        """Why the durable store cannot write right now, or None when it works."""
        return self._fault

    def store_failed(self, exc: BaseException) -> None:
        """Enter the fault state: nothing of the failed transaction counts; the dispatcher heals."""
        self.store.rollback()
        self._after.clear()
        if self._fault is None:
            self.store_faults += 1
            log.error("The durable store cannot write (%s); new work is refused with 503 until it recovers.", exc)
        self._fault = f"{type(exc).__name__}: {exc}"
        self.wake_dispatcher()

    def still_failing(self, exc: BaseException) -> None:
        """A probe or reload during healing failed: the fault stays, with this reason."""
        self._fault = f"{type(exc).__name__}: {exc}"

    def healed(self) -> None:
        """The store writes again."""
        self._fault = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One management operation as one transaction: 503 while the store is faulty, all or nothing.

        On a store error the transaction is rolled back and the engine enters the fault state; the
        dispatcher then reloads memory from the store, which undoes any in-memory change made here.
        Callers must not await inside the block.
        """
        if self._fault is not None:
            raise StoreUnavailable(f"The durable store cannot write right now ({self._fault}); retry later.")
        store = self.store
        try:
            store.begin()
            yield
            store.commit()
        except STORE_ERRORS as exc:
            self.store_failed(exc)
            raise StoreUnavailable(f"The durable store cannot write right now ({exc}); retry later.") from exc
        except BaseException:
            store.rollback()
            self._after.clear()
            raise
        for callback in self.take_deferred():
            callback()

    # ----- history and rows ------------------------------------------------------------------

    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        """Append an episode's events (new, decisions, OrchestratorCompleted) to history."""
        texts = [e if isinstance(e, str) else h.render(e) for e in new_events]
        texts.extend(h.render(e) for e in decided)
        texts.append(h.render(h.event(h.ORCHESTRATOR_COMPLETED, ts)))
        self.store.append_history(inst.id, len(inst.texts), texts)
        inst.texts.extend(texts)
        joined = ",".join(texts)
        inst.joined = f"{inst.joined},{joined}" if inst.joined else joined

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""
        self.store.update_instance(
            inst.id,
            execution_id=inst.execution_id,
            status=inst.status,
            input_text=inst.input_text,
            output=inst.output_text,
            custom_status=inst.custom_status_text,
            updated=inst.updated,
            estate=inst.estate(),
        )

    # ----- completion waiters ----------------------------------------------------------------

    def add_waiter(self, instance_id: str) -> asyncio.Future[None]:
        """A future resolved when the instance ends."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.setdefault(instance_id, []).append(fut)
        return fut

    def remove_waiter(self, instance_id: str, fut: asyncio.Future[None]) -> None:
        """Stop waiting with ``fut``."""
        waiters = self._waiters.get(instance_id)
        if waiters and fut in waiters:
            waiters.remove(fut)

    def wake_waiters(self, instance_id: str) -> None:
        """Resolve the waiters of an instance that ended."""
        for fut in self._waiters.pop(instance_id, []):
            if not fut.done():
                fut.set_result(None)
