"""The durable orchestration engine for one loaded app and task hub: its parts, wired in one place."""

from __future__ import annotations

import asyncio
from pathlib import Path

from devhost.durable.accel import install_sdk_accelerations
from devhost.durable.engine.activities import ActivityRunner
from devhost.durable.engine.core import EngineCore, log
from devhost.durable.engine.dispatch import Dispatcher
from devhost.durable.engine.endings import Endings
from devhost.durable.engine.entities import Entities
from devhost.durable.engine.episodes.actions import ActionHandlers
from devhost.durable.engine.episodes.replay import Episodes
from devhost.durable.engine.management import Management
from devhost.durable.engine.recovery import Recovery
from devhost.durable.engine.remote.entities import RemoteEntities
from devhost.durable.engine.remote.orchestrations import RemoteEpisodes
from devhost.durable.engine.remote.workers import ExternalWorkers
from devhost.durable.engine.rewind import Rewinder
from devhost.durable.engine.timers import DurableTimers
from devhost.durable.sessions import OrchestratorSessions, sdk_supported
from devhost.functions.logs import install_log_context
from devhost.functions.model import LoadedApp


class Engine:
    """The durable orchestration engine for one loaded app and task hub.

    Each concern is a part of its own, which reaches the others only through the protocol it names (its
    ``...Site`` and the small interfaces beside it); this constructor is the one place that wires them. The
    client API is the parts' own methods, published here under the engine's names.
    """

    def __init__(
        self, app: LoadedApp, data_dir: Path, *, synchronous: str = "NORMAL", reset_store: bool = False
    ) -> None:
        self._reset_store = reset_store
        self._tasks: list[asyncio.Task[None]] = []
        core = self.core = EngineCore(app, data_dir, synchronous=synchronous)
        self.app, self.hub_name, self.db_path = app, core.hub_name, core.db_path
        # Episodes, activities and entity batches of remote instances, for workers of the gRPC sidecar protocol.
        workers = self.workers = ExternalWorkers()
        timers = self.timers = DurableTimers(is_live=core.is_live, deliver=core.deliver)
        activities = self.activity_runner = ActivityRunner(core, workers)
        entities = self.entities = Entities(core, workers)
        endings = self.endings = Endings(core)
        actions = self.actions = ActionHandlers(core, entities, activities, timers)
        episodes = self.episodes = Episodes(core, actions, endings, entities, extended_sessions(app))
        remote_entities = self.remote_entities = RemoteEntities(core, entities, workers)
        remote = self.remote = RemoteEpisodes(
            core,
            actions=actions,
            endings=endings,
            entities=entities,
            workers=workers,
            work=activities,
            entity_flights=remote_entities,
        )
        recovery = self.recovery = Recovery(
            core,
            work=activities,
            timers=timers,
            entities=entities,
            drop_on_reload=(remote.drop_answers, workers.clear, episodes.clear_sessions),
        )
        self.dispatcher = Dispatcher(
            core,
            episodes=episodes,
            remote=remote,
            entities=entities,
            remote_entities=remote_entities,
            endings=endings,
            recovery=recovery,
        )
        management = self.management = Management(
            core, entities=entities, endings=endings, activities=activities, workers=workers
        )
        rewinder = Rewinder(core, actions)

        # The client API (the extension's DurableClient operations, the entity client, the gRPC sidecar's).
        self.attach_client = activities.attach_client
        self.start_instance = management.start_instance
        self.get_status = management.get_status
        self.wait_for_completion = management.wait_for_completion
        self.wait_for_idle = management.wait_for_idle
        self.query = management.query
        self.query_rows = management.query_rows
        self.raise_event = management.raise_event
        self.terminate = management.terminate
        self.suspend = management.suspend
        self.resume = management.resume
        self.restart = management.restart
        self.purge = management.purge
        self.purge_by = management.purge_by
        self.instance_row = management.instance_row
        self.history_events = management.history_events
        self.rewind = rewinder.rewind
        self.signal_entity = entities.signal_entity
        self.entity_record = entities.entity_record
        self.entity_records = entities.entity_records
        self.read_entity_state = entities.read_entity_state
        self.list_entities = entities.list_entities
        self.purge_entity = entities.purge
        self.complete_remote_orchestration = remote.complete_remote_orchestration
        self.complete_remote_activity = remote.complete_remote_activity
        self.abandon_remote = remote.abandon_remote
        self.release_worker = remote.release_worker
        self.complete_remote_entity = remote_entities.complete_remote_entity
        self.release_orphaned_locks = remote_entities.release_orphaned_locks

    # ----- figures for tests and benchmarks --------------------------------------------------

    @property
    def store_fault(self) -> str | None:
        """Why the durable store cannot write right now, or None when it works."""
        return self.core.fault

    @property
    def store_faults(self) -> int:
        """How often the store entered the fault state."""
        return self.core.store_faults

    @property
    def episodes_run(self) -> int:
        """Orchestrator episodes run (replayed here, or handed to a gRPC worker)."""
        return self.episodes.episodes_run + self.remote.episodes_run

    @property
    def activities_run(self) -> int:
        """Activity executions started here, plus results of gRPC workers' activities."""
        return self.activity_runner.activities_run + self.remote.activities_run

    @property
    def entity_batches_run(self) -> int:
        """Entity batches run (here, or handed to a gRPC worker)."""
        return self.entities.batches_run + self.remote_entities.batches_run

    # ----- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, recover pending work and start dispatching."""
        core = self.core
        if core.started:
            return
        install_log_context()
        install_sdk_accelerations()
        loop = asyncio.get_running_loop()
        core.open(loop, reset=self._reset_store)
        self._reset_store = False  # a reset applies to this start only
        self.timers.bind(loop)
        self.activity_runner.open()
        self.recovery.recover()
        core.mark_started()
        self._tasks.append(asyncio.create_task(self.dispatcher.run(), name="devhost-orchestrations"))
        for i in range(self.app.host.max_concurrent_activities):
            self._tasks.append(asyncio.create_task(self.activity_runner.worker(), name=f"devhost-activity-{i}"))
        log.info(
            "Durable task hub '%s' ready (%s, %d instances in flight).",
            self.hub_name,
            self.db_path,
            len(core.instances),
        )

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop taking work, let running activities finish (up to ``grace_s``), persist and close."""
        core = self.core
        if not core.started:
            return
        core.begin_stopping()
        await self._stop_tasks(grace_s)
        self.dispatcher.drain()
        self.workers.clear()  # what remote workers held stays in the store and is offered after the next start
        core.close()
        self.activity_runner.close()
        self._tasks.clear()
        self.entities.clear()
        self.remote.drop_answers()
        log.info("Durable task hub '%s' stopped.", self.hub_name)

    def synchronous_level(self) -> str:
        """The SQLite ``synchronous`` level the started engine commits with (NORMAL, FULL, ...)."""
        self.core.require_started()
        return self.core.store.synchronous_level()

    async def _stop_tasks(self, grace_s: float) -> None:
        """Cancel the dispatcher and let the activity workers finish what they run, up to ``grace_s``."""
        dispatcher, workers = self._tasks[0], self._tasks[1:]
        dispatcher.cancel()
        # Queued (not started) activities stay in the store and re-run on the next start.
        self.activity_runner.stop_workers(len(workers))
        _done, pending = await asyncio.wait(workers, timeout=grace_s) if workers else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(dispatcher, *workers, return_exceptions=True)


def extended_sessions(app: LoadedApp) -> OrchestratorSessions | None:
    """The extended sessions host.json asks for (``extendedSessionsEnabled``), or None."""
    host = app.host
    if not host.extended_sessions:
        return None
    if not sdk_supported():
        log.warning(
            "host.json extendedSessionsEnabled: this azure-functions-durable version is not one devhost checked "
            "sessions against; every episode replays the whole history instead."
        )
        return None
    log.info(
        "Extended sessions on: orchestrators stay in memory between episodes (idle timeout %d s).",
        host.extended_session_idle_timeout_s,
    )
    return OrchestratorSessions(idle_timeout_s=float(host.extended_session_idle_timeout_s))
