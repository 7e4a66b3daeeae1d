"""Start-up listing and graceful shutdown of real devhost processes (app: tests/apps/http_client)."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DEFAULT_KEYS


def test_startup_lists_durable_functions_and_endpoints(devhost_factory: HostFactory) -> None:
    host = devhost_factory("http_client")
    out = host.output()
    assert "        greet: activityTrigger\n" in out
    assert "        greet_chain: orchestrationTrigger\n" in out
    assert (
        f"        client_start: [POST] http://127.0.0.1:{host.port}/api/client/start/{{name}}/{{instance_id?}}" in out
    )
    assert "task hub 'ClientHub'" in out
    assert f"management API: http://127.0.0.1:{host.port}/runtime/webhooks/durabletask/" in out
    assert "local RPC endpoint (loopback, no key): http://127.0.0.1:" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_lets_in_flight_requests_finish_and_exits_zero(
    devhost_factory: HostFactory, sig: signal.Signals
) -> None:
    host = devhost_factory("http_client")
    start = host.client.post("/api/client/start/wait_approval")
    assert start.status_code == 202
    instance_id = start.json()["id"]
    host.wait_status(instance_id, {"Running"})
    result: dict[str, httpx.Response] = {}

    def slow_call() -> None:
        # waits on the orchestration from inside an HTTP trigger, so the request is in flight at the signal
        result["resp"] = httpx.post(
            f"{host.base_url}/api/client/wait/nap_chain",
            json=1.0,
            params={"timeout_ms": "20000", "interval_ms": "100"},
            timeout=60,
        )

    caller = threading.Thread(target=slow_call)
    caller.start()
    deadline = time.monotonic() + 30
    while "Executing 'Functions.nap'" not in host.output() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "Executing 'Functions.nap'" in host.output()
    code = host.stop(sig=sig)
    caller.join(60)
    assert code == 0
    assert result["resp"].status_code == 200
    assert result["resp"].json() == [1.0, "Hello after nap!"]
    out = host.output()
    assert f"Received {sig.name}, shutting down" in out
    assert "Host stopped." in out
    assert "Unclosed client session" not in out
    assert "Traceback" not in out


def test_pending_work_survives_a_graceful_stop_and_finishes_after_restart(devhost_factory: HostFactory) -> None:
    host = devhost_factory("http_client", grace_s=0.2)
    resp = host.client.post(
        "/runtime/webhooks/durabletask/orchestrators/nap_chain",
        params={"code": DEFAULT_KEYS.system},
        json={"seconds": 2.0},
    )
    assert resp.status_code == 202
    instance_id = resp.json()["id"]
    host.wait_status(instance_id, {"Running"})
    deadline = time.monotonic() + 30
    while "Executing 'Functions.nap'" not in host.output() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert host.stop() == 0
    host.start()
    final = host.wait_status(instance_id)
    assert final["runtimeStatus"] == "Completed"
    assert final["output"] == [2.0, "Hello after nap!"]
