"""Durable entities over the gRPC protocol: the SDK's function-based entity example, client signal/get/query."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from durabletask import client, entities, worker

from tests.devhost.hostproc import DevHostProcess
from tests.devhost.sidecar import entity_samples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dt_worker(address: str) -> Iterator[worker.TaskHubGrpcWorker]:
    """A worker with the function-based counter example registered."""
    w = worker.TaskHubGrpcWorker(host_address=address)
    w.add_orchestrator(entity_samples.counter_orchestrator)
    w.add_orchestrator(entity_samples.failing_call_orchestrator)
    w.add_orchestrator(entity_samples.locking_orchestrator)
    w.add_orchestrator(entity_samples.read_modify_write_orchestrator)
    w.add_orchestrator(entity_samples.lock_and_wait_orchestrator)
    w.add_entity(entity_samples.counter)
    w.start()
    try:
        yield w
    finally:
        w.stop()


def test_function_based_entity_example(dt_client: client.TaskHubGrpcClient, sidecar_host: DevHostProcess) -> None:
    instance_id = dt_client.schedule_new_orchestration(entity_samples.counter_orchestrator)
    state = dt_client.wait_for_orchestration_completion(instance_id, timeout=120)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert json.loads(state.serialized_output or "") == 1
    # The entity's state is in the store: the client reads it, and so does the Durable HTTP API.
    meta = dt_client.get_entity(entities.EntityInstanceId("counter", "myCounter"), include_state=True)
    assert meta is not None and meta.get_state(int) == 1
    resp = httpx.get(f"{sidecar_host.base_url}/runtime/webhooks/durabletask/entities/counter/myCounter", timeout=10)
    assert resp.status_code == 200 and resp.json() == 1


def test_failed_operation_reaches_the_caller(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(entity_samples.failing_call_orchestrator)
    state = dt_client.wait_for_orchestration_completion(instance_id, timeout=120)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert "Unknown operation 'multiply'" in json.loads(state.serialized_output or "")


def test_client_signal_get_and_query(dt_client: client.TaskHubGrpcClient) -> None:
    entity_id = entities.EntityInstanceId("counter", "signalled")
    dt_client.signal_entity(entity_id, "set", 40)
    for _ in range(3):
        dt_client.signal_entity(entity_id, "add", 1)
    meta = None
    for _ in range(600):
        meta = dt_client.get_entity(entity_id, include_state=True)
        if meta is not None and meta.get_state(int) == 43:
            break
        time.sleep(0.05)
    assert meta is not None and meta.get_state(int) == 43, meta
    found = dt_client.get_all_entities(client.EntityQuery(instance_id_starts_with="@counter@sig", include_state=True))
    assert [(str(m.id), m.get_state(int)) for m in found] == [("@counter@signalled", 43)]
    assert dt_client.get_entity(entities.EntityInstanceId("counter", "never-used")) is None


def test_entity_locking_example(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(entity_samples.locking_orchestrator)
    state = dt_client.wait_for_orchestration_completion(instance_id, timeout=120)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert json.loads(state.serialized_output or "") == 1


def test_critical_sections_exclude_each_other(dt_client: client.TaskHubGrpcClient) -> None:
    ids = [
        dt_client.schedule_new_orchestration(entity_samples.read_modify_write_orchestrator, input=3) for _ in range(3)
    ]
    # A client's signal during the critical sections waits for the lock, then runs.
    dt_client.signal_entity(entities.EntityInstanceId("counter", "pair-a"), "add", 100)
    for instance_id in ids:
        state = dt_client.wait_for_orchestration_completion(instance_id, timeout=120)
        assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    a = dt_client.get_entity(entities.EntityInstanceId("counter", "pair-a"))
    b = dt_client.get_entity(entities.EntityInstanceId("counter", "pair-b"))
    assert a is not None and b is not None
    assert (a.get_state(int), b.get_state(int)) == (109, 9)  # no increment lost, the signal counted once


def test_orphaned_lock_is_released_by_clean(dt_client: client.TaskHubGrpcClient) -> None:
    orphan = entities.EntityInstanceId("counter", "orphan")
    holder = dt_client.schedule_new_orchestration(entity_samples.lock_and_wait_orchestrator)
    for _ in range(1200):  # until the holder is inside its critical section
        kinds = [type(e).__name__ for e in dt_client.get_orchestration_history(holder)]
        if "EntityLockGrantedEvent" in kinds:
            break
        time.sleep(0.05)
    assert "EntityLockGrantedEvent" in kinds
    dt_client.terminate_orchestration(holder)
    dt_client.wait_for_orchestration_completion(holder, timeout=120)
    dt_client.signal_entity(orphan, "add", 7)
    time.sleep(1.0)  # give the signal a chance to run (it must not)
    assert dt_client.get_entity(orphan) is None  # the signal waits behind the terminated holder's lock
    assert dt_client.clean_entity_storage().orphaned_locks_released == 1
    meta = None
    for _ in range(600):
        meta = dt_client.get_entity(orphan)
        if meta is not None:
            break
        time.sleep(0.05)
    assert meta is not None and meta.get_state(int) == 7
