"""In-memory engine state: an instance, its pending messages and work items, one episode's decisions."""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from devhost.durable import history as h
from devhost.durable.store_schema import InstanceRow
from devhost.functions import ids
from devhost.functions.model import (
    InvalidRequest,
)

_BAD_ID_CHARS = re.compile(r"[/\\#?\x00-\x1f\x7f-\x9f]")


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
class Decisions:
    """What one episode decided, applied after the orchestrator ran."""

    events: list[dict[str, Any]] = field(default_factory=list)
    work: list[tuple[int, str, str | None]] = field(default_factory=list)
    timers: list[tuple[int, float, str]] = field(default_factory=list)
    children: list[tuple[int, str, str, str | None, str | None]] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    # Operations for entities: (entity id "@name@key", request message).
    entity_ops: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(slots=True)
class EntityOp:
    """One operation sent to an entity: its request message and the store row that persists it."""

    op_id: int
    request: dict[str, Any]


class EntityInstance:
    """An entity with operations waiting: they run one batch at a time, in the order they were sent."""

    __slots__ = ("id", "name", "key", "queue", "queued", "flight", "lock")

    def __init__(self, entity_id: str) -> None:
        self.id = entity_id
        self.name, self.key = split_entity_id(entity_id)
        self.queue: deque[EntityOp] = deque()
        self.queued = False
        # Its batch in flight at a gRPC worker, while there is one (devhost.durable.engine.remote.workers.EntityFlight).
        self.flight: Any = None
        # The critical section holding it (a gRPC orchestration's lock_entities): its "held" op, kept in the store.
        self.lock: EntityOp | None = None


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
        "remote",
        "flight",
        "not_before",
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
        # Run by an external worker over the gRPC sidecar protocol (devhost.grpc), not by the app's functions;
        # its episode in flight at such a worker, while there is one (devhost.durable.engine.remote.workers.Flight).
        self.remote = False
        self.flight: Any = None
        # A scheduled start: the first episode runs no earlier than this (epoch seconds; 0: at once).
        self.not_before = 0.0

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
        self.not_before = 0.0

    def estate(self) -> str:
        """Serialised engine bookkeeping for the current execution.

        The same text as ``h.dumps({"n": next_seq, "m": mapped, "o": open, "r": roots, "rm": rmap,
        "g": generation, "s": started_at})`` (plus ``"x": true`` for a remote instance, ``"b"`` for a scheduled
        start), but the mapped-actions list (which grows with the history) is only serialised for entries added
        since the last call.
        """
        extra = ',"x":true' if self.remote else ""
        if self.not_before:
            extra += f',"b":{h.dumps(self.not_before)}'
        return (
            f'{{"n":{h.dumps(self.next_seq)},"m":[{self._mapped_json()}],"o":{h.dumps(self.open)},'
            f'"r":{h.dumps(self.roots)},"rm":{h.dumps(self.rmap)},"g":{h.dumps(self.generation)},'
            f'"s":{h.dumps(self.started_at)}{extra}}}'
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
        self.remote = bool(data.get("x", False))
        self.not_before = float(data.get("b", 0.0))

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


def entity_id_of(name: str, key: str) -> str:
    """The extension's scheduler id of an entity: ``@name@key``, the name lower-cased."""
    if not name:
        raise InvalidRequest("Invalid entity id: entity name must not be a null or empty string.")
    return f"@{name.lower()}@{key}"


def split_entity_id(entity_id: str) -> tuple[str, str]:
    """(name, key) of an ``@name@key`` id; the key may hold '@' (the name ends at the second '@')."""
    at = entity_id.find("@", 1)
    if not entity_id.startswith("@") or at < 2:
        raise InvalidRequest(f"'{entity_id}' is not an entity id of the form @name@key.")
    return entity_id[1:at], entity_id[at + 1 :]


def validate_instance_id(instance_id: str) -> None:
    """Raise InvalidRequest unless the id follows the extension's rules."""
    if not instance_id or len(instance_id) > 256 or instance_id.startswith("@") or _BAD_ID_CHARS.search(instance_id):
        raise InvalidRequest(
            f"Instance ID '{instance_id}' is invalid: it must be 1-256 characters, must not start with '@' and "
            "must not contain '/', '\\', '#', '?' or control characters."
        )


def parse_json_text(text: str | None) -> Any:
    """A stored JSON text as a value (non-JSON text as itself); None stays None."""
    return None if text is None else h.parse_json_or_text(text)


def cancel_handles(inst: Instance) -> None:
    """Cancel an instance's pending timer and wake-up callbacks on the event loop."""
    for handle in inst.timer_handles.values():
        handle.cancel()
    inst.timer_handles.clear()
    if inst.wake_handle is not None:
        inst.wake_handle.cancel()
        inst.wake_handle = None
