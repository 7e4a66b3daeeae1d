"""Durable Functions engine: replays orchestrators through the SDK, runs activities, persists state.

Design (the protocol facts it relies on are in ARCHITECTURE.md):

- One ``Engine`` per task hub, living on the server's event loop. All state changes happen on that
  loop thread; SQLite (WAL) is written synchronously from it, so a transaction never spans an
  ``await``.
- Orchestrator episodes run serially on the loop thread, so at most one episode runs at a time
  (well under host.json ``maxConcurrentOrchestratorFunctions``; the SDK handle is CPU-bound, so
  threads would not add throughput). The dispatcher runs ready instances in slices of up to
  ``SLICE_BUDGET_S`` and commits each slice as one transaction (group commit) *before* any work the
  slice produced is dispatched (activities, timers). Episodes of one instance never overlap.
- Activities run on a bounded set of workers (host.json ``maxConcurrentActivityFunctions``): async
  ones on the loop, sync ones in a thread pool of the same size. Results stay in memory until the
  episode that consumes them commits (that commit also deletes the work item), so after a crash
  the activity re-runs: at-least-once.
- Instance history is cached in memory as pre-rendered JSON text; only non-terminal instances are
  cached. Several pending messages are delivered in one episode, except that a retry-relevant
  event (failure of a with-retry attempt, firing of a retry timer) always gets an episode of its
  own (so host and SDK number retries alike), and an episode that ends in continue-as-new is re-run
  with its first message only so later messages carry over to the new execution.
- An orchestration that returns while tasks are still open (un-cancelled timers, running
  activities or sub-orchestrations, e.g. task_any losers) stays Running until they finish, as
  DTFx does; a failure completes at once. Actions a failing episode emitted are recorded in
  history but not executed (a rewind executes them).
- Fan-in coalescing: when an instance's last replay took over 20 ms and more results are still
  expected, its next episode waits up to that long (max 0.5 s) to take a bigger batch, which
  keeps large fan-ins from replaying once per result (fan-out of 3000: ~60 s -> ~1 s).
- ``query`` returns instances in insertion (creation) order; the continuation token is opaque.
- Replay accelerations (``devhost.accel``): a memoised ``namedtuple`` for the SDK executor and a
  ``fromisoformat`` fast path for the SDK's timestamp parser; both are behaviour-preserving.
- Rewind removes the failures of plain activity calls and sub-orchestrations (recursively
  rewinding failed children) and re-runs them. Of with-retry calls only the last attempt of the
  exhausted call that failed the instance is re-run (its final retry timer is removed); other
  attempts stay failed so the SDK's ids stay aligned.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import functools
import json
import queue
import re
import sqlite3
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from devhost import history as h
from devhost import ids
from devhost.accel import install_sdk_accelerations
from devhost.actions import ActionType, first_mismatch, flatten
from devhost.http.httpmap import InvocationContext
from devhost.logs import current_invocation, held_output, host_logger, install_log_context
from devhost.model import (
    EngineError,
    FunctionInfo,
    InstanceAlreadyExists,
    InstanceGone,
    InstanceNotFound,
    InvalidRequest,
    LoadedApp,
    PreconditionFailed,
)
from devhost.statuses import ALL_STATUSES, RUNNING_STATES, TERMINAL_STATES
from devhost.store import InstanceRow, Store, StoreFault
from devhost.timeutil import (
    datetime_to_epoch,
    epoch_to_history,
    epoch_to_status,
    parse_history_time,
)

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
_BAD_ID_CHARS = re.compile(r"[/\\#?\x00-\x1f\x7f-\x9f]")
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


class DaemonThreadPool:
    """Threads for sync activities; daemon threads so a hung activity never blocks process exit.

    A new thread starts whenever no thread is idle (the engine bounds concurrent activities, so
    this only grows past that bound when timed-out activities keep threads busy).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]] | None]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn`` on a pool thread; the returned future resolves on ``loop``."""
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle == 0:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        self._queue.put((loop, future, fn))
        return future

    def shutdown(self) -> None:
        """Ask idle threads to exit (busy ones exit after their current call)."""
        with self._lock:
            count = self._threads
        for _ in range(count):
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                with self._lock:
                    self._threads -= 1
                return
            loop, future, fn = item
            callback: Callable[[asyncio.Future[Any], Any], None]
            try:
                value: Any = fn()
                callback = _resolve_result
            except BaseException as exc:  # delivered to the awaiting coroutine
                value, callback = exc, _resolve_exception
            try:
                loop.call_soon_threadsafe(callback, future, value)
            except RuntimeError:
                pass  # the loop is closed: the engine has stopped
            with self._lock:
                self._idle += 1


def _resolve_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _resolve_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


@dataclass(slots=True)
class Message:
    """A pending orchestrator message (history event to deliver) and where it is persisted."""

    event: dict[str, Any]
    execution_id: str | None  # None: valid for any execution (external events, control markers)
    inbox_id: int | None = None
    work_id: int | None = None
    timer_id: int | None = None
    fire_at: float = 0.0


@dataclass(slots=True)
class Work:
    """One scheduled activity execution."""

    work_id: int
    instance_id: str
    execution_id: str
    seq: int
    name: str
    input_text: str | None


@dataclass(slots=True)
class ParentRef:
    """The parent orchestration of a sub-orchestration."""

    instance_id: str
    execution_id: str
    seq: int
    name: str


@dataclass(slots=True)
class _Decisions:
    """What one episode decided, applied after the orchestrator ran."""

    events: list[dict[str, Any]] = field(default_factory=list)
    work: list[tuple[int, str, str | None]] = field(default_factory=list)
    timers: list[tuple[int, float, str]] = field(default_factory=list)
    children: list[tuple[int, str, str, str | None, str | None]] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)


class Instance:
    """In-memory state of a non-terminal orchestration instance."""

    __slots__ = (
        "id",
        "name",
        "version",
        "execution_id",
        "status",
        "input_text",
        "output_text",
        "custom_status_text",
        "created",
        "updated",
        "started_at",
        "parent",
        "texts",
        "joined",
        "next_seq",
        "mapped",
        "_mapped_src",
        "_mapped_done",
        "_mapped_text",
        "open",
        "roots",
        "rmap",
        "generation",
        "inbox",
        "queued",
        "timer_handles",
        "last_cost",
        "last_end",
        "wake_handle",
    )

    def __init__(self, instance_id: str, name: str, version: str | None, input_text: str | None, now: float) -> None:
        self.id = instance_id
        self.name = name
        self.version = version
        self.execution_id = ids.execution_id()
        self.status = "Pending"
        self.input_text = input_text
        self.output_text: str | None = None
        self.custom_status_text: str | None = None
        self.created = now
        self.updated = now
        self.started_at = now
        self.parent: ParentRef | None = None
        self.texts: list[str] = []
        self.joined = ""
        self.next_seq = 0
        # One entry per primitive action already mapped: [actionType, name, seq]. Append-only within
        # an execution, so its JSON is kept incrementally (_mapped_text covers the first _mapped_done).
        self.mapped: list[list[Any]] = []
        self._mapped_src: list[list[Any]] = self.mapped
        self._mapped_done = 0
        self._mapped_text = ""
        # Open tasks: seq -> 'a' (activity), 't' (timer), 'o' (sub-orchestration).
        self.open: dict[int, str] = {}
        # With-retry bookkeeping: roots (one per retried call) and seq -> [root index, 'attempt'|'timer'].
        self.roots: list[dict[str, Any]] = []
        self.rmap: dict[int, list[Any]] = {}
        self.generation = 0
        self.inbox: deque[Message] = deque()
        self.queued = False
        self.timer_handles: dict[int, asyncio.TimerHandle] = {}
        # Replay cost of the last episode and when it ended (monotonic), for completion coalescing.
        self.last_cost = 0.0
        self.last_end = 0.0
        self.wake_handle: asyncio.TimerHandle | None = None

    def reset_execution(self, input_text: str | None, now: float) -> None:
        """Start a fresh execution (continue-as-new): new id, empty history, seq ids from 0."""
        self.execution_id = ids.execution_id()
        self.input_text = input_text
        self.started_at = now
        self.texts = []
        self.joined = ""
        self.next_seq = 0
        self.mapped = []
        self.open = {}
        self.roots = []
        self.rmap = {}
        self.generation += 1

    def estate(self) -> str:
        """Serialised engine bookkeeping for the current execution.

        The same text as ``h.dumps({"n": next_seq, "m": mapped, "o": open, "r": roots, "rm": rmap,
        "g": generation, "s": started_at})``, but the mapped-actions list (which grows with the
        history) is only serialised for entries added since the last call.
        """
        return (
            f'{{"n":{h.dumps(self.next_seq)},"m":[{self._mapped_json()}],"o":{h.dumps(self.open)},'
            f'"r":{h.dumps(self.roots)},"rm":{h.dumps(self.rmap)},"g":{h.dumps(self.generation)},'
            f'"s":{h.dumps(self.started_at)}}}'
        )

    def _mapped_json(self) -> str:
        mapped = self.mapped
        done = self._mapped_done
        if mapped is not self._mapped_src or len(mapped) < done:
            self._mapped_src, self._mapped_text, self._mapped_done, done = mapped, "", 0, 0
        if len(mapped) > done:
            extra = ",".join([h.dumps(entry) for entry in mapped[done:]])
            self._mapped_text = f"{self._mapped_text},{extra}" if self._mapped_text else extra
            self._mapped_done = len(mapped)
        return self._mapped_text

    def load_estate(self, text: str | None) -> None:
        """Restore bookkeeping written by ``estate``."""
        if not text:
            return
        data = json.loads(text)
        self.next_seq = data["n"]
        self.mapped = data["m"]
        self.open = {int(k): v for k, v in data["o"].items()}
        self.roots = data["r"]
        self.rmap = {int(k): v for k, v in data["rm"].items()}
        self.generation = data.get("g", 0)
        self.started_at = data.get("s", self.created)

    def row(self) -> InstanceRow:
        """The store row for this instance."""
        p = self.parent
        return InstanceRow(
            instance_id=self.id,
            name=self.name,
            version=self.version,
            execution_id=self.execution_id,
            status=self.status,
            input=self.input_text,
            output=self.output_text,
            custom_status=self.custom_status_text,
            created=self.created,
            updated=self.updated,
            parent_id=p.instance_id if p else None,
            parent_execution=p.execution_id if p else None,
            parent_seq=p.seq if p else None,
            parent_name=p.name if p else None,
            estate=self.estate(),
        )


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


def validate_instance_id(instance_id: str) -> None:
    """Raise InvalidRequest unless the id follows the extension's rules."""
    if not instance_id or len(instance_id) > 256 or instance_id.startswith("@") or _BAD_ID_CHARS.search(instance_id):
        raise InvalidRequest(
            f"Instance ID '{instance_id}' is invalid: it must be 1-256 characters, must not start with '@' and "
            "must not contain '/', '\\', '#', '?' or control characters."
        )


