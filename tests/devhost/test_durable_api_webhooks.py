"""The Durable HTTP API under /runtime/webhooks/durabletask on a real devhost (app: tests/apps/http_client).

Status codes and bodies follow the Durable Functions extension's HttpApiHandler.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DEFAULT_KEYS, DevHostProcess

CHECK_STATUS_KEYS = [
    "id",
    "statusQueryGetUri",
    "sendEventPostUri",
    "terminatePostUri",
    "purgeHistoryDeleteUri",
    "restartPostUri",
    "suspendPostUri",
    "resumePostUri",
]
ERROR_KEYS = {"Message", "ExceptionMessage", "ExceptionType", "StackTrace"}


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("http_client")


class Api:
    """Small helper around the webhook URLs with the system key."""

    def __init__(self, host: DevHostProcess) -> None:
        self.host = host
        self.code = {"code": DEFAULT_KEYS.system}

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        params = {**self.code, **kwargs.pop("params", {})}
        return self.host.client.request(method, f"/runtime/webhooks/durabletask/{path}", params=params, **kwargs)

    def start(self, name: str, body: Any = None, instance_id: str | None = None, **params: str) -> httpx.Response:
        path = f"orchestrators/{name}" + (f"/{instance_id}" if instance_id else "")
        if body is None:
            return self.request("POST", path, params=params)
        return self.request("POST", path, json=body, params=params)

    def started(self, name: str, body: Any = None, instance_id: str | None = None) -> str:
        resp = self.start(name, body, instance_id)
        assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    def status(self, instance_id: str, **params: str) -> httpx.Response:
        return self.request("GET", f"instances/{instance_id}", params=params)


@pytest.fixture(scope="module")
def api(host: DevHostProcess) -> Api:
    return Api(host)


def _assert_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == ERROR_KEYS
    assert body["ExceptionMessage"]
    assert body["StackTrace"] == ""
    return dict(body)


# ----- start ---------------------------------------------------------------------------------


def test_start_returns_check_status_payload_whose_links_work(api: Api, host: DevHostProcess) -> None:
    resp = api.start("greet_chain", {"names": ["Oslo", "Lima"]})
    assert resp.status_code == 202
    body = resp.json()
    assert list(body) == CHECK_STATUS_KEYS
    assert re.fullmatch(r"[0-9a-f]{32}", body["id"])
    assert resp.headers["location"] == body["statusQueryGetUri"]
    assert resp.headers["retry-after"] == "10"
    base = f"http://127.0.0.1:{host.port}/runtime/webhooks/durabletask/instances/{body['id']}"
    assert body["statusQueryGetUri"] == f"{base}?taskHub=ClientHub&connection=Storage&code={DEFAULT_KEYS.system}"
    assert body["terminatePostUri"].startswith(f"{base}/terminate?reason={{text}}&taskHub=ClientHub")
    assert body["sendEventPostUri"].startswith(f"{base}/raiseEvent/{{eventName}}?")
    host.wait_status(body["id"])
    followed = httpx.get(body["statusQueryGetUri"])
    assert followed.status_code == 200
    status = followed.json()
    assert status["runtimeStatus"] == "Completed"
    assert status["output"] == ["Hello Oslo!", "Hello Lima!"]
    assert status["input"] == {"names": ["Oslo", "Lima"]}
    assert status["name"] == "greet_chain"
    assert status["instanceId"] == body["id"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["createdTime"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["lastUpdatedTime"])


def test_start_with_instance_id_conflicts_while_running_and_replaces_when_done(api: Api, host: DevHostProcess) -> None:
    instance_id = f"fixed-{uuid.uuid4().hex[:8]}"
    assert api.started("wait_approval", None, instance_id) == instance_id
    host.wait_status(instance_id, {"Running"})
    # As the extension with overridableExistingInstanceStates=NonRunningStates: OrchestrationAlreadyExistsException.
    conflict = _assert_error(api.start("wait_approval", None, instance_id), 500)
    assert conflict["ExceptionMessage"] == "An Orchestration instance with the status Running already exists."
    assert api.request("POST", f"instances/{instance_id}/terminate", params={"reason": "done"}).status_code == 202
    host.wait_status(instance_id, {"Terminated"})
    assert api.started("greet_chain", {"names": ["Again"]}, instance_id) == instance_id
    final = host.wait_status(instance_id)
    assert final["name"] == "greet_chain"
    assert final["output"] == ["Hello Again!"]


def test_start_unknown_orchestrator_is_400(api: Api) -> None:
    body = _assert_error(api.start("no_such_orchestrator", {"x": 1}), 400)
    assert "no_such_orchestrator" in body["ExceptionMessage"]


@pytest.mark.parametrize("bad_id", ["@entity", "with/slash", "a" * 257])
def test_start_with_invalid_instance_id_is_400(api: Api, bad_id: str) -> None:
    resp = api.request("POST", f"orchestrators/greet_chain/{httpx.URL(bad_id).raw_path.decode()}")
    assert resp.status_code in (400, 404)
    if resp.status_code == 400:
        _assert_error(resp, 400)


def test_start_with_invalid_json_body_is_400(api: Api) -> None:
    resp = api.request(
        "POST", "orchestrators/greet_chain", content=b"{not json", headers={"content-type": "application/json"}
    )
    _assert_error(resp, 400)


def test_start_with_empty_octet_stream_body_means_no_input(api: Api, host: DevHostProcess) -> None:
    resp = api.request(
        "POST", "orchestrators/echo_input", content=b"", headers={"content-type": "application/octet-stream"}
    )
    assert resp.status_code == 202
    final = host.wait_status(resp.json()["id"])
    assert final["runtimeStatus"] == "Completed"
    assert final["output"] is None
    assert final["input"] is None


def test_start_with_raw_json_body_passes_the_value(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("echo_input", {"a": [1, 2], "b": "ü"})
    assert host.wait_status(instance_id)["output"] == {"a": [1, 2], "b": "ü"}


def test_start_and_wait_returns_output_when_done(api: Api) -> None:
    resp = api.start("greet_chain", {"names": ["Wait"]}, timeout="30", pollingInterval="1")
    assert resp.status_code == 200, resp.text
    assert resp.json() == ["Hello Wait!"]


def test_start_and_wait_times_out_into_check_status_payload(api: Api) -> None:
    resp = api.start("wait_approval", None, timeout="1", pollingInterval="1")
    assert resp.status_code == 202
    assert list(resp.json()) == CHECK_STATUS_KEYS
    api.request("POST", f"instances/{resp.json()['id']}/terminate", params={"reason": "cleanup"})


def test_start_and_wait_on_failure_returns_status(api: Api) -> None:
    resp = api.start("failing", None, timeout="30", pollingInterval="1")
    assert resp.status_code == 200
    assert resp.json()["runtimeStatus"] == "Failed"
    assert "planned failure" in str(resp.json()["output"])


def test_start_with_bad_timeout_is_400(api: Api) -> None:
    _assert_error(api.start("greet_chain", None, timeout="soon"), 400)


def test_start_with_version(api: Api, host: DevHostProcess) -> None:
    resp = api.start("version_echo", None, version="2.5")
    assert resp.status_code == 202
    assert host.wait_status(resp.json()["id"])["output"] == "2.5"


# ----- status ---------------------------------------------------------------------------------


def test_status_codes_by_runtime_status(api: Api, host: DevHostProcess) -> None:
    running = api.started("wait_approval")
    host.wait_status(running, {"Running"})
    resp = api.status(running)
    assert resp.status_code == 202
    assert resp.headers["retry-after"] == "5"
    assert resp.headers["location"].endswith(f"/instances/{running}?code={DEFAULT_KEYS.system}")
    assert resp.json()["customStatus"] == "waiting for approval"

    failed = api.started("failing")
    host.wait_status(failed)
    assert api.status(failed).status_code == 200
    assert api.status(failed, returnInternalServerErrorOnFailure="true").status_code == 500
    assert api.status(failed, returnInternalServerErrorOnFailure="True").json()["runtimeStatus"] == "Failed"

    missing = api.status("does-not-exist")
    assert missing.status_code == 404
    assert missing.content == b""
    api.request("POST", f"instances/{running}/terminate", params={"reason": "cleanup"})


def test_status_show_input_and_history(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("greet_chain", {"names": ["Hist"]})
    host.wait_status(instance_id)
    plain = api.status(instance_id).json()
    assert plain["input"] == {"names": ["Hist"]}
    assert "historyEvents" not in plain
    hidden = api.status(instance_id, showInput="false").json()
    assert hidden.get("input") is None
    history = api.status(instance_id, showHistory="true", showHistoryOutput="true").json()
    events = history["historyEvents"]
    kinds = [e["EventType"] for e in events]
    assert kinds[0] == "ExecutionStarted"
    assert "TaskCompleted" in kinds and kinds[-1] == "ExecutionCompleted"
    completed = next(e for e in events if e["EventType"] == "TaskCompleted")
    assert completed["FunctionName"] == "greet"
    assert completed["Result"] == "Hello Hist!"


# ----- list / query ----------------------------------------------------------------------------


def test_list_filters_and_paging(api: Api, host: DevHostProcess) -> None:
    prefix = f"page-{uuid.uuid4().hex[:6]}-"
    ids = [api.started("greet_chain", {"names": [str(i)]}, f"{prefix}{i}") for i in range(5)]
    for instance_id in ids:
        host.wait_status(instance_id)
    resp = api.request("GET", "instances/", params={"instanceIdPrefix": prefix})
    assert resp.status_code == 200
    assert sorted(s["instanceId"] for s in resp.json()) == sorted(ids)

    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        headers = {"x-ms-continuation-token": token} if token else {}
        page = api.request("GET", "instances", params={"instanceIdPrefix": prefix, "top": "2"}, headers=headers)
        assert page.status_code == 200
        assert len(page.json()) <= 2
        seen += [s["instanceId"] for s in page.json()]
        pages += 1
        token = page.headers.get("x-ms-continuation-token")
        if not token:
            break
    assert sorted(seen) == sorted(ids)
    assert pages >= 3

    completed = api.request(
        "GET", "instances/", params={"instanceIdPrefix": prefix, "runtimeStatus": "Completed,Failed"}
    ).json()
    assert len(completed) == 5
    running = api.request("GET", "instances/", params={"instanceIdPrefix": prefix, "runtimeStatus": "Running"})
    assert running.json() == []
    future = api.request(
        "GET", "instances/", params={"instanceIdPrefix": prefix, "createdTimeFrom": "2999-01-01T00:00:00Z"}
    )
    assert future.json() == []
    no_input = api.request("GET", "instances/", params={"instanceIdPrefix": prefix, "showInput": "false"}).json()
    assert all(s.get("input") is None for s in no_input)


def test_list_rejects_a_bad_continuation_token(api: Api) -> None:
    resp = api.request("GET", "instances/", headers={"x-ms-continuation-token": "%%%not-a-token"})
    _assert_error(resp, 400)


@pytest.mark.parametrize(
    "params", [{"runtimeStatus": "Sleeping"}, {"top": "zero"}, {"top": "0"}, {"createdTimeFrom": "yesterday"}]
)
def test_list_rejects_bad_filters(api: Api, params: dict[str, str]) -> None:
    _assert_error(api.request("GET", "instances/", params=params), 400)


# ----- events, terminate, suspend, resume ------------------------------------------------------


def test_raise_event(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("wait_approval")
    host.wait_status(instance_id, {"Running"})
    text = api.request(
        "POST", f"instances/{instance_id}/raiseEvent/Approval", content=b"true", headers={"content-type": "text/plain"}
    )
    assert text.status_code == 400
    assert text.json() == {"Message": "Only application/json request content is supported"}
    bad = api.request(
        "POST",
        f"instances/{instance_id}/raiseEvent/Approval",
        content=b"{",
        headers={"content-type": "application/json"},
    )
    _assert_error(bad, 400)
    ok = api.request("POST", f"instances/{instance_id}/raiseEvent/Approval", json={"approved": True, "by": "ana"})
    assert ok.status_code == 202
    final = host.wait_status(instance_id)
    assert final["output"] == {"received": {"approved": True, "by": "ana"}}
    assert final["customStatus"] == "approved"
    gone = api.request("POST", f"instances/{instance_id}/raiseEvent/Approval", json=1)
    assert (gone.status_code, gone.content) == (410, b"")
    missing = api.request("POST", "instances/nobody-here/raiseEvent/Approval", json=1)
    assert (missing.status_code, missing.content) == (404, b"")


def test_terminate(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("wait_approval")
    host.wait_status(instance_id, {"Running"})
    resp = api.request("POST", f"instances/{instance_id}/terminate", params={"reason": "no longer needed"})
    assert resp.status_code == 202
    final = host.wait_status(instance_id)
    assert final["runtimeStatus"] == "Terminated"
    assert final["output"] == "no longer needed"
    assert api.request("POST", f"instances/{instance_id}/terminate", params={"reason": "x"}).status_code == 410
    assert api.request("POST", "instances/nobody-here/terminate", params={"reason": "x"}).status_code == 404


def test_suspend_and_resume_hold_events(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("wait_approval")
    host.wait_status(instance_id, {"Running"})
    assert api.request("POST", f"instances/{instance_id}/suspend", params={"reason": "pause"}).status_code == 202
    host.wait_status(instance_id, {"Suspended"})
    assert api.request("POST", f"instances/{instance_id}/raiseEvent/Approval", json="held").status_code == 202
    assert api.status(instance_id).json()["runtimeStatus"] == "Suspended"
    assert api.request("POST", f"instances/{instance_id}/resume", params={"reason": "go"}).status_code == 202
    final = host.wait_status(instance_id)
    assert final["output"] == {"received": "held"}
    assert api.request("POST", f"instances/{instance_id}/suspend").status_code == 410
    assert api.request("POST", "instances/nobody-here/resume").status_code == 404


# ----- rewind, restart, purge -------------------------------------------------------------------


def test_rewind_only_applies_to_failed_instances(api: Api, host: DevHostProcess) -> None:
    done = api.started("greet_chain", {"names": ["R"]})
    host.wait_status(done)
    resp = api.request("POST", f"instances/{done}/rewind", params={"reason": "retry"})
    assert (resp.status_code, resp.content) == (410, b"")
    assert api.request("POST", "instances/nobody-here/rewind").status_code == 404


def test_rewind_of_a_failed_instance_reruns_the_failed_work(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("rewindable")
    failed = host.wait_status(instance_id)
    assert failed["runtimeStatus"] == "Failed"
    assert "first attempt for" in failed["output"]
    resp = api.request("POST", f"instances/{instance_id}/rewind", params={"reason": "try again"})
    assert resp.status_code == 202
    assert resp.content == b""
    final = host.wait_status(instance_id)
    assert final["runtimeStatus"] == "Completed"
    assert final["output"] == ["Hello rewind!", f"{instance_id} recovered"]


def test_restart(api: Api, host: DevHostProcess) -> None:
    original = api.started("greet_chain", {"names": ["Re"]})
    host.wait_status(original)
    resp = api.request("POST", f"instances/{original}/restart")
    assert resp.status_code == 202
    new_id = resp.json()["id"]
    assert new_id != original
    assert host.wait_status(new_id)["output"] == ["Hello Re!"]
    same = api.request("POST", f"instances/{original}/restart", params={"restartWithNewInstanceId": "false"})
    assert same.status_code == 202
    assert same.json()["id"] == original
    host.wait_status(original)
    _assert_error(api.request("POST", "instances/nobody-here/restart"), 400)
    busy = api.started("wait_approval")
    host.wait_status(busy, {"Running"})
    _assert_error(api.request("POST", f"instances/{busy}/restart", params={"restartWithNewInstanceId": "false"}), 500)
    waited = api.request("POST", f"instances/{original}/restart", params={"timeout": "30"})
    assert waited.status_code == 200
    assert waited.json() == ["Hello Re!"]
    api.request("POST", f"instances/{busy}/terminate", params={"reason": "cleanup"})


def test_purge_one(api: Api, host: DevHostProcess) -> None:
    instance_id = api.started("greet_chain", {"names": ["P"]})
    host.wait_status(instance_id)
    resp = api.request("DELETE", f"instances/{instance_id}")
    assert resp.status_code == 200
    assert resp.json() == {"instancesDeleted": 1}
    assert api.status(instance_id).status_code == 404
    assert api.request("DELETE", f"instances/{instance_id}").status_code == 404
    running = api.started("wait_approval")
    host.wait_status(running, {"Running"})
    kept = api.request("DELETE", f"instances/{running}")
    assert (kept.status_code, kept.json()) == (200, {"instancesDeleted": 0})
    assert api.status(running).status_code == 202
    api.request("POST", f"instances/{running}/terminate", params={"reason": "cleanup"})


def test_purge_by_filter(api: Api, host: DevHostProcess) -> None:
    missing = api.request("DELETE", "instances/")
    assert (missing.status_code, missing.json()) == (400, "Please provide value for 'createdTimeFrom' parameter.")
    prefix = f"purge-{uuid.uuid4().hex[:6]}-"
    ids = [api.started("failing", None, f"{prefix}{i}") for i in range(2)]
    for instance_id in ids:
        host.wait_status(instance_id)
    resp = api.request(
        "DELETE", "instances/", params={"createdTimeFrom": "2000-01-01T00:00:00Z", "runtimeStatus": "Failed"}
    )
    assert resp.status_code == 200
    assert resp.json()["instancesDeleted"] >= 2
    for instance_id in ids:
        assert api.status(instance_id).status_code == 404
    none_left = api.request(
        "DELETE", "instances/", params={"createdTimeFrom": "2000-01-01T00:00:00Z", "runtimeStatus": "Failed"}
    )
    assert none_left.status_code == 404


# ----- the rest --------------------------------------------------------------------------------


def test_entities_of_an_app_without_entity_functions(api: Api) -> None:
    # Entities are tested in test_entities*.py; here: no state is 404, a signal to no entity function is 400.
    assert api.request("GET", "entities/counter/one").status_code == 404
    body = _assert_error(api.request("POST", "entities/counter/one", params={"op": "add"}), 400)
    assert "is not an entity function" in body["ExceptionMessage"]


def test_unknown_api_paths_are_404(api: Api) -> None:
    assert api.request("GET", "nothing-here").status_code == 404
    assert api.request("PUT", "instances/x").status_code == 404


def test_rpc_endpoint_serves_the_same_api_without_key(api: Api, host: DevHostProcess) -> None:
    rpc = host.rpc_base_url()
    resp = httpx.post(rpc + "orchestrators/greet_chain", json={"names": ["Rpc"]})
    assert resp.status_code == 202
    instance_id = resp.json()["id"]
    # links in an RPC reply still point at the public listener, with the key
    assert resp.json()["statusQueryGetUri"].startswith(f"http://127.0.0.1:{host.port}/runtime/webhooks/durabletask/")
    host.wait_status(instance_id)
    assert httpx.get(rpc + f"instances/{instance_id}").json()["output"] == ["Hello Rpc!"]
