"""The SDK's class-based entity example with entity actions (signal another entity, start an orchestration)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from durabletask import client, worker

from tests.devhost.sidecar import entity_samples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dt_worker(address: str) -> Iterator[worker.TaskHubGrpcWorker]:
    """A worker with the class-based example registered (its own host: the example's entity is also 'counter')."""
    w = worker.TaskHubGrpcWorker(host_address=address)
    w.add_orchestrator(entity_samples.class_counter_orchestrator)
    w.add_orchestrator(entity_samples.hello_orchestrator)
    w.add_entity(entity_samples.Counter)
    w.start()
    try:
        yield w
    finally:
        w.stop()


def test_class_based_entity_actions_example(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(entity_samples.class_counter_orchestrator)
    state = dt_client.wait_for_orchestration_completion(instance_id, timeout=120)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert json.loads(state.serialized_output or "") == 1  # parentCounter, set by a signal from myCounter
    # The entity started hello_orchestrator, which ran on the same worker.
    hellos = [
        s
        for s in dt_client.get_all_orchestration_states(client.OrchestrationQuery(fetch_inputs_and_outputs=True))
        if s.name == "hello_orchestrator"
    ]
    assert len(hellos) == 1
    done = dt_client.wait_for_orchestration_completion(hellos[0].instance_id, timeout=120)
    assert done is not None and json.loads(done.serialized_output or "") == "Hello world!"
