"""Own versions of the public pattern samples, end to end on devhost: fan-out/fan-in over local files,
human interaction (event vs timer race), monitor loop, chaining with custom status."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def human(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("sample_human_interaction")


@pytest.fixture(scope="module")
def pipeline(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("sample_custom_status")


def _started(resp: httpx.Response) -> str:
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def _code_for(phone: str) -> int:
    return sum(ord(c) for c in phone) % 10000


def test_fan_out_fan_in_backs_up_every_file(devhost_factory: HostFactory, tmp_path: Path) -> None:
    source, target = tmp_path / "site", tmp_path / "backup"
    expected: dict[str, bytes] = {}
    for i in range(12):
        rel = Path(f"dir{i % 3}") / f"file{i}.txt"
        data = (f"file {i} " * (i + 1)).encode()
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
        expected[str(rel)] = data
    host = devhost_factory("sample_fan_out")
    instance_id = _started(host.client.post("/api/backup", json={"source": str(source), "target": str(target)}))
    status = host.wait_status(instance_id, showHistory="true")
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {"files": 12, "bytes": sum(len(d) for d in expected.values())}
    for rel_name, data in expected.items():
        assert (target / rel_name).read_bytes() == data
    copies = [e for e in status["historyEvents"] if e.get("FunctionName") == "copy_file"]
    assert len(copies) == 12
    assert host.client.post("/api/backup", content=b"not json").status_code == 400


def test_human_interaction_approved_by_the_right_code(human: DevHostProcess) -> None:
    phone = "+15550100"
    instance_id = _started(human.client.post("/api/verify", json={"phone": phone, "timeout_s": 60}))
    status = human.wait_status(instance_id, {"Running"})
    deadline = time.monotonic() + 30
    while (status.get("customStatus") or {}).get("waiting") is not True and time.monotonic() < deadline:
        status = human.wait_status(instance_id, {"Running"})
    assert human.client.post(f"/api/verify/{instance_id}/answer", json={"code": 1}).status_code == 202
    assert human.client.post(f"/api/verify/{instance_id}/answer", json={"code": _code_for(phone)}).status_code == 202
    final = human.wait_status(instance_id)
    assert final["output"] == {"approved": True, "attempts": 2}


def test_human_interaction_times_out_when_nobody_answers(human: DevHostProcess) -> None:
    instance_id = _started(human.client.post("/api/verify", json={"phone": "+15550199", "timeout_s": 1}))
    final = human.wait_status(instance_id)
    assert final["runtimeStatus"] == "Completed"
    assert final["output"] == {"approved": False, "reason": "timed out", "attempts": 0}


def test_human_interaction_gives_up_after_three_wrong_answers(human: DevHostProcess) -> None:
    instance_id = _started(human.client.post("/api/verify", json={"phone": "+15550111", "timeout_s": 60}))
    human.wait_status(instance_id, {"Running"})
    for wrong in (1, 2, 3):
        assert human.client.post(f"/api/verify/{instance_id}/answer", json={"code": wrong}).status_code == 202
    final = human.wait_status(instance_id)
    assert final["output"] == {"approved": False, "reason": "too many attempts", "attempts": 3}


def test_monitor_polls_until_done_and_expires_otherwise(devhost_factory: HostFactory) -> None:
    host = devhost_factory("sample_monitor")
    done_id = _started(
        host.client.post("/api/monitor", json={"job": "build-1", "done_after": 3, "interval_s": 0.2, "expires_s": 60})
    )
    expiring_id = _started(
        host.client.post("/api/monitor", json={"job": "build-2", "done_after": 999, "interval_s": 0.2, "expires_s": 1})
    )
    done = host.wait_status(done_id)
    assert done["output"] == {"job": "build-1", "state": "done", "checks": 3}
    assert done["customStatus"] == {"checks": 3, "state": "done"}
    expired = host.wait_status(expiring_id)
    assert expired["output"]["state"] == "expired"
    assert expired["output"]["checks"] >= 2
    history = host.client.get(
        f"/runtime/webhooks/durabletask/instances/{done_id}",
        params={"showHistory": "true", "code": host.keys.system if host.keys else ""},
    ).json()["historyEvents"]
    assert sum(1 for e in history if e["EventType"] == "TimerFired") == 2


def test_custom_status_reports_progress_between_steps(pipeline: DevHostProcess) -> None:
    instance_id = _started(pipeline.client.post("/api/pipeline", json={"pause": True}))
    seen: list[Any] = []
    for step, done in (("fetch", ["fetch:ok"]), ("transform", ["fetch:ok", "transform:ok"])):
        expected = {"step": step, "done": done, "paused": True}
        deadline = time.monotonic() + 30
        status = pipeline.wait_status(instance_id, {"Running"})
        while status.get("customStatus") != expected and time.monotonic() < deadline:
            time.sleep(0.05)
            status = pipeline.wait_status(instance_id, {"Running"})
        seen.append(status["customStatus"])
        assert pipeline.client.post(f"/api/pipeline/{instance_id}/go").status_code == 202
    assert seen == [
        {"step": "fetch", "done": ["fetch:ok"], "paused": True},
        {"step": "transform", "done": ["fetch:ok", "transform:ok"], "paused": True},
    ]
    pipeline.wait_status(instance_id, {"Running"})
    assert pipeline.client.post(f"/api/pipeline/{instance_id}/go").status_code == 202
    final = pipeline.wait_status(instance_id)
    assert final["output"] == ["fetch:ok", "transform:ok", "store:ok"]
    assert final["customStatus"] == {"step": None, "done": ["fetch:ok", "transform:ok", "store:ok"]}


def test_custom_status_pipeline_wait_for_completion(pipeline: DevHostProcess) -> None:
    resp = pipeline.client.post("/api/pipeline", params={"wait": "1"}, json={})
    assert resp.status_code == 200
    assert resp.json() == ["fetch:ok", "transform:ok", "store:ok"]
