"""The dispatcher: runs ready instances in committed slices, heals after store faults, recovers at start."""

from __future__ import annotations

import asyncio
import json
import time

from devhost.durable.engine.core import HEAL_FIRST_S, HEAL_MAX_S, SLICE_BUDGET_S, STORE_ERRORS, log
from devhost.durable.engine.remote import RemoteEpisodes
from devhost.durable.engine.state import EntityInstance, Message, Work, cancel_handles
from devhost.durable.statuses import RUNNING_STATES
from devhost.functions.logs import held_output


class Dispatcher(RemoteEpisodes):
    """The dispatcher: runs ready instances in committed slices, heals after store faults, recovers at start."""

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
            self._enqueue_work(Work(work_id, instance_id, execution_id, seq, name, input_text))
        stale_timers: list[int] = []
        for timer_id, instance_id, execution_id, seq, fire_at, fire_text in store.timers():
            owner = self._instances.get(instance_id)
            if owner is None or owner.execution_id != execution_id or owner.open.get(seq) != "t":
                stale_timers.append(timer_id)
                continue
            self.timers.arm(owner, execution_id, seq, timer_id, fire_at, fire_text)
        if stale_work or stale_timers:
            store.begin()
            store.delete_activities(stale_work)
            store.delete_timers(stale_timers)
            store.commit()
        for inst in self._instances.values():
            if not inst.texts or inst.inbox:
                self._schedule(inst)
        self._recover_entities()

    async def _dispatch_loop(self) -> None:
        event = self._ready_event
        assert event is not None
        backoff = HEAL_FIRST_S
        while True:
            if self._fault is not None:
                await asyncio.sleep(backoff)
                backoff = HEAL_FIRST_S if self._heal() else min(backoff * 2, HEAL_MAX_S)
                continue
            if not self._ready and not self._remote_done:
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

    def _heal(self) -> bool:
        """Probe the store; when it writes again, reload the in-memory state from it as a start does."""
        try:
            self._store.probe_write()
        except STORE_ERRORS as exc:
            self._fault = f"{type(exc).__name__}: {exc}"
            return False
        # Memory may hold changes of transactions that were rolled back: drop it all and reload.
        for inst in self._instances.values():
            cancel_handles(inst)
        self._instances.clear()
        self._entities.clear()
        self._ready.clear()
        self._remote_done.clear()  # answers to episodes of the dropped instances: offered again after the reload
        self._delayed = 0
        queue = self._work_queue
        while queue is not None and not queue.empty():
            queue.get_nowait()  # recovery queues every pending activity again from the store
        self.workers.clear()  # and offers remote work again
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
            self._apply_remote_answers()  # gRPC workers' answers to episodes, in this slice's commit
            while ready:
                inst = ready.popleft()
                inst.queued = False
                if isinstance(inst, EntityInstance):
                    if self._is_remote_entity(inst.name):
                        self._remote_entity_episode(inst)  # handed to a gRPC worker; completed later
                    else:
                        self._entity_episode(inst)  # never raises but for store errors: operation errors are results
                    if time.perf_counter() >= deadline:
                        break
                    continue
                try:
                    if inst.remote:
                        self._remote_episode(inst)  # handed to a gRPC worker; completed later
                    else:
                        self._episode(inst)
                except STORE_ERRORS:
                    raise  # the whole slice is rolled back; the dispatcher heals
                except Exception as exc:  # an engine bug must not take other instances down
                    log.exception("Internal error while running an episode of instance %s", inst.id)
                    self.endings.fail_now(inst, f"devhost internal error: {type(exc).__name__}: {exc}")
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
