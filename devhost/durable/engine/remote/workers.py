"""Work for external workers (the Durable Task gRPC sidecar protocol): what waits, and what a worker holds.

The engine offers orchestration episodes (``Flight``) and activities (``Work``) of remote instances here
once the transaction that made them is committed; a worker stream takes them one at a time and completes
them by token. Nothing here is durable: what a worker holds is also in the store (inbox, activity and
timer rows), so after a crash or a lost worker the engine offers it again.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devhost.durable.engine.state import EntityOp, Message, Work


@dataclass(slots=True)
class Flight:
    """One episode of a remote orchestration, handed to a worker: the history so far and the new events."""

    token: str
    instance_id: str
    name: str
    version: str | None
    execution_id: str
    batch: list[Message]
    past: list[str]  # stored history texts (JSON) before this episode
    new_events: list[dict[str, Any]]  # OrchestratorStarted, ExecutionStarted on the first episode, the batch
    ts: str
    ts_epoch: float


@dataclass(slots=True)
class EntityFlight:
    """One batch of a remote entity's operations, handed to a worker with the entity's state."""

    token: str
    entity_id: str
    batch: list[EntityOp]
    state: str | None
    existed: bool


Item = Flight | Work | EntityFlight


def token_of(item: Item) -> str:
    """The completion token a worker gets with an item."""
    return f"a:{item.work_id}" if isinstance(item, Work) else item.token


# Which items a worker stream takes (its work item filters); None: every item.
Accepts = Callable[[Item], bool] | None


class ExternalWorkers:
    """Queues of remote work and the items connected workers hold, by completion token."""

    def __init__(self) -> None:
        self._orchestrations: deque[Flight] = deque()
        self._activities: deque[Work] = deque()
        self._entity_batches: deque[EntityFlight] = deque()
        self._held: dict[str, tuple[int, Item]] = {}
        # One wake-up per open stream: an offer wakes every stream, each looks for an item it accepts.
        self._streams: dict[int, tuple[asyncio.Event, Accepts]] = {}
        self._tokens = itertools.count(1)
        self._stream_ids = itertools.count(1)
        # Set while a gRPC endpoint serves this engine: entities without a function in the app are then remote.
        self.enabled = False

    @property
    def connected(self) -> int:
        """Open worker streams."""
        return len(self._streams)

    def new_token(self, instance_id: str) -> str:
        """A fresh token for an orchestration episode or entity batch."""
        return f"o:{next(self._tokens)}:{instance_id}"

    def new_stream(self, accepts: Accepts = None) -> int:
        """An id for a worker stream that takes items (``take``) and gives back what it held (``release``)."""
        stream = next(self._stream_ids)
        self._streams[stream] = (asyncio.Event(), accepts)
        return stream

    def _wake(self) -> None:
        for event, _accepts in self._streams.values():
            event.set()

    def offer_orchestration(self, flight: Flight) -> None:
        """Queue an episode for the next worker."""
        self._orchestrations.append(flight)
        self._wake()

    def offer_activity(self, work: Work) -> None:
        """Queue an activity for the next worker."""
        self._activities.append(work)
        self._wake()

    def offer_entity(self, flight: EntityFlight) -> None:
        """Queue an entity batch for the next worker."""
        self._entity_batches.append(flight)
        self._wake()

    def take(self, stream: int) -> Item | None:
        """The next item a stream accepts (episodes, entity batches, activities), now held by it; None if none."""
        event, accepts = self._streams[stream]
        event.clear()
        item: Item | None = None
        for queue in (self._orchestrations, self._entity_batches, self._activities):
            item = _take_from(queue, accepts)  # type: ignore[arg-type]
            if item is not None:
                self._held[token_of(item)] = (stream, item)
                return item
        return None

    async def wait(self, stream: int) -> None:
        """Until something was offered since the stream last looked."""
        await self._streams[stream][0].wait()

    def claim(self, token: str) -> Item | None:
        """The held item a completion names, no longer held; None for an unknown or already used token."""
        entry = self._held.pop(token, None)
        return entry[1] if entry is not None else None

    def release(self, stream: int) -> list[Item]:
        """What a closed stream still held (so the engine can offer it again)."""
        self._streams.pop(stream, None)
        tokens = [token for token, (owner, _item) in self._held.items() if owner == stream]
        return [self._held.pop(token)[1] for token in tokens]

    def clear(self) -> None:
        """Forget everything (the engine reloads from the store and offers again)."""
        self._orchestrations.clear()
        self._activities.clear()
        self._entity_batches.clear()
        self._held.clear()

    def waiting(self) -> int:
        """Items queued and not yet taken."""
        return len(self._orchestrations) + len(self._activities) + len(self._entity_batches)


def _take_from(queue: deque[Item], accepts: Accepts) -> Item | None:
    if not queue:
        return None
    if accepts is None:
        return queue.popleft()
    for index, item in enumerate(queue):
        if accepts(item):
            del queue[index]
            return item
    return None