def _parse_json_text(text: str | None) -> Any:
    return None if text is None else h.parse_json_or_text(text)


class Engine:
    """The durable orchestration engine for one loaded app and task hub."""

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
        self._ready: deque[Instance] = deque()
        self._ready_event: asyncio.Event | None = None
        self._work_queue: asyncio.Queue[Work | None] | None = None
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
        self._max_actions = app.host.max_orchestration_actions
        self._timeout = app.host.function_timeout_s
        # Counters for tests and benchmarks (episodes replayed, activity executions started).
        self.episodes_run = 0
        self.activities_run = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Open the store, recover pending work and start dispatching."""
        if self._started:
            return
        install_log_context()
        install_sdk_accelerations()
        self._loop = asyncio.get_running_loop()
        self._ready_event = asyncio.Event()
        self._work_queue = asyncio.Queue()
        workers = self.app.host.max_concurrent_activities
        self._pool = DaemonThreadPool("devhost-activity")
        self._store.open(self.hub_name, reset=self._reset_store)
        self._reset_store = False  # a reset applies to this start only
        self._fault = None
        self._recover()
        self._stopping = False
        self._started = True
        self._tasks.append(asyncio.create_task(self._dispatch_loop(), name="devhost-orchestrations"))
        for i in range(workers):
            self._tasks.append(asyncio.create_task(self._activity_worker(), name=f"devhost-activity-{i}"))
        log.info(
            "Durable task hub '%s' ready (%s, %d instances in flight).",
            self.hub_name,
            self.db_path,
            len(self._instances),
        )

    def synchronous_level(self) -> str:
        """The SQLite ``synchronous`` level the started engine commits with (NORMAL, FULL, ...)."""
        self._require_started()
        return self._store.synchronous_level()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking work, let running activities finish (up to ``grace_s``), persist and close."""
        if not self._started:
            return
        self._stopping = True
        assert self._work_queue is not None and self._ready_event is not None
        dispatcher, workers = self._tasks[0], self._tasks[1:]
        dispatcher.cancel()
        # Queued (not started) activities stay in the store and re-run on the next start.
        while not self._work_queue.empty():
            self._work_queue.get_nowait()
        for _ in workers:
            self._work_queue.put_nowait(None)
        done, pending = await asyncio.wait(workers, timeout=grace_s) if workers else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(dispatcher, *workers, return_exceptions=True)
        # Persist results that already arrived so finished activities need not re-run. New work
        # those episodes schedule is only written to the store (it runs after the next start).
        try:
            for _ in range(1000 if self._fault is None else 0):
                for inst in self._instances.values():
                    if inst.inbox and not inst.queued and inst.status not in TERMINAL_STATES | {"Suspended"}:
                        inst.queued = True
                        self._ready.append(inst)
                if not self._ready:
                    break
                while self._ready:
                    self._run_slice(dispatch=False)
        except Exception:
            log.exception("Persisting the last results on shutdown failed; affected activities will re-run.")
        for inst in self._instances.values():
            _cancel_handles(inst)
        self._delayed = 0
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
        self._store.close()
        if self._pool is not None:
            self._pool.shutdown()
        self._tasks.clear()
        self._instances.clear()
        self._ready.clear()
        self._started = False
        log.info("Durable task hub '%s' stopped.", self.hub_name)

    def _recover(self) -> None:
        store = self._store
        for row in store.instances_with_status(sorted(RUNNING_STATES)):
            inst = self._instance_from_row(row)
            inst.texts = store.history(row.instance_id)
            inst.joined = ",".join(inst.texts)
            for inbox_id, execution_id, body in store.inbox(row.instance_id):
                inst.inbox.append(Message(json.loads(body), execution_id, inbox_id=inbox_id))
            self._instances[inst.id] = inst
        stale_work: list[int] = []
        assert self._work_queue is not None
        for work_id, instance_id, execution_id, seq, name, input_text in store.activities():
            owner = self._instances.get(instance_id)
            if owner is None or owner.execution_id != execution_id or owner.open.get(seq) != "a":
                stale_work.append(work_id)
                continue
            self._work_queue.put_nowait(Work(work_id, instance_id, execution_id, seq, name, input_text))
        stale_timers: list[int] = []
        for timer_id, instance_id, execution_id, seq, fire_at, fire_text in store.timers():
            owner = self._instances.get(instance_id)
            if owner is None or owner.execution_id != execution_id or owner.open.get(seq) != "t":
                stale_timers.append(timer_id)
                continue
            self._arm_timer(owner, execution_id, seq, timer_id, fire_at, fire_text)
        if stale_work or stale_timers:
            store.begin()
            store.delete_activities(stale_work)
            store.delete_timers(stale_timers)
            store.commit()
        for inst in self._instances.values():
            if not inst.texts or inst.inbox:
                self._schedule(inst)

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

    # ------------------------------------------------------------------ scheduling
    def _schedule(self, inst: Instance) -> None:
        if inst.queued or inst.status in TERMINAL_STATES or inst.status == "Suspended" or self._stopping:
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

    async def _dispatch_loop(self) -> None:
        event = self._ready_event
        assert event is not None
        backoff = HEAL_FIRST_S
        while True:
            if self._fault is not None:
                await asyncio.sleep(backoff)
                backoff = HEAL_FIRST_S if self._heal() else min(backoff * 2, HEAL_MAX_S)
                continue
            if not self._ready:
                event.clear()
                await event.wait()
                continue
            try:
                self._run_slice(dispatch=True)
            except STORE_ERRORS as exc:
                self._store_failed(exc)
            except Exception:
                log.critical("The durable engine failed; stopping orchestration dispatch.", exc_info=True)
                raise
            await asyncio.sleep(0)

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

    def _heal(self) -> bool:
        """Probe the store; when it writes again, reload the in-memory state from it as a start does."""
        try:
            self._store.probe_write()
        except STORE_ERRORS as exc:
            self._fault = f"{type(exc).__name__}: {exc}"
            return False
        # Memory may hold changes of transactions that were rolled back: drop it all and reload.
        for inst in self._instances.values():
            _cancel_handles(inst)
        self._instances.clear()
        self._ready.clear()
        self._delayed = 0
        queue = self._work_queue
        while queue is not None and not queue.empty():
            queue.get_nowait()  # recovery queues every pending activity again from the store
        try:
            self._recover()
        except STORE_ERRORS as exc:
            self._store.rollback()
            self._fault = f"{type(exc).__name__}: {exc}"
            return False
        self._fault = None
        log.warning("The durable store writes again; %d instances in flight resumed.", len(self._instances))
        return True

    def _run_slice(self, *, dispatch: bool) -> None:
        """Run ready episodes for up to SLICE_BUDGET_S, commit them together, then dispatch their work.

        The slice never yields to the event loop, so its log lines are written in one call at its
        end (before any HTTP response the loop sends next).
        """
        with held_output():
            self._run_slice_held(dispatch=dispatch)

    def _run_slice_held(self, *, dispatch: bool) -> None:
        store = self._store
        ready = self._ready
        store.begin()
        deadline = time.perf_counter() + SLICE_BUDGET_S
        try:
            while ready:
                inst = ready.popleft()
                inst.queued = False
                try:
                    self._episode(inst)
                except STORE_ERRORS:
                    raise  # the whole slice is rolled back; the dispatcher heals
                except Exception as exc:  # an engine bug must not take other instances down
                    log.exception("Internal error while running an episode of instance %s", inst.id)
                    self._fail_now(inst, f"devhost internal error: {type(exc).__name__}: {exc}")
                if time.perf_counter() >= deadline:
                    break
            store.commit()
        except BaseException:
            store.rollback()
            raise
        after, self._after = self._after, []
        if dispatch:
            for callback in after:
                callback()

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

    # ------------------------------------------------------------------ episodes
    def _seq_of(self, ev: dict[str, Any]) -> int | None:
        key = _SEQ_FIELD.get(ev.get("EventType", -1))
        return ev.get(key) if key else None

    def _is_retry_relevant(self, inst: Instance, ev: dict[str, Any]) -> bool:
        et = ev.get("EventType")
        if et in (h.TASK_FAILED, h.SUB_ORCHESTRATION_FAILED):
            entry = inst.rmap.get(ev.get("TaskScheduledId", -1))
            return entry is not None and entry[1] == "attempt"
        if et == h.TIMER_FIRED:
            entry = inst.rmap.get(ev.get("TimerId", -1))
            return entry is not None and entry[1] == "timer"
        return False

    def _episode(self, inst: Instance) -> None:
        if inst.status in TERMINAL_STATES or inst.status == "Suspended":
            return
        store = self._store
        inbox = inst.inbox
        batch: list[Message] = []
        retry_msg: Message | None = None
        while inbox:
            m = inbox[0]
            seq = self._seq_of(m.event)
            stale = (m.execution_id is not None and m.execution_id != inst.execution_id) or (
                seq is not None and seq not in inst.open
            )
            if stale:
                inbox.popleft()
                self._forget_message(m)
                continue
            if self._is_retry_relevant(inst, m.event):
                if batch:
                    break
                inbox.popleft()
                batch.append(m)
                retry_msg = m
                break
            inbox.popleft()
            batch.append(m)
            if len(batch) >= MAX_BATCH:
                break
        first = not inst.texts
        if not batch and not first:
            return
        fn = self._orchestrators.get(inst.name.lower())
        if fn is None:
            self._consume(batch)
            self._fail_now(inst, self._unknown_function_message(inst.name, "orchestrator"))
            return
        now = time.time()
        ts_epoch = max([now] + [m.fire_at for m in batch])
        ts = epoch_to_history(ts_epoch)
        new_events, state, error = self._invoke(fn, inst, batch, ts, first)
        if state is not None and state.get("isDone") and len(batch) > 1 and self._ends_with_can(state):
            # Re-run with the first message only: later messages carry over to the next execution.
            for m in reversed(batch[1:]):
                inbox.appendleft(m)
            batch = batch[:1]
            new_events, state, error = self._invoke(fn, inst, batch, ts, first)
        self.episodes_run += 1
        self._consume(batch)
        self._apply(inst, new_events, state, error, retry_msg, batch, ts, ts_epoch)
        inst.last_end = time.monotonic()
        inst.last_cost = time.time() - now
        if inst.inbox and inst.status not in TERMINAL_STATES:
            self._schedule(inst)
        del store

    @staticmethod
    def _ends_with_can(state: dict[str, Any]) -> bool:
        flat: list[dict[str, Any]] = []
        flatten(state.get("actions") or [], flat)
        return bool(flat) and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW

    def _forget_message(self, m: Message) -> None:
        """Drop a message that no longer applies, deleting whatever persists it."""
        store = self._store
        if m.inbox_id is not None:
            store.delete_inbox((m.inbox_id,))
        if m.work_id is not None:
            store.delete_activities((m.work_id,))
        if m.timer_id is not None:
            store.delete_timers((m.timer_id,))

    def _consume(self, batch: list[Message]) -> None:
        store = self._store
        inbox_ids = [m.inbox_id for m in batch if m.inbox_id is not None]
        work_ids = [m.work_id for m in batch if m.work_id is not None]
        timer_ids = [m.timer_id for m in batch if m.timer_id is not None]
        if inbox_ids:
            store.delete_inbox(inbox_ids)
        if work_ids:
            store.delete_activities(work_ids)
        if timer_ids:
            store.delete_timers(timer_ids)

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
            ScheduledStartTime=None,
            Generation=inst.generation,
        )

    def _invoke(
        self, fn: FunctionInfo, inst: Instance, batch: list[Message], ts: str, first: bool
    ) -> tuple[list[str], dict[str, Any] | None, str | None]:
        """Run the SDK handle over history + new events; returns (rendered new events, state, error)."""
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if first:
            new_events.append(self._execution_started(inst))
        new_events.extend(m.event for m in batch)
        rendered = [h.render(e) for e in new_events]
        fresh = ",".join([h.unplayed(t) for t in rendered])
        history_text = f"{inst.joined},{fresh}" if inst.joined else fresh
        p = inst.parent
        context_json = (
            '{"history":['
            + history_text
            + '],"input":'
            + (inst.input_text if inst.input_text is not None else "null")
            + ',"instanceId":'
            + h.dumps(inst.id)
            + ',"isReplaying":'
            + ("true" if inst.texts else "false")
            + ',"parentInstanceId":'
            + (h.dumps(p.instance_id) if p else "null")
            + ',"upperSchemaVersion":1,"upperSchemaVersionNew":2}'
        )
        invocation_id = ids.invocation_id()
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        token = current_invocation.set((fn.name, invocation_id))
        state: dict[str, Any] | None = None
        error: str | None = None
        try:
            state = json.loads(fn.user_function(context_json))
        except Exception as exc:
            text = str(exc)
            at = text.find(OUT_OF_PROC_MARKER)
            if at >= 0:
                try:
                    state = json.loads(text[at + len(OUT_OF_PROC_MARKER) :])
                except ValueError:
                    state = None
                error = (state or {}).get("error") or text[:at]
            else:
                error = f"{type(exc).__name__}: {exc}"
        finally:
            current_invocation.reset(token)
        if state is not None and not isinstance(state, dict):
            error, state = f"The orchestrator returned invalid state JSON: {state!r:.200}", None
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            "Failed" if error is not None else "Succeeded",
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        return rendered, state, error

    def _apply(
        self,
        inst: Instance,
        new_events: Sequence[dict[str, Any] | str],
        state: dict[str, Any] | None,
        error: str | None,
        retry_msg: Message | None,
        batch: list[Message],
        ts: str,
        ts_epoch: float,
    ) -> None:
        """Turn the orchestrator's state into history, scheduled work and a status."""
        for m in batch:
            seq = self._seq_of(m.event)
            if seq is None:
                continue
            inst.open.pop(seq, None)
            if m.event["EventType"] in (h.TASK_COMPLETED, h.SUB_ORCHESTRATION_COMPLETED):
                inst.rmap.pop(seq, None)
        d = _Decisions()
        if retry_msg is not None:
            self._retry_step(inst, retry_msg.event, ts, ts_epoch, d)
        failure: str | None = None
        flat: list[dict[str, Any]] = []
        if state is not None:
            flatten(state.get("actions") or [], flat)
            failure = self._map_actions(inst, flat, d, ts, check_missing=error is None)
            if failure is None and "customStatus" in state:
                text = h.dumps(state["customStatus"])
                size_kb = len(text.encode("utf-16-le")) // 1024
                if size_kb > CUSTOM_STATUS_LIMIT_KB:
                    failure = (
                        "The UTF-16 size of the JSON-serialized payload must not exceed 16 KB. "
                        f"The current payload size is {size_kb} KB."
                    )
                else:
                    inst.custom_status_text = text
        if failure is None and error is not None:
            failure = error
        if failure is None and state is None:
            failure = "The orchestrator returned no state."
        inst.updated = time.time()
        if inst.status in ("Pending", "ContinuedAsNew"):
            inst.status = "Running"
            log.info("%s: orchestration '%s' started.", inst.id, inst.name)
        if failure is not None:
            self._finish(
                inst, new_events, d.events, "Failed", f"Orchestrator function '{inst.name}' failed: {failure}", ts
            )
            return
        assert state is not None
        if state.get("isDone"):
            if flat and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW:
                self._continue_as_new(inst, flat[-1].get("input"), new_events, d, ts)
                return
            if not inst.open:
                output = state.get("output")
                self._finish(inst, new_events, d.events, "Completed", output, ts)
                return
        self._append(inst, new_events, d.events, ts)
        self._persist_decisions(inst, d)
        self._save(inst)

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

    def _persist_decisions(self, inst: Instance, d: _Decisions) -> None:
        """Write the episode's work items, timers, cancellations and children; dispatch after commit."""
        store = self._store
        execution_id = inst.execution_id
        for seq in d.cancels:
            store.delete_timer_seq(inst.id, execution_id, seq)
            handle = inst.timer_handles.pop(seq, None)
            if handle is not None:
                handle.cancel()
        for seq, name, input_text in d.work:
            work_id = store.insert_activity(inst.id, execution_id, seq, name, input_text)
            self._after.append(
                functools.partial(self._enqueue_work, Work(work_id, inst.id, execution_id, seq, name, input_text))
            )
        for seq, fire_at, fire_text in d.timers:
            timer_id = store.insert_timer(inst.id, execution_id, seq, fire_at, fire_text)
            self._after.append(
                functools.partial(self._arm_timer, inst, execution_id, seq, timer_id, fire_at, fire_text)
            )
        for seq, name, child_id, input_text, version in d.children:
            self._create_child(inst, seq, name, child_id, input_text, version)

    def _enqueue_work(self, work: Work) -> None:
        inst = self._instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or self._work_queue is None:
            return
        self._work_queue.put_nowait(work)

    def _create_child(
        self, parent: Instance, seq: int, name: str, child_id: str, input_text: str | None, version: str | None
    ) -> None:
        ts = epoch_to_history(time.time())
        if child_id in self._instances:
            ev = h.event(
                h.SUB_ORCHESTRATION_FAILED,
                ts,
                TaskScheduledId=seq,
                Reason=f"An orchestration with instance ID '{child_id}' already exists and is still running.",
                Details="",
            )
            inbox_id = self._store.insert_inbox(parent.id, parent.execution_id, h.render(ev))
            parent.inbox.append(Message(ev, parent.execution_id, inbox_id=inbox_id))
            return
        if self._store.get_instance(child_id) is not None:
            self._store.delete_instance(child_id)  # a terminal instance with this id is replaced
        now = time.time()
        child = Instance(child_id, name, version, h.dumps(input_text), now)
        child.parent = ParentRef(parent.id, parent.execution_id, seq, parent.name)
        self._store.insert_instance(child.row())
        self._instances[child_id] = child
        log.info("%s: sub-orchestration '%s' scheduled by %s.", child_id, name, parent.id)
        self._schedule(child)

    def _unknown_function_message(self, name: str, kind: str) -> str:
        known = self._orchestrators if kind == "orchestrator" else self._activities
        names = ", ".join(f"'{f.durable_name}'" for f in known.values())
        return (
            f"The function '{name}' doesn't exist, is disabled, or is not an {kind} function. "
            f"Additional info: The following are the known {kind} functions: {names}."
        )

    def _map_actions(
        self, inst: Instance, flat: list[dict[str, Any]], d: _Decisions, ts: str, *, check_missing: bool
    ) -> str | None:
        """Flatten-and-diff (ARCHITECTURE.md): check replayed actions, schedule new ones; returns a failure message."""
        mapped = inst.mapped
        n_old = len(mapped)
        if len(flat) > self._max_actions:
            return (
                f"Maximum amount of orchestration actions ({self._max_actions}) has been reached. "
                "This value can be configured in host.json file as MaxOrchestrationActions."
            )
        mismatch = first_mismatch(mapped, flat, check_missing=check_missing)
        if mismatch is not None:
            return mismatch
        for action, (t, _name, seq) in zip(flat, mapped, strict=False):
            # A replayed action changes only by a cancelled timer: never fire it.
            if t == ActionType.CREATE_TIMER and action.get("isCanceled") and inst.open.get(seq) == "t":
                del inst.open[seq]
                d.cancels.append(seq)
        for action in flat[n_old:]:
            t = action.get("actionType")
            handler = self._ACTION_HANDLERS.get(t) if isinstance(t, int) else None
            if handler is None:
                return f"Unsupported orchestrator action: {h.dumps(action)[:200]}"
            problem = handler(self, inst, action, d, ts)
            if problem is not None:
                return problem
        return None

    # -- one handler per action type: schedule it, record it in ``inst.mapped``, or refuse it ---------------

    def _new_activity(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        t = action["actionType"]
        name = action.get("functionName") or ""
        if name.lower() not in self._activities:
            return self._unknown_function_message(name, "activity")
        seq = inst.next_seq
        inst.next_seq += 1
        input_text = action.get("input")
        d.events.append(h.event(h.TASK_SCHEDULED, ts, seq, Name=name, Version="", Input=input_text))
        d.work.append((seq, name, input_text))
        inst.open[seq] = "a"
        if t == ActionType.CALL_ACTIVITY_WITH_RETRY:
            self._add_retry_root(inst, seq, "a", name, input_text, action, None, None)
        inst.mapped.append([t, name, seq])
        return None

    def _new_sub_orchestration(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        t = action["actionType"]
        name = action.get("functionName") or ""
        if name.lower() not in self._orchestrators:
            return self._unknown_function_message(name, "orchestrator")
        seq = inst.next_seq
        inst.next_seq += 1
        explicit_id = action.get("instanceId")
        child_id = explicit_id or f"{inst.execution_id}:{seq}"
        problem = self._child_id_problem(inst, child_id)
        if problem:
            return problem
        version = action.get("version") or self.app.host.default_version
        input_text = action.get("input")
        d.events.append(
            h.event(
                h.SUB_ORCHESTRATION_CREATED,
                ts,
                seq,
                Name=name,
                InstanceId=child_id,
                Input=input_text,
                Version=version or "",
            )
        )
        d.children.append((seq, name, child_id, input_text, version))
        inst.open[seq] = "o"
        if t == ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY:
            self._add_retry_root(inst, seq, "o", name, input_text, action, explicit_id, version)
        inst.mapped.append([t, name, seq])
        return None

    def _new_timer(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        seq = inst.next_seq
        inst.next_seq += 1
        fire_text = action.get("fireAt") or ts
        d.events.append(h.event(h.TIMER_CREATED, ts, seq, FireAt=fire_text))
        inst.mapped.append([ActionType.CREATE_TIMER, None, seq])
        if not action.get("isCanceled"):
            inst.open[seq] = "t"
            d.timers.append((seq, parse_history_time(fire_text), fire_text))
        return None

    def _new_wait(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        # Takes no sequence number: the wait is keyed by the event's name.
        inst.mapped.append([ActionType.WAIT_FOR_EXTERNAL_EVENT, action.get("externalEventName"), None])
        return None

    def _new_continue_as_new(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        inst.next_seq += 1
        inst.mapped.append([ActionType.CONTINUE_AS_NEW, None, None])
        return None

    def _new_entity_call(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        return (
            "Durable entities are not supported by the devhost: the orchestration called entity "
            f"'{action.get('instanceId')}' (operation '{action.get('operation')}')."
        )

    def _new_http_call(self, inst: Instance, action: dict[str, Any], d: _Decisions, ts: str) -> str | None:
        return "call_http (CallHttp actions) is not supported by the devhost; call HTTP from an activity."

    _ACTION_HANDLERS: ClassVar[dict[int, Callable[[Engine, Instance, dict[str, Any], _Decisions, str], str | None]]] = {
        ActionType.CALL_ACTIVITY: _new_activity,
        ActionType.CALL_ACTIVITY_WITH_RETRY: _new_activity,
        ActionType.CALL_SUB_ORCHESTRATOR: _new_sub_orchestration,
        ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY: _new_sub_orchestration,
        ActionType.CREATE_TIMER: _new_timer,
        ActionType.WAIT_FOR_EXTERNAL_EVENT: _new_wait,
        ActionType.CONTINUE_AS_NEW: _new_continue_as_new,
        ActionType.CALL_ENTITY: _new_entity_call,
        ActionType.SIGNAL_ENTITY: _new_entity_call,
        ActionType.CALL_HTTP: _new_http_call,
    }

    def _child_id_problem(self, inst: Instance, child_id: str) -> str | None:
        if child_id == inst.id or (inst.parent is not None and child_id == inst.parent.instance_id):
            return f"A sub-orchestration cannot use the instance ID '{child_id}' of its parent or of itself."
        try:
            validate_instance_id(child_id)
        except InvalidRequest as exc:
            return str(exc)
        return None

    @staticmethod
    def _add_retry_root(
        inst: Instance,
        seq: int,
        kind: str,
        name: str,
        input_text: str | None,
        action: dict[str, Any],
        explicit_id: str | None,
        version: str | None,
    ) -> None:
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

    def _retry_step(self, inst: Instance, ev: dict[str, Any], ts: str, ts_epoch: float, d: _Decisions) -> None:
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

    # ------------------------------------------------------------------ endings
    def _continue_as_new(
        self, inst: Instance, input_text: Any, new_events: Sequence[dict[str, Any] | str], d: _Decisions, ts: str
    ) -> None:
        store = self._store
        old_execution = inst.execution_id
        for handle in inst.timer_handles.values():
            handle.cancel()
        inst.timer_handles.clear()
        store.delete_instance_work(inst.id, inbox=False)
        store.replace_history(inst.id, [])
        # Results for the old execution are void; external events carry over.
        kept: deque[Message] = deque()
        for m in inst.inbox:
            if m.execution_id == old_execution:
                self._forget_message(m)
            else:
                kept.append(m)
        inst.inbox = kept
        inst.reset_execution(h.dumps(input_text), time.time())
        inst.status = "ContinuedAsNew"
        self._save(inst)
        log.info("%s: orchestration '%s' continued as new (generation %d).", inst.id, inst.name, inst.generation)
        self._schedule(inst)
        del new_events, d

    def _finish(
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
        output_text = h.dumps(output)
        if terminal_events is None:
            extra: dict[str, Any] = {}
            if status == "Failed":
                extra["FailureDetails"] = {"ErrorType": "OrchestrationFailure", "ErrorMessage": output}
            terminal_events = [
                h.event(
                    h.EXECUTION_COMPLETED,
                    ts,
                    inst.next_seq,
                    OrchestrationStatus=h.ORCHESTRATION_STATUS[status],
                    Result=output_text,
                    **extra,
                )
            ]
        self._append(inst, new_events, decided + terminal_events, ts)
        for handle in inst.timer_handles.values():
            handle.cancel()
        inst.timer_handles.clear()
        self._store.delete_instance_work(inst.id)
        inst.inbox.clear()
        inst.status = status
        inst.output_text = output_text
        inst.updated = time.time()
        self._save(inst)
        self._instances.pop(inst.id, None)
        self._notify_parent(inst, status, output, ts)
        instance_id = inst.id
        self._after.append(lambda: self._wake_waiters(instance_id))
        if status == "Completed":
            log.info("%s: orchestration '%s' completed.", inst.id, inst.name)
        elif status == "Failed":
            log.info("%s: orchestration '%s' failed: %s", inst.id, inst.name, output)
        else:
            log.info("%s: orchestration '%s' %s.", inst.id, inst.name, status.lower())

    def _fail_now(self, inst: Instance, message: str) -> None:
        """Fail an instance outside the normal episode path (unknown orchestrator, engine errors)."""
        if inst.status in TERMINAL_STATES:
            return
        ts = epoch_to_history(time.time())
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if not inst.texts:
            new_events.append(self._execution_started(inst))
        self._finish(inst, new_events, [], "Failed", f"Orchestrator function '{inst.name}' failed: {message}", ts)

    def _notify_parent(self, inst: Instance, status: str, output: Any, ts: str) -> None:
        p = inst.parent
        if p is None:
            return
        parent = self._instances.get(p.instance_id)
        if parent is None or parent.execution_id != p.execution_id or parent.open.get(p.seq) != "o":
            return
        if status == "Completed":
            ev = h.event(h.SUB_ORCHESTRATION_COMPLETED, ts, TaskScheduledId=p.seq, Result=inst.output_text)
        else:
            reason = output if isinstance(output, str) else h.dumps(output)
            if status != "Failed":
                reason = f"Sub-orchestration '{inst.id}' was {status.lower()}: {reason}"
            ev = h.event(h.SUB_ORCHESTRATION_FAILED, ts, TaskScheduledId=p.seq, Reason=reason, Details="")
        inbox_id = self._store.insert_inbox(parent.id, parent.execution_id, h.render(ev))
        parent.inbox.append(Message(ev, parent.execution_id, inbox_id=inbox_id))
        self._schedule(parent)

    def _wake_waiters(self, instance_id: str) -> None:
        for fut in self._waiters.pop(instance_id, []):
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ timers
    def _arm_timer(
        self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str
    ) -> None:
        if (
            self._loop is None
            or self._instances.get(inst.id) is not inst
            or inst.execution_id != execution_id
            or inst.open.get(seq) != "t"
        ):
            return
        delay = max(0.0, fire_at - time.time())
        inst.timer_handles[seq] = self._loop.call_later(
            delay, self._fire_timer, inst, execution_id, seq, timer_id, fire_at, fire_text
        )

    def _fire_timer(
        self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str
    ) -> None:
        inst.timer_handles.pop(seq, None)
        if inst.execution_id != execution_id or inst.open.get(seq) != "t":
            return
        now = time.time()
        if now < fire_at:  # the monotonic clock ran ahead of the wall clock: re-arm for the remainder
            self._arm_timer(inst, execution_id, seq, timer_id, fire_at, fire_text)
            return
        ev = h.event(h.TIMER_FIRED, epoch_to_history(now), TimerId=seq, FireAt=fire_text)
        self._deliver(inst.id, Message(ev, execution_id, timer_id=timer_id, fire_at=fire_at))

    # ------------------------------------------------------------------ activities
    async def _activity_worker(self) -> None:
        queue = self._work_queue
        assert queue is not None
        while True:
            work = await queue.get()
            if work is None:
                return
            self._active_activities += 1
            try:
                await self._run_activity(work)
            finally:
                self._active_activities -= 1

    async def _run_activity(self, work: Work) -> None:
        if self._fault is not None:
            return  # still in the store: the reload after the fault queues it again
        inst = self._instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or inst.open.get(work.seq) != "a":
            return
        fn = self._activities.get(work.name.lower())
        if fn is None:
            ev = h.event(
                h.TASK_FAILED,
                epoch_to_history(time.time()),
                TaskScheduledId=work.seq,
                Reason=self._unknown_function_message(work.name, "activity"),
                Details="",
            )
            self._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
            return
        from azure.functions import meta  # noqa: PLC0415 - keeps module import light
        from azure.functions.durable_functions import ActivityTriggerConverter  # noqa: PLC0415

        invocation_id = ids.invocation_id()
        self.activities_run += 1
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        try:
            value = ActivityTriggerConverter.decode(
                meta.Datum(work.input_text if work.input_text is not None else "null", "json"), trigger_metadata=None
            )
            kwargs: dict[str, Any] = {str(fn.trigger.get("name")): value}
            if fn.wants_context:
                kwargs["context"] = InvocationContext(
                    invocation_id=invocation_id, function_name=fn.name, function_directory=self.app.root
                )
            result = await self._call_activity(fn, kwargs, invocation_id)
            encoded = ActivityTriggerConverter.encode(result, expected_type=None).value
            ev = h.event(h.TASK_COMPLETED, epoch_to_history(time.time()), TaskScheduledId=work.seq, Result=encoded)
            outcome = "Succeeded"
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            outcome = "Failed"
            if isinstance(exc, TimeoutError) and self._timeout is not None:
                message = f"Timeout value of {self._timeout:g} seconds was exceeded by function: Functions.{fn.name}"
                exc_name = "FunctionTimeoutException"
            else:
                message, exc_name = str(exc), type(exc).__name__
            flog.error(
                "Exception while executing function: Functions.%s (Id=%s): %s: %s",
                fn.name,
                invocation_id,
                exc_name,
                message,
            )
            ev = h.event(
                h.TASK_FAILED,
                epoch_to_history(time.time()),
                TaskScheduledId=work.seq,
                Reason=f"Activity function '{work.name}' failed: {exc_name}: {message}",
                Details="".join(traceback.format_exception(exc)),
            )
            if not isinstance(exc, Exception):
                self._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
                raise
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            outcome,
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        self._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))

    async def _call_activity(self, fn: FunctionInfo, kwargs: dict[str, Any], invocation_id: str) -> Any:
        timeout = self._timeout
        if fn.is_async:
            token = current_invocation.set((fn.name, invocation_id))
            try:
                if timeout is None:
                    return await fn.user_function(**kwargs)
                async with asyncio.timeout(timeout):
                    return await fn.user_function(**kwargs)
            finally:
                current_invocation.reset(token)
        ctx = contextvars.copy_context()
        ctx.run(current_invocation.set, (fn.name, invocation_id))
        assert self._loop is not None and self._pool is not None
        future = self._pool.submit(self._loop, functools.partial(ctx.run, fn.user_function, **kwargs))
        if timeout is None:
            return await future
        return await asyncio.wait_for(future, timeout)

    # ------------------------------------------------------------------ client API
    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("The durable engine is not running; call start() first.")

    async def start_instance(
        self, name: str, instance_id: str | None, input_json: str | None, version: str | None = None
    ) -> str:
        """Create and schedule a new orchestration instance; returns its id."""
        self._require_started()
        fn = self._orchestrators.get(name.lower())
        if fn is None:
            raise InvalidRequest(self._unknown_function_message(name, "orchestrator"))
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
            existing = self._instances[instance_id]
            raise InstanceAlreadyExists(
                f"An orchestration with instance ID '{instance_id}' already exists and is {existing.status}."
            )
        inst = Instance(instance_id, name, version or self.app.host.default_version, input_json, time.time())
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
            "input": _parse_json_text(row.input) if show_input else None,
            "customStatus": _parse_json_text(row.custom_status),
            "output": _parse_json_text(row.output),
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
        """Instances matching the filters, in created-time order, one page at a time."""
        self._require_started()
        wanted = self._check_statuses(statuses)
        page = top if top and top > 0 else DEFAULT_PAGE_SIZE
        after: tuple[float, int] | None = None
        if continuation:
            try:
                created_text, ord_text = (
                    base64.urlsafe_b64decode(continuation.encode("ascii")).decode("ascii").split(":")
                )
                after = (float(created_text), int(ord_text))
            except (ValueError, binascii.Error, UnicodeError) as exc:
                raise InvalidRequest("The continuation token is not valid.") from exc
        rows = self._store.query_by_created(
            created_from=datetime_to_epoch(created_from) if created_from else None,
            created_to=datetime_to_epoch(created_to) if created_to else None,
            statuses=wanted,
            prefix=prefix or None,
            after=after,
            limit=page + 1,
        )
        token = None
        if len(rows) > page:
            rows = rows[:page]
            # repr() of a float reads back exactly: the next page starts right after this row.
            token = base64.urlsafe_b64encode(f"{rows[-1][0]!r}:{rows[-1][1]}".encode("ascii")).decode("ascii")
        return [self._status_dict(row, show_input) for _, _, row in rows], token

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
        output = _parse_json_text(reason)
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
            self._finish(inst, new_events, [], "Terminated", output, ts, terminal_events=terminal)

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        """Suspend a running instance: no episodes until resumed; messages are held."""
        self._require_started()
        inst = self._live_or_error(instance_id)
        if inst.status == "Suspended":
            raise PreconditionFailed(f"The instance '{instance_id}' is already suspended.")
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
            raise PreconditionFailed(f"The instance '{instance_id}' is not suspended (it is {inst.status}).")
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

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """Rewind a Failed instance: drop its failures, re-run failed and unfinished work, replay."""
        self._require_started()
        if instance_id in self._instances:
            raise PreconditionFailed(f"Only failed instances can be rewound; '{instance_id}' is still running.")
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        if row.status != "Failed":
            raise PreconditionFailed(f"Only failed instances can be rewound; '{instance_id}' is {row.status}.")
        with self._transaction():
            self._rewind_locked(row, reason)

    def _rewind_locked(self, row: InstanceRow, reason: str | None) -> None:
        store = self._store
        inst = self._instance_from_row(row)
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
        self._instances[inst.id] = inst
        self._persist_decisions(inst, self._rerun_open_tasks(inst, scheduled, reason))
        marker = h.event(h.GENERIC_EVENT, epoch_to_history(time.time()), Data=f"Rewound: {reason or ''}")
        inbox_id = store.insert_inbox(inst.id, None, h.render(marker))
        inst.inbox.append(Message(marker, None, inbox_id=inbox_id))
        self._save(inst)
        log.info("%s: orchestration '%s' rewound.", inst.id, inst.name)
        self._after.append(functools.partial(self._schedule, inst))

    def _rerun_open_tasks(self, inst: Instance, scheduled: dict[int, dict[str, Any]], reason: str | None) -> _Decisions:
        """Re-run every open task: failed ones and those a failing episode recorded but never ran."""
        d = _Decisions()
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

    def _rerun_child(self, inst: Instance, seq: int, source: dict[str, Any], reason: str | None, d: _Decisions) -> None:
        """A failed sub-orchestration is rewound too; one that never started is started."""
        child_id = source.get("InstanceId") or f"{inst.execution_id}:{seq}"
        child_row = self._store.get_instance(child_id)
        if child_row is not None and child_row.status == "Failed":
            self._rewind_locked(child_row, reason)
        elif child_id not in self._instances:
            d.children.append(
                (seq, source.get("Name") or "", child_id, source.get("Input"), source.get("Version") or None)
            )

    async def restart(self, instance_id: str, new_instance_id: bool = True) -> str:
        """Start the instance's orchestration again with the same input; returns the new (or same) id."""
        self._require_started()
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
        target = uuid.uuid4().hex if new_instance_id else instance_id
        return await self.start_instance(row.name, target, row.input, row.version)

    async def purge(self, instance_id: str) -> int:
        """Delete a terminal instance and its history; returns 1."""
        self._require_started()
        if instance_id in self._instances:
            raise PreconditionFailed(
                f"The instance '{instance_id}' is still running; only terminal instances can be purged."
            )
        row = self._store.get_instance(instance_id)
        if row is None:
            raise InstanceNotFound(f"No instance with ID '{instance_id}' was found.")
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


def _cancel_handles(inst: Instance) -> None:
    """Cancel an instance's pending timer and wake-up callbacks on the event loop."""
    for handle in inst.timer_handles.values():
        handle.cancel()
    inst.timer_handles.clear()
    if inst.wake_handle is not None:
        inst.wake_handle.cancel()
        inst.wake_handle = None
