"""Entities in the instance endpoints, as the extension shows them to the Python SDK.

The extension's HTTP API lists an entity among the instances as ``@name@key`` (Azure Storage keeps entities
as orchestration instances), answers its status, and purges it by that id: its e2e PurgeEntity test expects
"Purged 1 records" for an existing entity and 0 for an unknown one. Purges by filter leave entities alone
(they are Running while they exist, and devhost never purges what is in flight).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devhost.durable.engine import Engine
from devhost.functions.model import InstanceNotFound
from tests.conftest import HostFactory
from tests.devhost.conftest import APPS, EngineRunner
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("entity_instances")


def _invoke(host: DevHostProcess, key: str) -> str:
    """Run invoke_dummy for ``key`` to completion; returns its instance id."""
    resp = host.client.post(f"{host.base_url}/api/invoke/{key}")
    assert resp.status_code == 202
    instance_id = str(resp.json()["id"])
    done = host.wait_status(instance_id)
    assert done["runtimeStatus"] == "Completed" and done["output"] == {"key": key}
    return instance_id


def _webhook(host: DevHostProcess, method: str, path: str, **params: Any) -> Any:
    return host.client.request(method, host.webhook(path), params={**host.system_code, **params})


def test_get_status_all_lists_the_entity_as_a_running_instance(host: DevHostProcess) -> None:
    orchestration = _invoke(host, "k1")
    rows = {r["instanceId"]: r for r in host.client.get(f"{host.base_url}/api/instances").json()}
    assert rows[orchestration]["runtimeStatus"] == "Completed"
    entity = rows["@dummy@k1"]
    assert entity["name"] == "dummy" and entity["runtimeStatus"] == "Running"
    assert entity["input"] == {"exists": True, "state": '{"key": "k1"}'}
    assert entity["output"] is None


def test_status_of_an_entity_id_answers_like_a_running_instance(host: DevHostProcess) -> None:
    _invoke(host, "k2")
    resp = _webhook(host, "GET", "instances/@dummy@k2")
    assert resp.status_code == 202 and resp.json()["runtimeStatus"] == "Running"
    assert _webhook(host, "GET", "instances/@dummy@k2", showInput="false").json()["input"] is None
    assert _webhook(host, "GET", "instances/@dummy@k2", showHistory="true").json()["historyEvents"] == []
    assert _webhook(host, "GET", "instances/@dummy@nope").status_code == 404
    sdk = host.client.get(f"{host.base_url}/api/status", params={"instanceId": "@dummy@k2"})
    assert sdk.status_code == 200 and sdk.json()["runtimeStatus"] == "Running"


def test_listing_filters_apply_to_entities(host: DevHostProcess) -> None:
    _invoke(host, "k3")
    only_entities = _webhook(host, "GET", "instances", instanceIdPrefix="@dummy@").json()
    assert only_entities and {r["instanceId"][:7] for r in only_entities} == {"@dummy@"}
    completed = _webhook(host, "GET", "instances", runtimeStatus="Completed").json()
    assert completed and not any(r["instanceId"].startswith("@") for r in completed)
    running = _webhook(host, "GET", "instances", runtimeStatus="Running").json()
    assert "@dummy@k3" in {r["instanceId"] for r in running}
    orchestrations_only = _webhook(host, "GET", "instances", instanceIdPrefix="a").json()
    assert not any(r["instanceId"].startswith("@") for r in orchestrations_only)


def test_paging_runs_from_the_orchestrations_into_the_entities(host: DevHostProcess) -> None:
    for key in ("p1", "p2"):
        _invoke(host, key)
    everything = [r["instanceId"] for r in _webhook(host, "GET", "instances", top="1000").json()]
    paged: list[str] = []
    token = None
    for _ in range(100):
        headers: dict[str, str] = {"x-ms-continuation-token": token} if token else {}
        resp = host.client.get(host.webhook("instances"), params={**host.system_code, "top": "1"}, headers=headers)
        assert resp.status_code == 200 and len(resp.json()) <= 1
        paged += [r["instanceId"] for r in resp.json()]
        token = resp.headers.get("x-ms-continuation-token")
        if not token:
            break
    assert paged == everything
    assert {"@dummy@p1", "@dummy@p2"} <= set(paged)
    assert everything.index("@dummy@p1") > max(i for i, iid in enumerate(everything) if not iid.startswith("@"))


def test_purge_by_entity_id_deletes_the_entity_as_the_extension_e2e_expects(host: DevHostProcess) -> None:
    _invoke(host, "gone")
    purge = host.client.post(f"{host.base_url}/api/purge", params={"instanceId": "@dummy@gone"})
    assert purge.status_code == 200 and purge.text == "Purged 1 records"
    assert _webhook(host, "GET", "entities/dummy/gone").status_code == 404
    assert _webhook(host, "GET", "instances/@dummy@gone").status_code == 404
    again = host.client.post(f"{host.base_url}/api/purge", params={"instanceId": "@dummy3@gone"})
    assert again.status_code == 200 and again.text == "Purged 0 records"
    assert _webhook(host, "DELETE", "instances/@dummy@gone").status_code == 404


def test_purge_by_filter_leaves_entities(host: DevHostProcess) -> None:
    _invoke(host, "kept")
    since = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    resp = _webhook(host, "DELETE", "instances", createdTimeFrom=since)
    assert resp.status_code == 200 and resp.json()["instancesDeleted"] >= 1
    assert _webhook(host, "GET", "entities/dummy/kept").json() == {"key": "kept"}
    left = [r["instanceId"] for r in _webhook(host, "GET", "instances").json()]
    assert "@dummy@kept" in left and all(i.startswith("@") for i in left)


def test_an_entity_with_operations_to_run_is_not_purged(run_engine: EngineRunner) -> None:
    """Engine level: between a signal's commit and its batch, a purge deletes nothing (0), as for orchestrations."""

    async def body(engine: Engine) -> None:
        await engine.signal_entity("Dummy", "busy", "set", json.dumps(json.dumps(1)))
        await engine.wait_for_idle()
        # No await between the signal and the purge: the dispatcher cannot run the operation in between.
        await engine.signal_entity("Dummy", "busy", "set", json.dumps(json.dumps(2)))
        assert await engine.purge("@dummy@busy") == 0
        await engine.wait_for_idle()
        assert await engine.read_entity_state("Dummy", "busy") == (True, json.dumps(2))
        assert await engine.purge("@dummy@busy") == 1
        assert await engine.read_entity_state("Dummy", "busy") == (False, None)
        with pytest.raises(InstanceNotFound):
            await engine.purge("@dummy@busy")

    run_engine(body, app_dir=APPS / "entity_instances")
