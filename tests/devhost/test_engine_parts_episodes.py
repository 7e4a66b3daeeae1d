"""The engine's episode parts one by one, each over a small fake site: action handlers, episodes, remote episodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.actions import ActionType
from devhost.durable.engine.episodes.actions import ActionHandlers
from devhost.durable.engine.episodes.replay import Episodes
from devhost.durable.engine.remote.orchestrations import Failure, Outcome, RemoteEpisodes
from devhost.durable.engine.remote.workers import EntityFlight, Flight, Item
from devhost.durable.engine.state import Decisions, Instance, Message, Work
from tests.devhost.engine_fakes import TS, FakeCore, FakeEndings, FakeEntities, FakeWork, close_fakes, function


@pytest.fixture(autouse=True)
def _closed_stores() -> Iterator[None]:
    yield
    close_fakes()


def _noop(x: Any) -> None:
    return None


def _handlers(tmp_path: Path) -> tuple[FakeCore, FakeWork, FakeEntities, ActionHandlers]:
    names = [function("act", "activity", _noop), function("sub", "orchestrator", _noop)]
    core = FakeCore(tmp_path, [*names, function("counter", "entity", _noop)])
    work, entities = FakeWork(), FakeEntities()
    return core, work, entities, ActionHandlers(core, entities, work, work)


def _instance(core: FakeCore, instance_id: str = "i1", name: str = "orch") -> Instance:
    inst = Instance(instance_id, name, None, None, 0.0)
    core.store.insert_instance(inst.row())
    core.track(inst)
    return inst


# ----- ActionHandlers -----------------------------------------------------------------------


def test_handlers_schedule_new_actions_and_persist_them_for_after_the_commit(tmp_path: Path) -> None:
    core, work, entities, handlers = _handlers(tmp_path)
    inst = _instance(core)
    actions = [
        {"actionType": ActionType.CALL_ACTIVITY, "functionName": "act", "input": "1"},
        {"actionType": ActionType.CREATE_TIMER, "fireAt": TS},
        {"actionType": ActionType.SIGNAL_ENTITY, "instanceId": "@counter@k", "operation": "add"},
    ]
    d = Decisions()
    assert handlers.map_actions(inst, actions, d, TS, check_missing=True) is None
    assert inst.open == {0: "a", 1: "t"} and [e["EventType"] for e in d.events] == [
        h.TASK_SCHEDULED,
        h.TIMER_CREATED,
        h.EVENT_SENT,
    ]
    core.store.begin()
    handlers.persist_decisions(inst, d)
    core.store.commit()
    assert work.queued == [] and work.armed == []  # nothing runs before the commit
    assert entities.sent[0][0] == "@counter@k"
    core.commit_deferred()
    assert [w.name for w in work.queued] == ["act"] and [a[1] for a in work.armed] == [1]


def test_handlers_refuse_an_unknown_activity_and_a_replay_that_changed(tmp_path: Path) -> None:
    core, _work, _entities, handlers = _handlers(tmp_path)
    inst = _instance(core)
    unknown = [{"actionType": ActionType.CALL_ACTIVITY, "functionName": "nope"}]
    problem = handlers.map_actions(inst, unknown, Decisions(), TS, check_missing=True)
    assert "The function 'nope' doesn't exist" in str(problem)
    first = [{"actionType": ActionType.CALL_ACTIVITY, "functionName": "act"}]
    assert handlers.map_actions(inst, first, Decisions(), TS, check_missing=True) is None
    changed = [{"actionType": ActionType.CREATE_TIMER, "fireAt": TS}]
    problem = handlers.map_actions(inst, changed, Decisions(), TS, check_missing=True)
    assert problem is not None and "act" in problem


def test_handlers_start_a_child_and_fail_the_parents_task_when_the_id_runs(tmp_path: Path) -> None:
    core, _work, _entities, handlers = _handlers(tmp_path)
    parent = _instance(core)
    _instance(core, "busy", "sub")
    d = Decisions()
    calls = [
        {"actionType": ActionType.CALL_SUB_ORCHESTRATOR, "functionName": "sub", "instanceId": "kid"},
        {"actionType": ActionType.CALL_SUB_ORCHESTRATOR, "functionName": "sub", "instanceId": "busy"},
    ]
    assert handlers.map_actions(parent, calls, d, TS, check_missing=True) is None
    core.store.begin()
    handlers.persist_decisions(parent, d)
    core.store.commit()
    assert core.instances["kid"].parent is not None and "kid" in core.scheduled
    [failed] = list(parent.inbox)
    assert failed.event["EventType"] == h.SUB_ORCHESTRATION_FAILED and failed.event["TaskScheduledId"] == 1


# ----- Episodes ------------------------------------------------------------------------------


class _Actions:
    """The action handlers an episode calls, recorded."""

    def __init__(self) -> None:
        self.mapped: list[list[dict[str, Any]]] = []
        self.persisted = 0

    def map_actions(
        self,
        inst: Instance,
        flat: list[dict[str, Any]],
        d: Decisions,
        ts: str,
        *,
        check_missing: bool,
        new_only: bool = False,
    ) -> str | None:
        self.mapped.append(flat)
        return None

    def persist_decisions(self, inst: Instance, d: Decisions) -> None:
        self.persisted += 1


def _orchestrator(state: dict[str, Any], seen: list[dict[str, Any]]) -> Any:
    def run(context: str) -> str:
        seen.append(json.loads(context))
        return json.dumps(state)

    return run


def test_an_episode_replays_through_the_function_and_ends_when_it_is_done(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    done = {"isDone": True, "output": 42, "actions": [], "customStatus": "almost"}
    core = FakeCore(tmp_path, [function("orch", "orchestrator", _orchestrator(done, seen))])
    endings, actions = FakeEndings(core), _Actions()
    episodes = Episodes(core, actions, endings, FakeEntities())
    inst = _instance(core)
    episodes.run(inst)
    types = [e["EventType"] for e in seen[0]["history"]]
    assert types == [h.ORCHESTRATOR_STARTED, h.EXECUTION_STARTED] and seen[0]["isReplaying"] is False
    assert endings.ended == [("i1", "Completed", 42)] and inst.custom_status_text == '"almost"'
    assert episodes.episodes_run == 1


def test_an_episode_that_waits_appends_and_persists_its_decisions(tmp_path: Path) -> None:
    waiting = {"isDone": False, "actions": [[{"actionType": ActionType.CALL_ACTIVITY, "functionName": "act"}]]}
    core = FakeCore(tmp_path, [function("orch", "orchestrator", _orchestrator(waiting, []))])
    endings, actions = FakeEndings(core), _Actions()
    inst = _instance(core)
    Episodes(core, actions, endings, FakeEntities()).run(inst)
    assert endings.ended == [] and actions.persisted == 1 and inst.status == "Running" and core.saved == ["Running"]
    assert actions.mapped == [[{"actionType": ActionType.CALL_ACTIVITY, "functionName": "act"}]]


def test_an_episode_of_an_unknown_orchestrator_fails_the_instance(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    endings = FakeEndings(core)
    inst = _instance(core, name="gone")
    Episodes(core, _Actions(), endings, FakeEntities()).run(inst)
    [(_id, status, message)] = endings.ended
    assert status == "Failed" and "The function 'gone' doesn't exist" in message


# ----- RemoteEpisodes ------------------------------------------------------------------------


class _Workers:
    """The gRPC sidecar's queues, recorded."""

    def __init__(self) -> None:
        self.offered: list[Flight] = []
        self.claimed: dict[str, Item] = {}
        self.count = 0

    def new_token(self, instance_id: str) -> str:
        self.count += 1
        return f"t{self.count}"

    def offer_orchestration(self, flight: Flight) -> None:
        self.offered.append(flight)
        self.claimed[flight.token] = flight

    def claim(self, token: str) -> Item | None:
        return self.claimed.pop(token, None)

    def release(self, stream: int) -> list[Item]:
        return list(self.claimed.values())


