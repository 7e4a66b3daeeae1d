"""The engine's core and its driving parts one by one: core, dispatcher, recovery, management, rewind."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.durable import history as h
from devhost.durable.engine.core import EngineCore, StoreUnavailable
from devhost.durable.engine.dispatch import Dispatcher
from devhost.durable.engine.management import Management
from devhost.durable.engine.recovery import Recovery
from devhost.durable.engine.rewind import Rewinder
from devhost.durable.engine.state import Decisions, EntityInstance, Instance, Message
from devhost.functions.model import HostConfig, InstanceAlreadyExists, InvalidRequest, LoadedApp, PreconditionFailed
from tests.devhost.engine_fakes import TS, FakeCore, FakeEndings, FakeWork, close_fakes, function

# ----- EngineCore ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _closed_stores() -> Iterator[None]:
    yield
    close_fakes()


@pytest.fixture
def core(tmp_path: Path) -> Iterator[EngineCore]:
    loop = asyncio.new_event_loop()
    core = EngineCore(LoadedApp(root=tmp_path, host=HostConfig(), functions=[]), tmp_path)
    core.open(loop, reset=False)
    core.mark_started()
    yield core
    core.close()
    loop.close()


def test_core_runs_deferred_work_only_after_a_commit_and_refuses_while_the_store_fails(core: EngineCore) -> None:
    ran: list[str] = []
    with core.transaction():
        core.defer(lambda: ran.append("after"))
        assert ran == []
    assert ran == ["after"]
    with pytest.raises(ValueError), core.transaction():
        core.defer(lambda: ran.append("rolled back"))
        raise ValueError("no")
    with pytest.raises(StoreUnavailable), core.transaction():
        raise sqlite3.OperationalError("disk I/O error")
    assert core.fault == "OperationalError: disk I/O error" and core.store_faults == 1
    with pytest.raises(StoreUnavailable), core.transaction():
        pass
    assert ran == ["after"]


def test_core_delivers_to_the_current_execution_only_and_holds_a_suspended_instance(core: EngineCore) -> None:
    inst = Instance("i1", "orch", None, None, 0.0)
    inst.texts.append("{}")
    core.track(inst)
    core.deliver("i1", Message(h.event(h.EVENT_RAISED, TS, Name="old"), "another-execution"))
    assert not inst.inbox and not core.has_ready
    inst.status = "Suspended"
    core.deliver("i1", Message(h.event(h.EVENT_RAISED, TS, Name="held"), None))
    assert len(inst.inbox) == 1 and not core.has_ready
    inst.status = "Running"
    core.schedule(inst)
    assert core.pop_ready() is inst and inst.queued


# ----- Dispatcher ----------------------------------------------------------------------------


class _Episodes:
    """Episodes that record what they ran; ``broken`` ones raise, as an engine bug would."""

    def __init__(self, core: FakeCore, broken: str = "") -> None:
        self.core, self.broken = core, broken
        self.ran: list[str] = []

    def run(self, inst: Instance) -> None:
        if inst.id == self.broken:
            raise KeyError("bug")
        if inst.id == "disk":
            raise sqlite3.OperationalError("disk full")
        self.ran.append(inst.id)
        self.core.defer(lambda: self.ran.append(f"{inst.id} dispatched"))


class _Remote:
    has_answers = False

    def __init__(self) -> None:
        self.ran: list[str] = []

    def episode(self, inst: Instance) -> None:
        self.ran.append(inst.id)

    def apply_answers(self) -> None:
        pass


class _EntityRunner:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def is_remote(self, name: str) -> bool:
        return name == "far"

    def episode(self, ent: EntityInstance) -> None:
        self.ran.append(ent.id)


class _Healer:
    def heal(self) -> bool:
        return True


def _dispatcher(core: FakeCore, episodes: _Episodes) -> tuple[Dispatcher, _Remote, _EntityRunner, FakeEndings]:
    remote, entities, endings = _Remote(), _EntityRunner(), FakeEndings(core)
    dispatcher = Dispatcher(
        core,
        episodes=episodes,
        remote=remote,
        entities=entities,
        remote_entities=entities,
        endings=endings,
        recovery=_Healer(),
    )
    return dispatcher, remote, entities, endings


def test_a_slice_runs_each_kind_of_ready_item_and_dispatches_after_its_commit(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    episodes = _Episodes(core, broken="bad")
    dispatcher, remote, entities, endings = _dispatcher(core, episodes)
    local, bad, far = (Instance(name, "o", None, None, 0) for name in ("local", "bad", "r"))
    far.remote = True
    for inst in (local, bad, far):
        core.track(inst)
    for item in (local, bad, far, EntityInstance("@near@1"), EntityInstance("@far@1")):
        core.make_ready(item)
    dispatcher.run_slice(dispatch=True)
    assert episodes.ran == ["local", "local dispatched"] and remote.ran == ["r"]
    assert entities.ran == ["@near@1", "@far@1"]
    [(failed, status, message)] = endings.ended  # an engine bug fails that instance only
    assert (failed, status) == ("bad", "Failed") and "KeyError" in message


def test_a_slice_that_hits_a_store_error_is_rolled_back_whole(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    episodes = _Episodes(core)
    dispatcher, *_ = _dispatcher(core, episodes)
    for name in ("first", "disk"):
        core.make_ready(Instance(name, "o", None, None, 0))
    with pytest.raises(sqlite3.OperationalError):
        dispatcher.run_slice(dispatch=True)
    assert episodes.ran == ["first"] and not core.store.in_tx  # nothing of the slice was dispatched


# ----- Recovery ------------------------------------------------------------------------------


def _stored(core: FakeCore, instance_id: str, *, history: bool = True) -> Instance:
    inst = Instance(instance_id, "orch", None, None, 0.0)
    inst.status = "Running"
    inst.open[0] = "a"
    core.store.insert_instance(inst.row())
    core.save(inst)
    core.store.update_instance(
        inst.id,
        execution_id=inst.execution_id,
        status="Running",
        input_text=None,
        output=None,
        custom_status=None,
        updated=0.0,
        estate=inst.estate(),
    )
    if history:
        core.store.append_history(inst.id, 0, [h.render(h.event(h.ORCHESTRATOR_STARTED, TS))])
    return inst


class _Entities:
    def __init__(self) -> None:
        self.recovered, self.cleared = 0, 0

    def recover(self) -> None:
        self.recovered += 1

    def clear(self) -> None:
        self.cleared += 1


def test_recovery_loads_what_is_in_flight_and_drops_stale_rows(tmp_path: Path) -> None:
    core, work, entities = FakeCore(tmp_path), FakeWork(), _Entities()
    inst = _stored(core, "i1")
    core.store.insert_activity("i1", inst.execution_id, 0, "act", None)  # its open task: queued again
    core.store.insert_activity("i1", inst.execution_id, 9, "old", None)  # a closed task: deleted
    core.store.insert_timer("gone", "x", 1, 0.0, TS)  # of no instance in flight: deleted
    _stored(core, "fresh", history=False)
    Recovery(core, work=work, timers=work, entities=entities).recover()
    assert set(core.instances) == {"i1", "fresh"} and [w.name for w in work.queued] == ["act"]
    assert len(core.store.activities()) == 1 and core.store.timers() == []
    assert core.scheduled == ["fresh"] and entities.recovered == 1  # i1 has nothing to deliver yet


def test_healing_waits_while_the_store_fails_then_reloads_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core, work, entities = FakeCore(tmp_path), FakeWork(), _Entities()
    dropped: list[str] = []
    recovery = Recovery(core, work=work, timers=work, entities=entities, drop_on_reload=[lambda: dropped.append("x")])
    core.fault = "disk full"

    def fail() -> None:
        raise sqlite3.OperationalError("still full")

    monkeypatch.setattr(core.store, "probe_write", fail)
    assert not recovery.heal() and core.fault == "still full" and dropped == []
    monkeypatch.undo()
    _stored(core, "i1")
    core.track(Instance("phantom", "orch", None, None, 0.0))  # memory of a rolled-back transaction
    assert recovery.heal() and core.fault is None
    assert set(core.instances) == {"i1"} and dropped == ["x"] and entities.cleared == 1


# ----- Management ----------------------------------------------------------------------------


class _Idle:
    def idle(self) -> bool:
        return True


class _Presence:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled


class _NoEntities:
    def status(self, entity_id: str, show_input: bool) -> None:
        return None

    def rows(self, **kwargs: object) -> list[tuple[str, str | None, float]]:
        return []

    async def purge(self, entity_id: str) -> int:
        return 0


def _management(core: FakeCore, *, workers: bool = False) -> Management:
    return Management(
        core, entities=_NoEntities(), endings=FakeEndings(core), activities=_Idle(), workers=_Presence(workers)
    )


def test_management_starts_known_orchestrations_refuses_duplicates_and_routes_unknown_ones(tmp_path: Path) -> None:
    core = FakeCore(tmp_path, [function("orch", "orchestrator", lambda c: c)])
    management = _management(core)
    assert asyncio.run(management.start_instance("orch", "a", "1")) == "a"
    assert core.scheduled == ["a"] and core.store.get_instance("a") is not None
    with pytest.raises(InstanceAlreadyExists):
        asyncio.run(management.start_instance("orch", "a", None))
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        asyncio.run(management.start_instance("orch", "b", "{"))
    with pytest.raises(InvalidRequest, match="doesn't exist"):
        asyncio.run(management.start_instance("elsewhere", "c", None))
    served = _management(core, workers=True)
    asyncio.run(served.start_instance("elsewhere", "c", None))  # a gRPC worker runs it
    assert core.instances["c"].remote


def test_management_holds_events_while_suspended_and_resumes_before_them(tmp_path: Path) -> None:
    core = FakeCore(tmp_path, [function("orch", "orchestrator", lambda c: c)])
    management = _management(core)

    async def run() -> list[int]:
        await management.start_instance("orch", "a", None)
        core.instances["a"].status = "Running"
        await management.suspend("a", "wait")
        await management.raise_event("a", "go", "1")
        await management.resume("a", "on")
        return [m.event["EventType"] for m in core.instances["a"].inbox]

    assert asyncio.run(run()) == [h.EXECUTION_SUSPENDED, h.EXECUTION_RESUMED, h.EVENT_RAISED]
    assert core.saved == ["Suspended", "Pending"]  # no episode ran yet: resumed to Pending


# ----- Rewinder ------------------------------------------------------------------------------


class _Decisions:
    """Who persists the decisions of a rewind, recorded."""

    def __init__(self) -> None:
        self.persisted: list[Decisions] = []

    def persist_decisions(self, inst: Instance, d: Decisions) -> None:
        self.persisted.append(d)


def _failed(core: FakeCore) -> Instance:
    inst = Instance("f1", "orch", None, None, 0.0)
    inst.status = "Failed"
    core.store.insert_instance(inst.row())
    core.store.update_instance(
        inst.id,
        execution_id=inst.execution_id,
        status="Failed",
        input_text=None,
        output='"boom"',
        custom_status=None,
        updated=0.0,
        estate=inst.estate(),
    )
    events = [
        h.event(h.ORCHESTRATOR_STARTED, TS),
        h.event(h.TASK_SCHEDULED, TS, 0, Name="act", Version="", Input="1"),
        h.event(h.ORCHESTRATOR_COMPLETED, TS),
        h.event(h.TASK_FAILED, TS, TaskScheduledId=0, Reason="boom", Details=""),
        h.event(h.EXECUTION_COMPLETED, TS, 1, OrchestrationStatus=3, Result='"boom"'),
    ]
    core.store.append_history(inst.id, 0, [h.render(e) for e in events])
    return inst


def test_rewind_reopens_the_failed_task_runs_it_again_and_replays_after_the_commit(tmp_path: Path) -> None:
    core, decisions = FakeCore(tmp_path), _Decisions()
    _failed(core)
    asyncio.run(Rewinder(core, decisions).rewind("f1", "try again"))
    inst = core.instances["f1"]
    assert inst.status == "Running" and inst.open == {0: "a"} and inst.output_text is None
    kept = [json.loads(t)["EventType"] for t in core.store.history("f1")]
    assert h.TASK_FAILED not in kept and h.EXECUTION_COMPLETED not in kept
    [d] = decisions.persisted
    assert d.work == [(0, "act", "1")]
    [marker] = list(inst.inbox)
    assert marker.event["Data"] == "Rewound: try again"
    assert core.scheduled == ["f1"]  # scheduled once the rewind's transaction committed


def test_rewind_refuses_an_instance_that_did_not_fail(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    _stored(core, "running")
    with pytest.raises(PreconditionFailed, match="Only failed instances can be rewound"):
        asyncio.run(Rewinder(core, _Decisions()).rewind("running", None))
