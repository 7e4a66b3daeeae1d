"""Small fakes for the engine's parts: a core that records what a part asks of it, over a real SQLite store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.core import FunctionTable
from devhost.durable.engine.state import Decisions, EntityInstance, Instance, Message, Work
from devhost.durable.store import Store
from devhost.functions.model import FunctionInfo, FunctionKind, HostConfig, LoadedApp

TS = "2026-01-01T00:00:00.000000Z"

# Stores the fakes opened (each runs a checkpoint thread), closed by close_fakes after each test.
_opened: list[Store] = []


def close_fakes() -> None:
    """Close every store a fake opened."""
    while _opened:
        _opened.pop().close()


def function(name: str, kind: FunctionKind, body: Callable[..., Any]) -> FunctionInfo:
    """A durable function of the app, named ``name``."""
    return FunctionInfo(name, kind, {"name": "x"}, [], body, durable_name=name)


class FakeCore:
    """What the parts ask of ``EngineCore``, recorded: a real store, live instances, deferred callbacks."""

    def __init__(self, tmp: Path, functions: Sequence[FunctionInfo] = (), **host: Any) -> None:
        self.app = LoadedApp(root=tmp, host=HostConfig(**host), functions=list(functions))
        self.hub_name = self.app.host.hub_name
        self.functions = FunctionTable(self.app)
        self.max_actions = self.app.host.max_orchestration_actions
        self.timeout: float | None = None
        self.store = Store(tmp / "store.sqlite3")
        self.store.open("hub")
        _opened.append(self.store)
        self.instances: dict[str, Instance] = {}
        self.deferred: list[Callable[[], None]] = []
        self.ready: list[Instance | EntityInstance] = []
        self.scheduled: list[str] = []
        self.saved: list[str] = []
        self.woken = 0
        self.fault: str | None = None
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.delayed = 0

    # live instances
    def track(self, inst: Instance) -> None:
        self.instances[inst.id] = inst

    def untrack(self, instance_id: str) -> None:
        self.instances.pop(instance_id, None)

    def is_live(self, inst: Instance) -> bool:
        return self.instances.get(inst.id) is inst

    def forget_all(self) -> None:
        self.instances.clear()
        self.ready.clear()

    def store_failed(self, exc: BaseException) -> None:
        self.store.rollback()
        self.deferred.clear()
        self.fault = str(exc)

    def still_failing(self, exc: BaseException) -> None:
        self.fault = str(exc)

    def healed(self) -> None:
        self.fault = None

    # scheduling
    def schedule(self, inst: Instance) -> None:
        self.scheduled.append(inst.id)

    def make_ready(self, item: Instance | EntityInstance) -> None:
        self.ready.append(item)

    @property
    def has_ready(self) -> bool:
        return bool(self.ready)

    def pop_ready(self) -> Instance | EntityInstance | None:
        return self.ready.pop(0) if self.ready else None

    def wake_dispatcher(self) -> None:
        self.woken += 1

    async def wait_for_ready(self) -> None:
        await asyncio.sleep(0)

    def deliver(self, instance_id: str, message: Message) -> None:
        self.instances[instance_id].inbox.append(message)

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        inbox_id = self.store.insert_inbox(target.id, execution_id, h.render(ev))
        target.inbox.append(Message(ev, execution_id, inbox_id=inbox_id))
        self.schedule(target)

    # transactions
    def require_started(self) -> None:
        pass

    def add_waiter(self, instance_id: str) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def remove_waiter(self, instance_id: str, fut: asyncio.Future[None]) -> None:
        pass

    def defer(self, callback: Callable[[], None]) -> None:
        self.deferred.append(callback)

    def take_deferred(self) -> list[Callable[[], None]]:
        taken, self.deferred = self.deferred, []
        return taken

    def commit_deferred(self) -> None:
        """Run what the last transaction deferred, as a commit does."""
        for callback in self.take_deferred():
            callback()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.store.begin()
        yield
        self.store.commit()
        self.commit_deferred()

    # history and rows
    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        inst.texts.extend(e if isinstance(e, str) else h.render(e) for e in [*new_events, *decided])

    def save(self, inst: Instance) -> None:
        self.saved.append(inst.status)


class FakeWork:
    """A work sink and timer arming that record what a part hands them."""

    def __init__(self) -> None:
        self.queued: list[Work] = []
        self.armed: list[tuple[str, int, float]] = []

    def enqueue(self, work: Work) -> None:
        self.queued.append(work)

    def drop_queued(self) -> None:
        self.queued.clear()

    def arm(self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str) -> None:
        self.armed.append((inst.id, seq, fire_at))


class FakeEndings:
    """How executions end, recorded."""

    def __init__(self, core: FakeCore) -> None:
        self.core = core
        self.ended: list[tuple[str, str, Any]] = []

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
        inst.status = status
        self.core.untrack(inst.id)
        self.ended.append((inst.id, status, output))

    def continue_as_new(
        self, inst: Instance, input_text: Any, new_events: Sequence[dict[str, Any] | str], d: Decisions, ts: str
    ) -> None:
        self.ended.append((inst.id, "ContinuedAsNew", input_text))

    def fail_now(self, inst: Instance, message: str) -> None:
        self.finish(inst, [], [], "Failed", message, TS)


class FakeEntities:
    """Operations sent to entities, recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send_op(self, entity_id: str, request: dict[str, Any]) -> None:
        self.sent.append((entity_id, request))
