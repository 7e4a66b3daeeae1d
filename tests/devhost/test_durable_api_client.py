"""The unchanged SDK DurableOrchestrationClient, called from the app's own HTTP triggers (tests/apps/http_client).

Every client call goes through the host's loopback RPC listener; the check-status links it builds are
followed over the public listener.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DEFAULT_KEYS, DevHostProcess


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("http_client")


def _start(host: DevHostProcess, name: str, body: Any = None, instance_id: str | None = None) -> dict[str, Any]:
    path = f"/api/client/start/{name}" + (f"/{instance_id}" if instance_id else "")
    resp = host.client.post(path, json=body) if body is not None else host.client.post(path)
    assert resp.status_code == 202, resp.text
    return dict(resp.json())


def test_binding_json_and_invocation_correlation(host: DevHostProcess) -> None:
    resp = host.client.get("/api/client/binding", params={"code": DEFAULT_KEYS.function})
    assert resp.status_code == 200
    body = resp.json()
    assert body["taskHubName"] == "ClientHub"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/durabletask/", body["rpcBaseUrl"])
    assert body["rpcBaseUrl"] == host.rpc_base_url()
    assert body["clientData"]["requiredQueryStringParameters"] == f"code={DEFAULT_KEYS.system}"
    assert body["clientData"]["baseUrl"] == f"http://127.0.0.1:{host.port}/runtime/webhooks/durabletask"
    assert body["managementUrls"]["id"] == "INSTANCEID"
    assert body["creationUrls"]["createNewInstancePostUri"].endswith(
        f"/orchestrators/{{functionName}}[/{{instanceId}}]?code={DEFAULT_KEYS.system}"
    )
    assert body["client_invocation_id"] == body["invocation_id"]


def test_start_new_and_check_status_links_work_when_followed(host: DevHostProcess) -> None:
    resp = host.client.post("/api/client/start/greet_chain", json=["Kyiv", "Quito"])
    assert resp.status_code == 202
    payload = resp.json()
    assert resp.headers["location"] == payload["statusQueryGetUri"]
    assert resp.headers["retry-after"] == "10"
    assert set(payload) >= {
        "id",
        "statusQueryGetUri",
        "sendEventPostUri",
        "terminatePostUri",
        "rewindPostUri",
        "purgeHistoryDeleteUri",
        "restartPostUri",
        "suspendPostUri",
        "resumePostUri",
    }
    # the SDK rewrote every link to the origin the caller used
    for key, url in payload.items():
        if key != "id":
            assert url.startswith(
                f"http://127.0.0.1:{host.port}/runtime/webhooks/durabletask/instances/{payload['id']}"
            )
            assert f"code={DEFAULT_KEYS.system}" in url
    host.wait_status(payload["id"])
    status = httpx.get(payload["statusQueryGetUri"])
    assert status.status_code == 200
    assert status.json()["output"] == ["Hello Kyiv!", "Hello Quito!"]
    # client-started input is double-encoded by the SDK, so the status input is JSON text
    assert status.json()["input"] == '["Kyiv", "Quito"]'
    purge = httpx.delete(payload["purgeHistoryDeleteUri"])
    assert purge.status_code == 200
    assert purge.json() == {"instancesDeleted": 1}
    assert httpx.get(payload["statusQueryGetUri"]).status_code == 404


def test_send_event_and_terminate_links(host: DevHostProcess) -> None:
    payload = _start(host, "wait_approval")
    host.wait_status(payload["id"], {"Running"})
    send = httpx.post(payload["sendEventPostUri"].replace("{eventName}", "Approval"), json={"ok": 1})
    assert send.status_code == 202
    assert host.wait_status(payload["id"])["output"] == {"received": {"ok": 1}}

    other = _start(host, "wait_approval")
    host.wait_status(other["id"], {"Running"})
    terminate = httpx.post(other["terminatePostUri"].replace("{text}", "stop%20now"))
    assert terminate.status_code == 202
    final = host.wait_status(other["id"])
    assert final["runtimeStatus"] == "Terminated"
    assert final["output"] == "stop now"


def test_start_new_with_instance_id_and_unknown_orchestrator(host: DevHostProcess) -> None:
    instance_id = f"client-{uuid.uuid4().hex[:8]}"
    assert _start(host, "greet_chain", ["Id"], instance_id)["id"] == instance_id
    host.wait_status(instance_id)
    resp = host.client.post("/api/client/start/not_an_orchestrator")
    assert resp.status_code == 409
    assert "not_an_orchestrator" in resp.json()["error"]


def test_start_new_with_version(host: DevHostProcess) -> None:
    resp = host.client.post("/api/client/start/version_echo", params={"version": "3.1"})
    assert resp.status_code == 202
    assert host.wait_status(resp.json()["id"])["output"] == "3.1"


def test_get_status_flags(host: DevHostProcess) -> None:
    instance_id = _start(host, "greet_chain", ["Flags"])["id"]
    host.wait_status(instance_id)
    plain = host.client.get(f"/api/client/status/{instance_id}").json()
    assert plain["truthy"] is True
    assert plain["runtimeStatus"] == "Completed"
    assert plain["output"] == ["Hello Flags!"]
    assert plain["historyEvents"] is None
    full = host.client.get(
        f"/api/client/status/{instance_id}",
        params={"show_history": "true", "show_history_output": "true", "show_input": "true"},
    ).json()
    assert [e["EventType"] for e in full["historyEvents"]][0] == "ExecutionStarted"
    assert any(e.get("Result") == "Hello Flags!" for e in full["historyEvents"])
    missing = host.client.get("/api/client/status/no-such-instance").json()
    assert missing["truthy"] is False


def test_get_status_all_and_by(host: DevHostProcess) -> None:
    prefix = f"by-{uuid.uuid4().hex[:6]}-"
    done = _start(host, "greet_chain", ["By"], f"{prefix}done")["id"]
    waiting = _start(host, "wait_approval", None, f"{prefix}wait")["id"]
    host.wait_status(done)
    host.wait_status(waiting, {"Running"})
    everything = host.client.get("/api/client/all").json()
    assert {done, waiting} <= {s["instanceId"] for s in everything}
    by_prefix = host.client.get("/api/client/by", params={"prefix": prefix}).json()
    assert sorted(s["instanceId"] for s in by_prefix) == sorted([done, waiting])
    running = host.client.get("/api/client/by", params={"prefix": prefix, "status": "Running,Pending"}).json()
    assert [s["instanceId"] for s in running] == [waiting]
    recent = (datetime.now(UTC) - timedelta(minutes=5)).replace(tzinfo=None).isoformat()
    future = (datetime.now(UTC) + timedelta(days=1)).replace(tzinfo=None).isoformat()
    in_window = host.client.get("/api/client/by", params={"from": recent, "status": "Completed"}).json()
    assert done in {s["instanceId"] for s in in_window}
    assert host.client.get("/api/client/by", params={"from": future}).json() == []
    host.client.post(f"/api/client/terminate/{waiting}")


def test_raise_event_delivers_the_sdk_encoded_payload(host: DevHostProcess) -> None:
    instance_id = _start(host, "wait_approval")["id"]
    host.wait_status(instance_id, {"Running"})
    resp = host.client.post(f"/api/client/event/{instance_id}/Approval", json={"approved": True})
    assert resp.status_code == 202, resp.text
    # raise_event json.dumps the data and aiohttp encodes it again, so the orchestrator receives JSON text
    assert host.wait_status(instance_id)["output"] == {"received": '{"approved": true}'}
    gone = host.client.post(f"/api/client/event/{instance_id}/Approval", json=1)
    assert gone.status_code == 409
    assert gone.json()["error"] == f"Instance with ID {instance_id} is gone: either completed or failed"
    missing = host.client.post("/api/client/event/nobody/Approval", json=1)
    assert missing.json()["error"] == "No instance with ID nobody found."


def test_terminate_suspend_resume(host: DevHostProcess) -> None:
    instance_id = _start(host, "wait_approval")["id"]
    host.wait_status(instance_id, {"Running"})
    assert host.client.post(f"/api/client/suspend/{instance_id}").json() == {"suspend": True}
    host.wait_status(instance_id, {"Suspended"})
    assert host.client.post(f"/api/client/resume/{instance_id}").json() == {"resume": True}
    host.wait_status(instance_id, {"Running"})
    resp = host.client.post(f"/api/client/terminate/{instance_id}", params={"reason": "enough"})
    assert resp.json() == {"terminate": True}
    final = host.wait_status(instance_id)
    assert final["runtimeStatus"] == "Terminated"
    assert final["output"] == "enough"
    # terminate of a terminated instance is accepted by the SDK (410); an unknown id raises
    assert host.client.post(f"/api/client/terminate/{instance_id}").status_code == 200
    missing = host.client.post("/api/client/terminate/nobody")
    assert missing.json()["error"] == "No instance with ID 'nobody' found."


def test_rewind_of_a_completed_instance_is_refused(host: DevHostProcess) -> None:
    instance_id = _start(host, "greet_chain", ["Rw"])["id"]
    host.wait_status(instance_id)
    resp = host.client.post(f"/api/client/rewind/{instance_id}")
    assert resp.status_code == 409
    assert resp.json()["error"]


def test_rewind_of_a_failed_instance(host: DevHostProcess) -> None:
    instance_id = _start(host, "rewindable")["id"]
    assert host.wait_status(instance_id)["runtimeStatus"] == "Failed"
    resp = host.client.post(f"/api/client/rewind/{instance_id}", params={"reason": "again"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"rewind": True}
    final = host.wait_status(instance_id)
    assert final["output"] == ["Hello rewind!", f"{instance_id} recovered"]


def test_restart(host: DevHostProcess) -> None:
    instance_id = _start(host, "greet_chain", ["Again"])["id"]
    host.wait_status(instance_id)
    resp = host.client.post(f"/api/client/restart/{instance_id}")
    assert resp.status_code == 200
    result = resp.json()["result"]
    new_id = result["id"] if isinstance(result, dict) else result
    assert new_id != instance_id
    assert host.wait_status(new_id)["output"] == ["Hello Again!"]


def test_purge_instance_history_and_by(host: DevHostProcess) -> None:
    instance_id = _start(host, "greet_chain", ["Purge"])["id"]
    host.wait_status(instance_id)
    assert host.client.delete(f"/api/client/purge/{instance_id}").json() == {"deleted": 1}
    assert host.client.delete(f"/api/client/purge/{instance_id}").json() == {"deleted": 0}
    failed = _start(host, "failing")["id"]
    host.wait_status(failed)
    since = (datetime.now(UTC) - timedelta(minutes=10)).replace(tzinfo=None).isoformat()
    resp = host.client.delete("/api/client/purgeby", params={"from": since, "status": "Failed"})
    assert resp.json()["deleted"] >= 1
    assert host.client.get(f"/api/client/status/{failed}").json()["truthy"] is False


def test_wait_for_completion_or_create_check_status_response(host: DevHostProcess) -> None:
    done = host.client.post("/api/client/wait/greet_chain", json=["Soon"], params={"timeout_ms": "20000"})
    assert done.status_code == 200
    assert done.json() == ["Hello Soon!"]
    timed_out = host.client.post("/api/client/wait/wait_approval", params={"timeout_ms": "500", "interval_ms": "100"})
    assert timed_out.status_code == 202
    assert timed_out.headers["location"] == timed_out.json()["statusQueryGetUri"]
    host.client.post(f"/api/client/terminate/{timed_out.json()['id']}")
    failed = host.client.post("/api/client/wait/failing", params={"timeout_ms": "20000"})
    assert failed.status_code == 500
    assert failed.json()["runtimeStatus"] == "Failed"


def test_create_http_management_payload(host: DevHostProcess) -> None:
    payload = host.client.get("/api/client/payload/abc123").json()
    assert payload["id"] == "abc123"
    assert payload["statusQueryGetUri"] == (
        f"http://127.0.0.1:{host.port}/runtime/webhooks/durabletask/instances/abc123"
        f"?taskHub=ClientHub&connection=Storage&code={DEFAULT_KEYS.system}"
    )


def test_creation_url_from_the_binding_starts_an_instance(host: DevHostProcess) -> None:
    binding = host.client.get("/api/client/binding", params={"code": DEFAULT_KEYS.function}).json()
    url = binding["creationUrls"]["createNewInstancePostUri"]
    url = url.replace("{functionName}", "greet_chain").replace("[/{instanceId}]", "")
    resp = httpx.post(url, json={"names": ["Url"]})
    assert resp.status_code == 202
    assert host.wait_status(resp.json()["id"])["output"] == ["Hello Url!"]
    wait_url = binding["creationUrls"]["createAndWaitOnNewInstancePostUri"]
    wait_url = (
        wait_url.replace("{functionName}", "greet_chain")
        .replace("[/{instanceId}]", "")
        .replace("{timeoutInSeconds}", "30")
        .replace("{intervalInSeconds}", "1")
    )
    waited = httpx.post(wait_url, json={"names": ["Wait"]})
    assert waited.status_code == 200
    assert waited.json() == ["Hello Wait!"]


def test_links_follow_the_origin_the_caller_used(host: DevHostProcess) -> None:
    resp = host.client.post(
        "/api/client/start/greet_chain", json=["Origin"], headers={"Host": f"localhost:{host.port}"}
    )
    assert resp.status_code == 202
    links = resp.json()
    assert links["statusQueryGetUri"].startswith(f"http://localhost:{host.port}/runtime/webhooks/durabletask/")
    host.wait_status(links["id"])
    assert httpx.get(links["statusQueryGetUri"]).json()["output"] == ["Hello Origin!"]


def test_an_activity_with_a_durable_client_binding_gets_a_working_client(host: DevHostProcess) -> None:
    # The binding is legal on any function: here an activity raises an event on its own orchestration.
    payload = _start(host, "ping_self")
    output = host.wait_status(payload["id"])["output"]
    # Data raised through the SDK client arrives as JSON text, as it does on Azure.
    assert output == {"activity": "raised", "ping": '{"from": "activity"}'}
