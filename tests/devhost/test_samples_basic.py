"""Own versions of the public v2 samples, end to end on devhost: chaining, blueprint, sub-orchestration,
custom-class serialisation. Each app runs in its own host, started once for this module."""

from __future__ import annotations

import httpx

from tests.conftest import HostFactory
from tests.devhost.hostproc import DEFAULT_KEYS, DevHostProcess


def _follow(resp: httpx.Response, host: DevHostProcess) -> dict:
    """Follow statusQueryGetUri from a 202 until the instance is terminal."""
    assert resp.status_code == 202, resp.text
    links = resp.json()
    assert resp.headers["location"] == links["statusQueryGetUri"]
    final = host.wait_status(links["id"])
    followed = httpx.get(links["statusQueryGetUri"])
    assert followed.status_code == 200
    assert followed.json()["runtimeStatus"] == final["runtimeStatus"]
    return dict(followed.json())


def test_function_chaining(devhost_factory: HostFactory) -> None:
    host = devhost_factory("sample_chaining")
    assert f"http_start: [POST] http://127.0.0.1:{host.port}/api/orchestrators/{{functionName}}" in host.output()
    status = _follow(host.client.post("/api/orchestrators/greet_cities"), host)
    assert status["runtimeStatus"] == "Completed"
    assert status["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    # the starter passes whatever name is in the URL; unknown orchestrators fail in start_new
    assert host.client.post("/api/orchestrators/nope").status_code == 500
    history = host.client.get(
        f"/runtime/webhooks/durabletask/instances/{status['instanceId']}",
        params={"showHistory": "true", "code": DEFAULT_KEYS.system},
    ).json()["historyEvents"]
    assert [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"] == ["welcome"] * 3


def test_blueprint_in_a_plain_function_app(devhost_factory: HostFactory) -> None:
    host = devhost_factory("sample_blueprint")
    assert "blueprint_sequence: orchestrationTrigger" in host.output()
    # the plain FunctionApp uses function-level auth
    assert host.client.post("/api/startOrchestrator").status_code == 401
    resp = host.client.post("/api/startOrchestrator", params={"code": DEFAULT_KEYS.function})
    status = _follow(resp, host)
    assert status["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    hello = host.client.get("/api/HttpTrigger", params={"name": "Ada", "code": DEFAULT_KEYS.function})
    assert hello.text == "Hello, Ada. This HTTP triggered function executed successfully."
    body = host.client.post(
        "/api/httptrigger", json={"name": "Lin"}, headers={"x-functions-key": DEFAULT_KEYS.function}
    )
    assert body.text == "Hello, Lin. This HTTP triggered function executed successfully."
    missing = host.client.get("/api/HttpTrigger", params={"code": DEFAULT_KEYS.function})
    assert missing.status_code == 400


def test_sub_orchestration(devhost_factory: HostFactory) -> None:
    host = devhost_factory("sample_sub_orchestration")
    status = _follow(host.client.post("/api/orchestrators/parent_orchestrator"), host)
    assert status["output"] == "Hello Seattle"
    child = host.wait_status(f"{status['instanceId']}:child")
    assert child["name"] == "child_orchestrator"
    assert child["output"] == "Hello Seattle"
    assert child["input"] == '"Seattle"'


def test_serialize_arguments_with_custom_classes(devhost_factory: HostFactory) -> None:
    host = devhost_factory("sample_serialize")
    orders = [
        {"sku": "pen", "quantity": 12, "unit_price": 1.5},
        {"sku": "pad", "quantity": 2, "unit_price": 4.0},
    ]
    status = _follow(host.client.post("/api/invoice", json=orders), host)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {
        "lines": ["pen x12 @ 1.35", "pad x2 @ 4.00"],
        "total": 24.2,
        "type": "Invoice",
    }
    # the input was stored in the SDK's class-tagged form
    assert '"__class__": "Order"' in status["input"]
