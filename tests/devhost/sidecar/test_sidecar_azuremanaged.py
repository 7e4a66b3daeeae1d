"""The Durable Task Scheduler SDK (durabletask-azuremanaged) in its local, unauthenticated form against devhost."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from durabletask import client
from durabletask.azuremanaged.client import DurableTaskSchedulerClient
from durabletask.azuremanaged.worker import DurableTaskSchedulerWorker

from tests.devhost.sidecar import samples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dts_worker(address: str) -> Iterator[DurableTaskSchedulerWorker]:
    """A scheduler worker (emulator form: http endpoint, no credential) with the samples registered."""
    w = DurableTaskSchedulerWorker(
        host_address=f"http://{address}", secure_channel=False, taskhub="default", token_credential=None
    )
    for fn in samples.ORCHESTRATORS:
        w.add_orchestrator(fn)
    for act in samples.ACTIVITIES:
        w.add_activity(act)
    w.start()
    try:
        yield w
    finally:
        w.stop()


def test_scheduler_client_and_worker(address: str, dts_worker: DurableTaskSchedulerWorker) -> None:
    c = DurableTaskSchedulerClient(
        host_address=f"http://{address}", secure_channel=False, taskhub="default", token_credential=None
    )
    instance_id = c.schedule_new_orchestration(samples.fanout_orchestrator, input=5)
    state = c.wait_for_orchestration_completion(instance_id, timeout=120)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert json.loads(state.serialized_output or "") == 10
    sequence = c.schedule_new_orchestration(samples.sequence)
    state = c.wait_for_orchestration_completion(sequence, timeout=120)
    assert state is not None and json.loads(state.serialized_output or "") == [
        "Hello Tokyo!",
        "Hello Seattle!",
        "Hello London!",
    ]
