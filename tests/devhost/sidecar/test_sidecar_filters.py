"""Work item filters (examples/work_item_filtering.py): each worker gets only the work it registered."""

from __future__ import annotations

import json

import pytest
from durabletask import client, worker

from tests.devhost.sidecar import samples

pytestmark = pytest.mark.slow


def test_two_workers_with_filters_share_one_orchestration(address: str) -> None:
    orchestrations = worker.TaskHubGrpcWorker(host_address=address)
    orchestrations.add_orchestrator(samples.two_worker_orchestrator)
    orchestrations.add_activity(samples.hello)
    orchestrations.use_work_item_filters()
    counting = worker.TaskHubGrpcWorker(host_address=address)
    counting.add_activity(samples.count_word)
    counting.use_work_item_filters()
    orchestrations.start()
    counting.start()
    try:
        c = client.TaskHubGrpcClient(host_address=address)
        ids = [c.schedule_new_orchestration(samples.two_worker_orchestrator, input=w) for w in ("ab", "cde", "f")]
        outputs = []
        for instance_id in ids:
            state = c.wait_for_orchestration_completion(instance_id, timeout=120)
            assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
            outputs.append(json.loads(state.serialized_output or ""))
        assert outputs == [["Hello ab!", 2], ["Hello cde!", 3], ["Hello f!", 1]]
    finally:
        orchestrations.stop()
        counting.stop()
