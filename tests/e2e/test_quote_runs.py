"""A workflow run's quote before it starts, over HTTP on devhost: shown in the view, and approval.cost_over asks
before any node runs (reject stops the run); approved, the run's cost falls inside its quote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change


@pytest.fixture(scope="module")
def jobs(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "quotes" + uuid.uuid4().hex[:12],
        "COST_HOSTING": "flex_on_demand",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("quote-runs-host"), env=env)
    proc.start()
    client = JobClient(proc)
    agent: dict[str, Any] = {"id": "reader", "name": "Reader", "instructions": "Read.", "tools": ["consult_rag"]}
    agent["limits"] = {"max_turns": 2, "max_tool_calls": 2}
    for plural, body in [
        ("agents", agent),
        (
            "workflows",
            {
                "id": "quoted",
                "name": "Quoted",
                "nodes": [
                    {"id": "docs", "kind": "step", "step": "consult_rag", "input": {"query": {"value": "refunds"}}},
                    change("calc", {"value": 80}, after=["docs"]),
                    {
                        "id": "read",
                        "kind": "agent",
                        "agent": "reader",
                        "after": ["calc"],
                        "input": {"prompt": {"value": "What does the returns policy say about refunds after 30 days?"}},
                    },
                ],
            },
        ),
    ]:
        resp = client.http.post(f"/api/{plural}", json=body)
        assert resp.status_code in (200, 201), resp.text
    yield client
    proc.stop()


def start(jobs: JobClient, **body: Any) -> str:
    resp = jobs.http.post("/api/workflows/quoted/runs", json=body)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def test_over_cost_over_a_run_asks_before_any_node_and_reject_stops_it(jobs: JobClient) -> None:
    job_id = start(jobs, approval={"cost_over": 0.0})
    view = jobs.wait(job_id, {"waiting_for_user"})
    quote = view["quote"]
    summary = {"low": quote["low"], "high": quote["high"], "currency": "USD"}
    assert view["waiting"]["kind"] == "cost" and {k: view["waiting"]["details"][k] for k in summary} == summary
    steps = [s["step_id"] for s in quote["by_step"]]
    assert steps == ["(job)", "docs", "calc", "read"]
    assert 0 < quote["low"] <= quote["high"]
    assert all(s["state"] == "pending" for s in view["steps"]) or view["steps"] == []
    assert jobs.answer(job_id, "reject").status_code == 202
    done = jobs.wait(job_id, timeout_s=120)
    assert done["status"] == "failed" and done["error"]["code"] == "QUOTE_REJECTED"
    assert [s for s in done["cost"]["by_step"] if s["step_id"] != "(orchestration)"] == []  # no activity ran


def test_a_run_under_its_limit_runs_and_costs_inside_its_quote(jobs: JobClient) -> None:
    done = jobs.wait(start(jobs, approval={"cost_over": 10.0}), timeout_s=180)
    assert done["status"] == "completed", done.get("error")
    assert done["quote"]["low"] <= done["cost"]["total"] <= done["quote"]["high"]
    assert done["quote"]["price_table_version"] == done["cost"]["price_table"]["version"]
