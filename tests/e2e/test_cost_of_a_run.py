"""The cost of a workflow run with a parallel node: the root's meters and each part's own steps, over devhost."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "cost" + uuid.uuid4().hex[:12],
        "COST_DURABLE_BACKEND": "dts_consumption",
        "COST_HOSTING": "flex_on_demand",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("cost-runs-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


def history(host: DevHostProcess, instance: str) -> list[dict[str, Any]]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true", "showInput": "true"}
    resp = host.client.get(host.webhook(f"instances/{instance}"), params=params)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["historyEvents"])


def actions(events: list[dict[str, Any]]) -> int:
    """Durable Task Scheduler actions of one instance, counted here from its event names."""
    kinds = Counter(e["EventType"] for e in events)
    results = kinds["TaskCompleted"] + kinds["TaskFailed"]
    parts = kinds["SubOrchestrationInstanceCompleted"] + kinds["SubOrchestrationInstanceFailed"]
    return kinds["ExecutionStarted"] + 2 * results + 2 * parts + kinds["TimerFired"] + kinds["EventRaised"]


def test_a_parallel_runs_cost_counts_every_part(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    workflow = {
        "id": "fan-cost",
        "name": "Fan",
        "nodes": [
            {"id": "split", "kind": "parallel", "branches": ["good", "other"]},
            change("good", {"value": 80}),
            change("other", {"value": 50}),
            {"id": "merge", "kind": "join", "after": ["good", "other"]},
        ],
        "outputs": {"percent": {"from": "good.data.percent_change"}},
    }
    saved = jobs.http.post("/api/workflows", json=workflow)
    assert saved.status_code == 201, saved.text
    started = jobs.http.post("/api/workflows/fan-cost/runs", json={})
    assert started.status_code == 202, started.text
    job_id = str(started.json()["id"])
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")

    root = history(host, job_id)
    part_ids = [str(e["Input"]["job_id"]) for e in root if e["EventType"] == "SubOrchestrationInstanceCompleted"]
    assert sorted(part_ids) == [f"{job_id}:good", f"{job_id}:other"]
    parts = {p: history(host, p) for p in part_ids}
    expected = actions(root) + sum(actions(events) for events in parts.values())
    cost = view["cost"]
    meters = {m["meter"]: m for m in cost["by_meter"]}
    assert meters["durable.actions"]["quantity"] == expected
    # Each branch's tool call is a step of its part; the function tool runs inside the function.
    steps = {s["step_id"]: s for s in cost["by_step"]}
    for branch in ("good", "other"):
        assert f"{branch}/(orchestration)" in steps
        assert any(k.startswith(f"{branch}/") and "tools.calls:function" in s["meters"] for k, s in steps.items())
    assert meters["tools.calls:function"]["quantity"] == 2
    assert meters["tools.calls:function"]["included_in"] == "flex.gb_seconds"
