"""The durable orchestration engine for one loaded app and task hub."""

from __future__ import annotations

import asyncio

from devhost.durable.accel import install_sdk_accelerations
from devhost.durable.engine.core import log
from devhost.durable.engine.management import Management
from devhost.durable.engine.state import cancel_handles
from devhost.durable.statuses import TERMINAL_STATES
from devhost.functions.logs import install_log_context
from devhost.functions.threads import DaemonThreadPool


class Engine(Management):
    """The durable orchestration engine for one loaded app and task hub."""

    async def start(self) -> None:
        """Open the store, recover pending work and start dispatching."""
        if self._started:
            return
        install_log_context()
        install_sdk_accelerations()
        self._loop = asyncio.get_running_loop()
        self.timers.bind(self._loop)
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
            self._tasks.append(asyncio.create_task(self.activity_runner.worker(), name=f"devhost-activity-{i}"))
        log.info(
            "Durable task hub '%s' ready (%s, %d instances in flight).",
            self.hub_name,
            self.db_path,
            len(self._instances),
        )

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking work, let running activities finish (up to ``grace_s``), persist and close."""
        if not self._started:
            return
        self._stopping = True
        await self._stop_tasks(grace_s)
        self._drain_arrived_results()
        for inst in self._instances.values():
            cancel_handles(inst)
        self._delayed = 0
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
        self.workers.clear()  # what remote workers held stays in the store and is offered after the next start
        self._store.close()
        if self._pool is not None:
            self._pool.shutdown()
        self._tasks.clear()
        self._instances.clear()
        self._entities.clear()
        self._ready.clear()
        self._started = False
        log.info("Durable task hub '%s' stopped.", self.hub_name)

    def synchronous_level(self) -> str:
        """The SQLite ``synchronous`` level the started engine commits with (NORMAL, FULL, ...)."""
        self._require_started()
        return self._store.synchronous_level()

    async def _stop_tasks(self, grace_s: float) -> None:
        """Cancel the dispatcher and let the activity workers finish what they run, up to ``grace_s``."""
        assert self._work_queue is not None
        dispatcher, workers = self._tasks[0], self._tasks[1:]
        dispatcher.cancel()
        # Queued (not started) activities stay in the store and re-run on the next start.
        while not self._work_queue.empty():
            self._work_queue.get_nowait()
        for _ in workers:
            self._work_queue.put_nowait(None)
        _done, pending = await asyncio.wait(workers, timeout=grace_s) if workers else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(dispatcher, *workers, return_exceptions=True)

    def _drain_arrived_results(self) -> None:
        """Persist results that already arrived, so finished activities need not re-run.

        New work those episodes schedule is only written to the store (it runs after the next start).
        """
        try:
            for _ in range(1000 if self._fault is None else 0):
                for inst in self._instances.values():
                    if inst.inbox and not inst.queued and inst.status not in TERMINAL_STATES | {"Suspended"}:
                        inst.queued = True
                        self._ready.append(inst)
                if not self._ready and not self._remote_done:
                    break
                while self._ready or self._remote_done:
                    self._run_slice(dispatch=False)
        except Exception:
            log.exception("Persisting the last results on shutdown failed; affected activities will re-run.")
