"""The engine's entity parts one by one, each over a small fake site: entities, and remote entity batches with locks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devhost.durable import history as h
from devhost.durable.engine.entities import Entities, entity_request
from devhost.durable.engine.remote.entities import RemoteEntities
from devhost.durable.engine.remote.workers import EntityFlight, Item
from devhost.durable.engine.state import Instance
from tests.devhost.engine_fakes import TS, FakeCore, close_fakes, function


@pytest.fixture(autouse=True)
def _closed_stores() -> Iterator[None]:
    yield
    close_fakes()


class _Workers:
    """The gRPC sidecar's queues as the entity parts see them, recorded."""

    def __init__(self, *, enabled: bool = False) -> None:
        self.enabled = enabled
        self.offered: list[EntityFlight] = []

    def new_token(self, instance_id: str) -> str:
        return f"t{len(self.offered)}"

    def offer_entity(self, flight: EntityFlight) -> None:
        self.offered.append(flight)

    def claim(self, token: str) -> Item | None:
        return next((f for f in self.offered if f.token == token), None)


def _counter(request_text: str) -> str:
    request = json.loads(request_text)
    state = json.loads(request["state"]) if request["state"] else 0
    results = []
    for op in request["batch"]:
        if op["name"] == "boom":
            raise ValueError("boom")
        state += json.loads(op["input"])
        results.append({"result": json.dumps(state)})
    return json.dumps({"entityExists": True, "entityState": json.dumps(state), "results": results})


def _caller(core: FakeCore) -> Instance:
    inst = Instance("caller", "orch", None, None, 0.0)
    core.track(inst)
    return inst


def _call(inst: Instance, operation: str, value: int) -> dict[str, object]:
    request = entity_request(operation, json.dumps(value), signal=False, ts=TS, parent=inst.id)
    request["parentExecution"] = inst.execution_id
    return request


def test_operations_persist_run_as_one_batch_and_answer_the_caller(tmp_path: Path) -> None:
    core = FakeCore(tmp_path, [function("counter", "entity", _counter)])
    entities = Entities(core, _Workers())
    caller = _caller(core)
    with core.transaction():
        entities.send_op("@counter@k", _call(caller, "add", 2))
        entities.send_op("@counter@k", _call(caller, "add", 3))
    ent = entities.get("@counter@k")
    assert ent is not None and core.ready == [ent]  # scheduled once the sends committed
    assert core.store.pending_entity_ops("@counter@k") == 2
    core.store.begin()
    entities.episode(ent)
    core.store.commit()
    found = core.store.get_entity("@counter@k")
    assert found is not None and found[0] == "5"
    assert core.store.pending_entity_ops("@counter@k") == 0 and "@counter@k" not in entities
    replies = [json.loads(m.event["Input"])["result"] for m in caller.inbox]
    assert replies == ["2", "5"] and core.scheduled == ["caller", "caller"] and entities.batches_run == 1


def test_a_failing_entity_call_fails_every_operation_and_keeps_the_state(tmp_path: Path) -> None:
    core = FakeCore(tmp_path, [function("counter", "entity", _counter)])
    entities = Entities(core, _Workers())
    caller = _caller(core)
    with core.transaction():
        entities.send_op("@counter@k", _call(caller, "boom", 1))
    ent = entities.get("@counter@k")
    assert ent is not None
    core.store.begin()
    entities.episode(ent)
    core.store.commit()
    [reply] = [json.loads(m.event["Input"]) for m in caller.inbox]
    assert reply["exceptionType"] == "Error" and "boom" in reply["result"]
    assert core.store.get_entity("@counter@k") is None


def test_an_entity_the_app_lacks_runs_at_a_worker_only_while_workers_are_served(tmp_path: Path) -> None:
    core = FakeCore(tmp_path, [function("counter", "entity", _counter)])
    assert not Entities(core, _Workers()).is_remote("elsewhere")
    served = Entities(core, _Workers(enabled=True))
    assert served.is_remote("elsewhere") and not served.is_remote("counter")


def _lock(inst: Instance, section: str, lock_set: list[str]) -> dict[str, object]:
    return {
        "lock": section,
        "lockSet": lock_set,
        "position": 0,
        "parent": inst.id,
        "parentExecution": inst.execution_id,
    }


def test_a_lock_holds_the_entity_for_its_critical_section_until_the_unlock(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    workers = _Workers(enabled=True)
    entities = Entities(core, workers)
    remote = RemoteEntities(core, entities, workers)
    holder, other = _caller(core), Instance("other", "orch", None, None, 0.0)
    core.track(other)
    with core.transaction():
        entities.send_op("@acc@1", _lock(holder, "cs", ["@acc@1"]))
        entities.send_op("@acc@1", _call(other, "add", 1))  # another caller: waits for the section to end
        entities.send_op("@acc@1", _call(holder, "add", 5))
    ent = entities.get("@acc@1")
    assert ent is not None
    core.store.begin()
    remote.episode(ent)
    core.store.commit()
    [granted] = list(holder.inbox)
    assert granted.event["EventType"] == h.EVENT_RAISED and granted.event["EntityLockGranted"] is True
    core.commit_deferred()
    [flight] = workers.offered
    assert [op.request["parent"] for op in flight.batch] == ["caller"]  # only the holder's operation runs
    remote.complete_remote_entity(flight.token, [('"5"', None)], '"5"', [])
    assert ent.lock is not None and [op.request["parent"] for op in ent.queue] == ["other"]
    with core.transaction():
        entities.send_op("@acc@1", {"unlock": "cs", "parent": holder.id})
    core.store.begin()
    remote.episode(ent)
    core.store.commit()
    assert ent.lock is None


def test_a_batch_a_worker_gave_back_is_queued_again_in_order(tmp_path: Path) -> None:
    core = FakeCore(tmp_path)
    workers = _Workers(enabled=True)
    entities = Entities(core, workers)
    remote = RemoteEntities(core, entities, workers)
    caller = _caller(core)
    with core.transaction():
        entities.send_op("@acc@2", _call(caller, "add", 1))
        entities.send_op("@acc@2", _call(caller, "add", 2))
    ent = entities.get("@acc@2")
    assert ent is not None
    core.store.begin()
    remote.episode(ent)
    core.store.commit()
    core.commit_deferred()
    [flight] = workers.offered
    assert not ent.queue and ent.flight is flight
    remote.offer_again(flight)
    assert ent.flight is None and [json.loads(op.request["input"]) for op in ent.queue] == [1, 2]
