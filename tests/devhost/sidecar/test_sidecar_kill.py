"""kill -9 of devhost while a gRPC worker runs activities, timers and a fan-out: nothing lost, nothing run twice
after its result was committed (a step in flight at the kill may run again: at-least-once, as for the JSON host)."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from durabletask import client, entities

from tests.devhost.hostproc import DevHostProcess
from tests.devhost.sidecar import samples
from tests.devhost.sidecar.conftest import runs, start_worker

pytestmark = pytest.mark.slow

N = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_runs(runs_dir: Path, prefix: str, count: int, host: DevHostProcess) -> None:
    for _ in range(1200):
        if len([r for r in runs(runs_dir, "slow_step") if r.startswith(prefix)]) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} '{prefix}' steps ran:\n{host.output()}")


def _wait_completion(c: client.TaskHubGrpcClient, instance_id: str) -> client.OrchestrationState | None:
    """Wait for completion; right after a restart gRPC may still be backing off from the refused connections."""
    for _ in range(120):
        try:
            return c.wait_for_orchestration_completion(instance_id, timeout=180)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.5)
    raise AssertionError("the gRPC endpoint stayed unavailable after the restart")


def test_kill_during_sequence_timer_and_fan_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    monkeypatch.setenv(samples.RUNS_DIR_ENV, str(runs_dir))
    app = tmp_path / "app"
    app.mkdir()
    port = _free_port()
    host = DevHostProcess(app, tmp_path / "data", no_auth=True, extra_args=["--grpc-port", str(port)])
    host.start()
    address = f"127.0.0.1:{port}"
    w = start_worker(address)
    try:
        c = client.TaskHubGrpcClient(host_address=address)
        instance_id = c.schedule_new_orchestration(samples.crash_orchestrator, input=N, instance_id="crash-1")
        start_at = datetime.now(UTC) + timedelta(seconds=3)  # a scheduled start the kills must not lose or advance
        later = c.schedule_new_orchestration(samples.sequence, instance_id="later-1", start_at=start_at)
        counter = entities.EntityInstanceId("counter", "crash")
        for _ in range(5):
            c.signal_entity(counter, "add", 1)
        c.signal_entity(counter, "add", 10, signal_time=start_at)  # a scheduled signal across the kills
        _wait_runs(runs_dir, "s", 3, host)
        host.kill()  # in the middle of the sequence
        host.restart()
        _wait_runs(runs_dir, "f", 1, host)  # past the timer, in the fan-out
        host.kill()
        host.restart()
        state = _wait_completion(c, instance_id)
        assert state is not None and state.runtime_status == client.OrchestrationStatus.COMPLETED, host.output()
        expected = [f"S{i}" for i in range(N)] + [f"F{i}" for i in range(N)]
        assert json.loads(state.serialized_output or "") == expected
        scheduled = _wait_completion(c, later)
        assert scheduled is not None and scheduled.runtime_status == client.OrchestrationStatus.COMPLETED
        for _ in range(600):  # the scheduled signal is due at start_at
            meta = c.get_entity(counter)
            if meta is not None and meta.get_state(int) == 15:
                break
            time.sleep(0.05)
        assert meta is not None and meta.get_state(int) == 15, meta  # each signal ran exactly once
        events = c.get_orchestration_history(later)
        first = next(e for e in events if type(e).__name__ == "OrchestratorStartedEvent")
        assert first.timestamp >= start_at - timedelta(milliseconds=1), (first.timestamp, start_at)
    finally:
        w.stop()
        host.stop()
    counts = Counter(runs(runs_dir, "slow_step"))
    assert set(counts) == {f"s{i}" for i in range(N)} | {f"f{i}" for i in range(N)}  # nothing lost
    assert max(counts.values()) <= 2, counts
    # In the sequence only the step in flight at the kill (its result not yet committed) may run twice.
    assert sum(1 for i in range(N) if counts[f"s{i}"] == 2) <= 1, counts
