"""The durabletask SDK's examples and client calls, unchanged, against devhost's gRPC endpoint."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from durabletask import client

from tests.devhost.hostproc import DevHostProcess
from tests.devhost.sidecar import samples

pytestmark = pytest.mark.slow

WAIT_S = 120


def _done(c: client.TaskHubGrpcClient, instance_id: str) -> client.OrchestrationState:
    state = c.wait_for_orchestration_completion(instance_id, timeout=WAIT_S)
    assert state is not None
    return state


def test_activity_sequence(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.sequence)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    assert json.loads(state.serialized_output or "") == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    assert state.name == "sequence"


def test_fan_out_fan_in(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.fanout_orchestrator, input=30)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    assert json.loads(state.serialized_output or "") == sum(range(30))


def test_human_interaction_approved(dt_client: client.TaskHubGrpcClient) -> None:
    order = samples.Order(2000, "MyProduct", 1)
    instance_id = dt_client.schedule_new_orchestration(samples.purchase_order_workflow, input=order)
    dt_client.wait_for_orchestration_start(instance_id, timeout=WAIT_S)
    approval_event = samples.Approval("Me")
    dt_client.raise_orchestration_event(instance_id, "approval_received", data=approval_event)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    # Completed at once, though its 24-hour timer is still open: the sidecar protocol ends on the worker's word.
    assert json.loads(state.serialized_output or "") == "Approved by 'Me'"


def test_human_interaction_auto_approved(dt_client: client.TaskHubGrpcClient) -> None:
    cheap = dt_client.schedule_new_orchestration(samples.purchase_order_workflow, input=samples.Order(10, "p", 1))
    assert json.loads(_done(dt_client, cheap).serialized_output or "") == "Auto-approved"


def test_sub_orchestrations_fan_out(dt_client: client.TaskHubGrpcClient, sidecar_host: DevHostProcess) -> None:
    groups = [["a", "bb"], ["ccc"], ["dddd", "e", "ff"]]
    instance_id = dt_client.schedule_new_orchestration(samples.parent_orchestrator, input=groups)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    assert json.loads(state.serialized_output or "") == {"total": 13, "parts": [3, 3, 7]}
    # The children are instances of their own, with their parent.
    children = dt_client.get_all_orchestration_states(
        client.OrchestrationQuery(created_time_from=None, fetch_inputs_and_outputs=True)
    )
    mine = [s for s in children if s.name == "child_orchestrator" and s.instance_id.startswith(instance_id)]
    assert sorted(json.loads(s.serialized_output or "") for s in mine) == [3, 3, 7]


def test_durable_timer(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.timer_orchestrator, input=1.0)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    assert json.loads(state.serialized_output or "") >= 1.0


def test_activity_failure_uncaught_fails_with_details(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.failing_orchestrator, input="boom")
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.FAILED
    assert state.failure_details is not None
    assert "boom" in state.failure_details.message
    assert state.failure_details.error_type == "durabletask.task.TaskFailedError"


def test_activity_failure_caught_and_retried(dt_client: client.TaskHubGrpcClient) -> None:
    caught = dt_client.schedule_new_orchestration(samples.catching_orchestrator, input="bad input")
    assert json.loads(_done(dt_client, caught).serialized_output or "") == "caught: bad input"
    retried = dt_client.schedule_new_orchestration(samples.retry_orchestrator, input="again")
    assert json.loads(_done(dt_client, retried).serialized_output or "") == "gave up"


def test_continue_as_new(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.counter_orchestrator, input=3)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED, state.failure_details
    assert json.loads(state.serialized_output or "") == "done"


def test_custom_status_event_and_management_api(
    dt_client: client.TaskHubGrpcClient, sidecar_host: DevHostProcess
) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.waiting_orchestrator, instance_id="wait-1")
    assert instance_id == "wait-1"
    for _ in range(600):
        state = dt_client.get_orchestration_state(instance_id)
        if state is not None and state.serialized_custom_status:
            break
        time.sleep(0.05)
    assert state is not None and json.loads(state.serialized_custom_status or "") == {"stage": "waiting"}
    # The Durable HTTP management API sees the gRPC instance as it sees the JSON-protocol ones.
    resp = httpx.get(f"{sidecar_host.base_url}/runtime/webhooks/durabletask/instances/{instance_id}", timeout=10)
    assert resp.status_code == 202
    assert resp.json()["runtimeStatus"] == "Running"
    assert resp.json()["customStatus"] == {"stage": "waiting"}
    dt_client.raise_orchestration_event(instance_id, "go", data={"n": 1})
    state = _done(dt_client, instance_id)
    assert json.loads(state.serialized_output or "") == {"n": 1}
    assert json.loads(state.serialized_custom_status or "") == {"stage": "done"}
    listed = httpx.get(f"{sidecar_host.base_url}/runtime/webhooks/durabletask/instances", timeout=10).json()
    assert any(item["instanceId"] == instance_id and item["runtimeStatus"] == "Completed" for item in listed)


def test_start_twice_is_refused(dt_client: client.TaskHubGrpcClient) -> None:
    dt_client.schedule_new_orchestration(samples.waiting_orchestrator, instance_id="dup-1")
    with pytest.raises(Exception, match="already exists"):
        dt_client.schedule_new_orchestration(samples.waiting_orchestrator, instance_id="dup-1")
    dt_client.terminate_orchestration("dup-1")


def test_suspend_resume_terminate_purge(dt_client: client.TaskHubGrpcClient) -> None:
    instance_id = dt_client.schedule_new_orchestration(samples.waiting_orchestrator)
    dt_client.wait_for_orchestration_start(instance_id, timeout=WAIT_S)
    dt_client.suspend_orchestration(instance_id)
    state = dt_client.get_orchestration_state(instance_id)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.SUSPENDED
    dt_client.raise_orchestration_event(instance_id, "go", data="held")  # held while suspended
    time.sleep(0.5)
    state = dt_client.get_orchestration_state(instance_id)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.SUSPENDED
    dt_client.resume_orchestration(instance_id)
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED
    assert json.loads(state.serialized_output or "") == "held"

    other = dt_client.schedule_new_orchestration(samples.waiting_orchestrator)
    dt_client.wait_for_orchestration_start(other, timeout=WAIT_S)
    assert dt_client.purge_orchestration(other).deleted_instance_count == 0  # still running: kept
    dt_client.terminate_orchestration(other, output="stopped by test")
    state = _done(dt_client, other)
    assert state.runtime_status == client.OrchestrationStatus.TERMINATED
    assert json.loads(state.serialized_output or "") == "stopped by test"
    assert dt_client.purge_orchestration(other).deleted_instance_count == 1
    assert dt_client.get_orchestration_state(other) is None


def test_query_and_purge_by_filter(dt_client: client.TaskHubGrpcClient) -> None:
    ids = [dt_client.schedule_new_orchestration(samples.sequence, instance_id=f"q-{i}") for i in range(3)]
    for instance_id in ids:
        _done(dt_client, instance_id)
    states = dt_client.get_all_orchestration_states(
        client.OrchestrationQuery(runtime_status=[client.OrchestrationStatus.COMPLETED])
    )
    assert {s.instance_id for s in states} >= set(ids)
    assert all(s.runtime_status == client.OrchestrationStatus.COMPLETED for s in states)
    result = dt_client.purge_orchestrations_by(runtime_status=[client.OrchestrationStatus.COMPLETED])
    assert result.deleted_instance_count >= 3
    assert all(dt_client.get_orchestration_state(i) is None for i in ids)


def test_unknown_instance(dt_client: client.TaskHubGrpcClient) -> None:
    assert dt_client.get_orchestration_state("no-such-instance") is None
    with pytest.raises(Exception, match="No instance"):
        dt_client.raise_orchestration_event("no-such-instance", "go")


def test_rewind_restart_history_and_ids(dt_client: client.TaskHubGrpcClient, tmp_path: Path) -> None:
    marker = tmp_path / "fixed"
    instance_id = dt_client.schedule_new_orchestration(samples.flaky_orchestrator, input=str(marker))
    failed = _done(dt_client, instance_id)
    assert failed.runtime_status == client.OrchestrationStatus.FAILED
    marker.touch()
    dt_client.rewind_orchestration(instance_id, reason="fixed it")
    state = None
    for _ in range(600):  # the rewind re-runs the failed step only
        state = dt_client.get_orchestration_state(instance_id)
        if state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED:
            break
        time.sleep(0.05)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, state
    assert json.loads(state.serialized_output or "") == ["Hello before!", "fixed"]
    kinds = [type(e).__name__ for e in dt_client.get_orchestration_history(instance_id)]
    assert kinds.count("TaskScheduledEvent") == 2 and "TaskFailedEvent" not in kinds, kinds
    again = dt_client.restart_orchestration(instance_id, restart_with_new_instance_id=True)
    assert again != instance_id
    assert json.loads(_done(dt_client, again).serialized_output or "") == ["Hello before!", "fixed"]
    page = dt_client.list_instance_ids(runtime_status=[client.OrchestrationStatus.COMPLETED])
    assert {instance_id, again} <= set(page.items)


def test_http_api_starts_a_grpc_workers_orchestration(
    dt_client: client.TaskHubGrpcClient, sidecar_host: DevHostProcess
) -> None:
    url = f"{sidecar_host.base_url}/runtime/webhooks/durabletask/orchestrators/sequence/http-started"
    resp = httpx.post(url, timeout=10)
    assert resp.status_code == 202, resp.text
    state = _done(dt_client, "http-started")
    assert json.loads(state.serialized_output or "") == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    unknown = httpx.post(f"{sidecar_host.base_url}/runtime/webhooks/durabletask/orchestrators/nobody", timeout=10)
    assert unknown.status_code == 202  # no worker knows it: the worker that takes it fails it, as the sidecar does
    failed = _done(dt_client, unknown.json()["id"])
    assert failed.runtime_status == client.OrchestrationStatus.FAILED
    assert failed.failure_details is not None and "nobody" in failed.failure_details.message


def test_send_event_between_orchestrations(dt_client: client.TaskHubGrpcClient) -> None:
    waiting = dt_client.schedule_new_orchestration(samples.waiting_orchestrator, instance_id="receiver-1")
    dt_client.wait_for_orchestration_start(waiting, timeout=WAIT_S)
    sender = dt_client.schedule_new_orchestration(samples.sender_orchestrator, input=waiting, instance_id="sender-1")
    assert json.loads(_done(dt_client, sender).serialized_output or "") == "sent"
    assert json.loads(_done(dt_client, waiting).serialized_output or "") == {"from": "sender-1"}


def test_scheduled_start(dt_client: client.TaskHubGrpcClient) -> None:
    start_at = datetime.now(UTC) + timedelta(seconds=2)
    instance_id = dt_client.schedule_new_orchestration(samples.sequence, start_at=start_at)
    state = dt_client.get_orchestration_state(instance_id)
    assert state is not None and state.runtime_status == client.OrchestrationStatus.PENDING
    state = _done(dt_client, instance_id)
    assert state.runtime_status == client.OrchestrationStatus.COMPLETED
    # Not before its time: the history's first OrchestratorStarted is at or after start_at.
    events = dt_client.get_orchestration_history(instance_id)
    first = next(e for e in events if type(e).__name__ == "OrchestratorStartedEvent")
    assert first.timestamp >= start_at - timedelta(milliseconds=1), (first.timestamp, start_at)
