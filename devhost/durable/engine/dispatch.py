"""The dispatcher: runs ready instances and entities in committed slices, and heals after store faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from devhost.durable.engine.core import HEAL_FIRST_S, HEAL_MAX_S, SLICE_BUDGET_S, STORE_ERRORS, log
from devhost.durable.engine.state import EntityInstance, Instance
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import Store
from devhost.functions.logs import held_output


class DispatchSite(Protocol):
    """What the dispatcher needs of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def fault(self) -> str | None:
        """Why the durable store cannot write right now, or None when it works."""

    @property
    def has_ready(self) -> bool:
        """Whether an instance or entity waits for the dispatcher."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def pop_ready(self) -> Instance | EntityInstance | None:
        """The next ready item, or None."""

    def make_ready(self, item: Instance | EntityInstance) -> None:
        """Queue an instance or entity for the dispatcher and wake it."""

    async def wait_for_ready(self) -> None:
        """Sleep until ``wake_dispatcher``."""

    def store_failed(self, exc: BaseException) -> None:
        """Enter the fault state: nothing of the failed transaction counts; the dispatcher heals."""

    def take_deferred(self) -> list[Callable[[], None]]:
        """The callbacks of the transaction that just committed, handed over once."""


class EpisodeRunner(Protocol):
    """Who runs an orchestration's episode (``Episodes``, ``RemoteEpisodes``)."""

    def run(self, inst: Instance) -> None:
        """Run the instance's next episode over its pending messages (effects go into the open transaction)."""


class RemoteAnswers(Protocol):
    """Remote episodes (``RemoteEpisodes``): hands episodes to workers, applies their answers in a slice."""

    @property
    def has_answers(self) -> bool:
        """Whether workers' answers wait for the dispatcher's next slice."""

    def episode(self, inst: Instance) -> None:
        """Hand the instance's next episode to a worker (after the slice commits); it waits for the answer."""

    def apply_answers(self) -> None:
        """Apply the answers that arrived since the last slice, inside the slice's transaction."""


class EntityRunner(Protocol):
    """Who runs an entity's next batch (``Entities`` for the app's entities, ``RemoteEntities`` for a worker's)."""

    def is_remote(self, name: str) -> bool:
        """An entity whose function is not in the app runs at a gRPC worker, while an endpoint serves one."""

    def episode(self, ent: EntityInstance) -> None:
        """Run the next batch of an entity's operations; effects go into the open slice transaction."""


class RemoteEntityRunner(Protocol):
    """Who hands an entity's next batch to a worker (``RemoteEntities``)."""

    def episode(self, ent: EntityInstance) -> None:
        """Hand the entity's next batch of operations, with its state, to a worker (after the slice commits)."""


class Failer(Protocol):
    """Who fails an instance outside an episode (``Endings``)."""

    def fail_now(self, inst: Instance, message: str) -> None:
        """Fail an instance outside the normal episode path (unknown orchestrator, engine errors)."""


class Healer(Protocol):
    """Who reloads memory once the store writes again (``Recovery``)."""

    def heal(self) -> bool:
        """Probe the store; when it writes again, reload the in-memory state from it as a start does."""


class Dispatcher:
    """Runs ready instances and entities in committed slices, then dispatches their work; heals after faults."""

    def __init__(
        self,
        site: DispatchSite,
        *,
        episodes: EpisodeRunner,
        remote: RemoteAnswers,
        entities: EntityRunner,
        remote_entities: RemoteEntityRunner,
        endings: Failer,
        recovery: Healer,
    ) -> None:
        self._site = site
        self._episodes = episodes
        self._remote = remote
        self._entities = entities
        self._remote_entities = remote_entities
        self._endings = endings
        self._recovery = recovery

    async def run(self) -> None:
        """The dispatcher loop: a slice whenever something is ready; probe and reload while the store fails."""
        site = self._site
        backoff = HEAL_FIRST_S
        while True:
            if site.fault is not None:
                await asyncio.sleep(backoff)
                backoff = HEAL_FIRST_S if self._recovery.heal() else min(backoff * 2, HEAL_MAX_S)
                continue
            if not site.has_ready and not self._remote.has_answers:
                await site.wait_for_ready()
                continue
            try:
                self.run_slice(dispatch=True)
            except STORE_ERRORS as exc:
                site.store_failed(exc)
            except Exception:
                log.critical("The durable engine failed; stopping orchestration dispatch.", exc_info=True)
                raise
            await asyncio.sleep(0)

    def run_slice(self, *, dispatch: bool) -> None:
        """Run ready episodes for up to SLICE_BUDGET_S, commit them together, then dispatch their work.

        The slice never yields to the event loop, so its log lines are written in one call at its
        end (before any HTTP response the loop sends next). ``dispatch=False``: what the slice scheduled
        stays in the store only (on shutdown).
        """
        with held_output():
            self._run_slice_held(dispatch=dispatch)

    def _run_slice_held(self, *, dispatch: bool) -> None:
        site = self._site
        store = site.store
        store.begin()
        deadline = time.perf_counter() + SLICE_BUDGET_S
        try:
            self._remote.apply_answers()  # gRPC workers' answers to episodes, in this slice's commit
            while (item := site.pop_ready()) is not None:
                item.queued = False
                if isinstance(item, EntityInstance):
                    if self._entities.is_remote(item.name):
                        self._remote_entities.episode(item)  # handed to a gRPC worker; completed later
                    else:
                        self._entities.episode(item)  # never raises but for store errors: operation errors are results
                else:
                    self._orchestration_episode(item)
                if time.perf_counter() >= deadline:
                    break
            store.commit()
        except BaseException:
            store.rollback()
            raise
        after = site.take_deferred()
        if dispatch:
            for callback in after:
                callback()

    def _orchestration_episode(self, inst: Instance) -> None:
        try:
            if inst.remote:
                self._remote.episode(inst)  # handed to a gRPC worker; completed later
            else:
                self._episodes.run(inst)
        except STORE_ERRORS:
            raise  # the whole slice is rolled back; the dispatcher heals
        except Exception as exc:  # an engine bug must not take other instances down
            log.exception("Internal error while running an episode of instance %s", inst.id)
            self._endings.fail_now(inst, f"devhost internal error: {type(exc).__name__}: {exc}")

    def drain(self) -> None:
        """Persist results that already arrived, so finished activities need not re-run (at stop).

        New work those episodes schedule is only written to the store (it runs after the next start).
        """
        site = self._site
        try:
            for _ in range(1000 if site.fault is None else 0):
                for inst in list(site.instances.values()):
                    if inst.inbox and not inst.queued and inst.status not in TERMINAL_STATES | {"Suspended"}:
                        inst.queued = True
                        site.make_ready(inst)
                if not site.has_ready and not self._remote.has_answers:
                    break
                while site.has_ready or self._remote.has_answers:
                    self.run_slice(dispatch=False)
        except Exception:
            log.exception("Persisting the last results on shutdown failed; affected activities will re-run.")
