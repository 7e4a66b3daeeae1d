"""The Durable HTTP API's entity endpoints and the SDK's entity client, against a real devhost process.

Status codes and bodies follow the extension's HttpApiHandler: GET /entities/{name}/{key} is 200 with the
state or 404 with no body; POST (op=...) and DELETE (op "delete") are 202; an unknown entity function or
JSON that does not parse is 400; GET /entities/{name?} lists existing entities, a page at a time.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("entity_counter")


def _entity(host: DevHostProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    params = {**host.system_code, **kwargs.pop("params", {})}
    return host.client.request(method, host.webhook(f"entities/{path}"), params=params, **kwargs)


def _state_when(host: DevHostProcess, path: str, wanted: Any) -> Any:
    """Poll GET entities/<path> until its JSON body is ``wanted`` (404 reads as None)."""
    deadline = time.monotonic() + 30
    seen: Any = "never read"
    while time.monotonic() < deadline:
        resp = _entity(host, "GET", path)
        seen = None if resp.status_code == 404 else resp.json()
        if seen == wanted:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"entity {path} never reached {wanted!r}; last {seen!r}")


def test_signal_then_read_over_the_webhook(host: DevHostProcess) -> None:
    resp = _entity(host, "POST", "counter/w1", params={"op": "add"}, json="4")
    assert resp.status_code == 202 and resp.content == b""
    _state_when(host, "counter/w1", 4)
    text = _entity(
        host, "POST", "Counter/w1", params={"op": "add"}, content=b"6", headers={"content-type": "text/plain"}
    )
    assert text.status_code == 202  # other content types are the operation's string input
    _state_when(host, "counter/w1", 10)
    got = _entity(host, "GET", "counter/w1")
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")


def test_delete_signals_the_delete_operation(host: DevHostProcess) -> None:
    assert _entity(host, "POST", "counter/w2", params={"op": "add"}, json="1").status_code == 202
    _state_when(host, "counter/w2", 1)
    assert _entity(host, "DELETE", "counter/w2").status_code == 202
    _state_when(host, "counter/w2", None)
    missing = _entity(host, "GET", "counter/w2")
    assert missing.status_code == 404 and missing.content == b""


def test_bad_requests_are_400_with_the_extensions_error_body(host: DevHostProcess) -> None:
    bad_json = _entity(
        host, "POST", "counter/w3", params={"op": "add"}, content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["ExceptionMessage"].startswith("Could not parse JSON content")
    unknown = _entity(host, "POST", "nosuch/w3", params={"op": "add"}, json="1")
    assert unknown.status_code == 400
    assert "'nosuch' doesn't exist, is disabled, or is not an entity function" in unknown.json()["ExceptionMessage"]
    assert _entity(host, "GET", "counter/w3").status_code == 404  # nothing was sent


def test_unknown_methods_and_paths_are_404_and_the_key_is_required(host: DevHostProcess) -> None:
    assert _entity(host, "PUT", "counter/w4").status_code == 404
    assert _entity(host, "GET", "counter/w4/extra").status_code == 404
    no_key = host.client.get(host.webhook("entities/counter/w4"))
    assert no_key.status_code == 401


def test_the_empty_key_is_written_without_a_key_and_read_as_dollar(host: DevHostProcess) -> None:
    assert _entity(host, "POST", "counter", params={"op": "add"}, json="8").status_code == 202
    _state_when(host, "counter/$", 8)


def test_listing_pages_fetches_state_and_filters_by_time(host: DevHostProcess) -> None:
    for key in ("l1", "l2", "l3"):
        assert _entity(host, "POST", f"counter/{key}", params={"op": "add"}, json="2").status_code == 202
    for key in ("l1", "l2", "l3"):
        _state_when(host, f"counter/{key}", 2)
    listed: list[dict[str, Any]] = []
    headers: dict[str, str] = {}
    for _ in range(20):
        resp = _entity(host, "GET", "counter", params={"top": "2", "fetchState": "true"}, headers=headers)
        assert resp.status_code == 200
        listed.extend(resp.json())
        token = resp.headers.get("x-ms-continuation-token")
        if not token:
            break
        headers = {"x-ms-continuation-token": token}
    mine = {i["entityId"]["key"]: i for i in listed if i["entityId"]["key"] in ("l1", "l2", "l3")}
    assert set(mine) == {"l1", "l2", "l3"}
    assert all(i["state"] == 2 and i["entityId"]["name"] == "counter" for i in mine.values())
    assert all(i["lastOperationTime"].endswith("Z") for i in mine.values())
    no_state = _entity(host, "GET", "counter", params={"top": "100"}).json()
    assert no_state and all(i["state"] is None for i in no_state)
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _entity(host, "GET", "counter", params={"lastOperationTimeFrom": future}).json() == []
    assert _entity(host, "GET", "other").json() == []
    everything = _entity(host, "GET", "", params={"top": "1000"}).json()
    assert {"l1", "l2", "l3"} <= {i["entityId"]["key"] for i in everything}


def test_the_sdk_client_signals_and_reads_through_the_app(host: DevHostProcess) -> None:
    assert host.client.post("/api/counter/sdk/add", json=5).status_code == 202
    assert host.client.post("/api/counter/sdk/add", json=7).status_code == 202
    deadline = time.monotonic() + 30
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = host.client.get("/api/counter/sdk").json()
        if body.get("state") == 12:
            break
        time.sleep(0.02)
    assert body == {"exists": True, "state": 12}
    assert host.client.get("/api/counter/never-written").json() == {"exists": False, "state": None}


def test_orchestrations_call_the_entity_over_http(host: DevHostProcess) -> None:
    resp = host.client.post("/api/orchestrators/catch_failure", json={"key": "orch"})
    assert resp.status_code == 202, resp.text
    status = host.wait_status(resp.json()["id"])
    assert status["runtimeStatus"] == "Completed"
    assert status["output"] == {"caught": "counter cannot divide by zero", "total": 5}
    _state_when(host, "counter/orch", 5)