class _EntityFlights:
    def __init__(self) -> None:
        self.back: list[EntityFlight] = []

    def offer_again(self, flight: EntityFlight) -> None:
        self.back.append(flight)


def _remote(tmp_path: Path) -> tuple[FakeCore, _Workers, FakeEndings, FakeWork, RemoteEpisodes]:
    core, workers, work = FakeCore(tmp_path), _Workers(), FakeWork()
    endings = FakeEndings(core)
    remote = RemoteEpisodes(
        core,
        actions=_Actions(),
        endings=endings,
        entities=FakeEntities(),
        workers=workers,
        work=work,
        entity_flights=_EntityFlights(),
    )
    return core, workers, endings, work, remote


def test_a_remote_episode_is_offered_after_the_commit_and_its_answer_applied_in_the_next_slice(tmp_path: Path) -> None:
    core, workers, endings, _work, remote = _remote(tmp_path)
    inst = _instance(core)
    inst.remote = True
    remote.episode(inst)
    assert inst.flight is not None and workers.offered == []
    core.commit_deferred()
    [flight] = workers.offered
    remote.complete_remote_orchestration(flight.token, [], Outcome("Completed", '"ok"'), None)
    assert remote.has_answers and core.woken == 1 and endings.ended == []
    remote.apply_answers()
    assert endings.ended == [("i1", "Completed", "ok")] and inst.flight is None and not remote.has_answers


def test_a_stale_remote_answer_is_dropped_and_a_released_episode_offered_again(tmp_path: Path) -> None:
    core, workers, _endings, _work, remote = _remote(tmp_path)
    inst = _instance(core)
    inst.remote = True
    inst.inbox.append(Message(h.event(h.EVENT_RAISED, TS, Name="go"), None))
    remote.episode(inst)
    core.commit_deferred()
    remote.release_worker(1)  # the worker's stream closed: the episode's messages go back to the inbox
    assert inst.flight is None and len(inst.inbox) == 1 and core.scheduled == ["i1"]
    remote.complete_remote_orchestration("t1", [], Outcome("Completed"), None)  # too late: already claimed
    assert not remote.has_answers


def test_a_remote_activity_result_is_delivered_as_a_message(tmp_path: Path) -> None:
    core, workers, _endings, _work, remote = _remote(tmp_path)
    inst = _instance(core)
    work = Work(7, inst.id, inst.execution_id, 3, "act", None)
    workers.claimed["w"] = work
    remote.complete_remote_activity("w", None, Failure("Boom", "it broke"))
    [message] = list(inst.inbox)
    assert message.event["EventType"] == h.TASK_FAILED and message.event["Reason"] == "it broke"
    assert message.work_id == 7 and remote.activities_run == 1
