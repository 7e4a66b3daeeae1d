"""The job view's cost over HTTP on devhost, and the CLI's cost line, checked against the job's own history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
ENV = {"COST_DURABLE_BACKEND": "dts_consumption", "COST_HOSTING": "flex_on_demand", "COST_INSTANCE_MEMORY_MB": "4096"}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("cost-host"), env=ENV)
    proc.start()
    yield proc
    proc.stop()


def history(host: DevHostProcess, job_id: str) -> list[dict[str, Any]]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true", "showInput": "true"}
    resp = host.client.get(host.webhook(f"instances/{job_id}"), params=params)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["historyEvents"])


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_view_prices_the_job_for_the_configured_backend_and_plan(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    job_id = jobs.submit(MIXED_Q)
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    cost = view["cost"]
    assert (cost["backend"], cost["hosting"], cost["currency"]) == ("dts_consumption", "flex_on_demand", "USD")
    assert cost["price_table"]["version"] == "2026-11"
    meters = {m["meter"]: m for m in cost["by_meter"]}
    # Counted here from the history the management API returns: every activity attempt is 2 actions.
    events = history(host, job_id)
    tasks = [e for e in events if e["EventType"] in ("TaskCompleted", "TaskFailed")]
    assert meters["durable.actions"]["quantity"] == 1 + 2 * len(tasks)
    # Tokens of the offline model (price 0), the local index and SQLite (inside the function) are priced; the
    # streamed answer's stored bytes have no blob price in the repo table (docs/costs.md).
    assert [(u["meter"], u["price"]) for u in cost["unknown"]] == [
        ("durable.actions", "unknown"),
        ("storage.stored_bytes", "unknown"),
    ]
    assert cost["unknown"][0]["quantity"] == 1 + 2 * len(tasks)
    stored = meters["storage.stored_bytes"]
    assert stored["detail"]["streamed_text_bytes"] == len(view["answer"]["text"].encode("utf-8")) > 0
    assert stored["quantity"] == pytest.approx(stored["detail"]["streamed_text_bytes"] * 600 / (30 * 86400), abs=1e-6)
    seconds = sum((at(e["Timestamp"]) - at(e["ScheduledTime"])).total_seconds() for e in tasks)
    assert meters["flex.gb_seconds"]["quantity"] == pytest.approx(seconds * 4, abs=1e-4)
    assert meters["flex.gb_seconds"]["cost"] == pytest.approx(seconds * 4 * 0.000026, abs=1e-8)
    steps = {s["step_id"] for s in cost["by_step"]}
    assert {"plan", "(orchestration)"} | {s["id"] for s in view["steps"]} == steps
    assert cost["total"] == pytest.approx(sum(m["cost"] or 0 for m in cost["by_meter"]))

    # The orchestrator logged the same ledger once, as the job.cost event (App Insights gets it as a trace).
    assert f"job {job_id} cost {cost['total']:.8f} USD" in host.output()

    # The CLI: one line with the total and what has no price; --json carries the whole breakdown.
    assert host.keys is not None
    env = {**os.environ, "COLUMNS": "200"}
    common = ["--url", host.base_url, "--key", host.keys.function]
    shown = subprocess.run(
        [sys.executable, "-m", "devhost", "jobs", "show", job_id, *common],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("cost: $"))
    assert f"price unknown: durable.actions {1 + 2 * len(tasks)} action" in line
    assert "(dts_consumption, flex_on_demand; prices 2026-11)" in line
    as_json = subprocess.run(
        [sys.executable, "-m", "devhost", "jobs", "show", job_id, "--json", *common],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert json.loads(as_json.stdout)["cost"]["by_meter"] == cost["by_meter"]


def test_costs_across_jobs_by_meter_model_and_workflow(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    views = [jobs.wait(jobs.submit(MIXED_Q), timeout_s=120) for _ in range(2)]
    listed = jobs.http.get("/api/costs", params={"group_by": "meter"})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    # Every job of this host so far (the first test's too), each priced as its own view prices it.
    every = [jobs.view(j["id"]) for j in jobs.http.get("/api/jobs", params={"limit": 100}).json()["jobs"]]
    assert {v["id"] for v in views} <= {v["id"] for v in every}
    assert body["jobs"] == len(every) and body["truncated"] is False
    assert body["total"] == pytest.approx(sum(v["cost"]["total"] for v in every))
    by_meter = {g["key"]: g for g in body["groups"]}
    actions = sum(m["quantity"] for v in every for m in v["cost"]["by_meter"] if m["meter"] == "durable.actions")
    assert by_meter["durable.actions"]["quantity"] == {"action": actions}
    assert by_meter["durable.actions"]["unknown"] == ["durable.actions"] and by_meter["durable.actions"]["cost"] == 0
    by_model = {g["key"]: g for g in jobs.http.get("/api/costs", params={"group_by": "model"}).json()["groups"]}
    assert set(by_model) == {"offline", "(not a model)"}
    by_workflow = jobs.http.get("/api/costs", params={"group_by": "workflow"}).json()["groups"]
    assert [(g["key"], g["jobs"]) for g in by_workflow] == [("ask", len(every))]
    # Nothing was created in a range of the past.
    empty = jobs.http.get("/api/costs", params={"from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z"})
    assert empty.json()["jobs"] == 0 and empty.json()["groups"] == []
    bad = jobs.http.get("/api/costs", params={"group_by": "planet"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "group_by"
    backwards = jobs.http.get("/api/costs", params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"})
    assert backwards.status_code == 400 and backwards.json()["error"]["field"] == "from"


def test_max_cost_stops_before_the_call_that_would_cross_it_with_the_prices_the_job_started_with(
    host: DevHostProcess,
) -> None:
    jobs = JobClient(host)
    # The plan call may run its whole timeout (60 s) on a 4 GB instance: 240 GB-s, 0.00624 USD On Demand.
    job_id = jobs.submit(MIXED_Q, constraints={"budget": {"max_cost": 0.001}})
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "failed" and view["error"]["code"] == "BUDGET_EXCEEDED"
    assert view["error"]["message"].startswith("stopped before planning")
    assert view["error"]["message"].endswith("the meter that crosses it: flex.gb_seconds")
    assert not [e for e in history(host, job_id) if e["EventType"] == "TaskCompleted"]  # nothing ran
    # A failed job gets its cost event too (the orchestrator's, once): what ran is its start alone.
    [line] = [x for x in host.output().splitlines() if f"job {job_id} cost " in x]
    assert f"job {job_id} cost {view['cost']['total']:.8f} USD" in line
    # The job's input keeps the per-call prices of the table in force when it started.
    params = {**host.system_code, "showInput": "true"}
    started = host.client.get(host.webhook(f"instances/{job_id}"), params=params).json()["input"]
    prices = (json.loads(started) if isinstance(started, str) else started)["policy"]["call_prices"]
    assert prices == {
        "table": "2026-11",
        "per_call": {"flex.executions": pytest.approx(2 * 0.40 / 1_000_000)},
        "per_second": {"flex.gb_seconds": pytest.approx(4 * 0.000026)},
    }
    # A budget the whole job fits in lets it finish.
    done = jobs.wait(jobs.submit(MIXED_Q, constraints={"budget": {"max_cost": 0.05}}), timeout_s=120)
    assert done["status"] == "completed", done.get("error")


SQL_Q = "Which region had the most returns in Q3?"


def job_cost_lines(host: DevHostProcess, job_id: str) -> list[str]:
    return [line for line in host.output().splitlines() if f"job {job_id} cost " in line]


def test_a_cancelled_job_is_charged_what_ran_once_in_its_view_its_list_row_and_its_event(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})  # planned and drafted its SQL: two calls ran
    assert jobs.cancel(job_id).status_code == 202
    view = jobs.wait(job_id, {"cancelled"}, timeout_s=120)
    cost = view["cost"]
    meters = {m["meter"]: m for m in cost["by_meter"]}
    # Counted here from the history the management API returns: what ran before the cancel, and the terminate.
    events = history(host, job_id)
    kinds = [e["EventType"] for e in events]
    tasks = [e for e in events if e["EventType"] in ("TaskCompleted", "TaskFailed")]
    assert len(tasks) >= 2 and "ExecutionTerminated" in kinds
    expected = 1 + 2 * len(tasks) + sum(kinds.count(k) for k in ("TimerFired", "EventRaised", "ExecutionTerminated"))
    assert meters["durable.actions"]["quantity"] == expected
    seconds = sum((at(e["Timestamp"]) - at(e["ScheduledTime"])).total_seconds() for e in tasks)
    assert meters["flex.gb_seconds"]["quantity"] == pytest.approx(seconds * 4, abs=1e-4) and seconds > 0
    assert cost["total"] > 0 and cost["total"] == pytest.approx(sum(m["cost"] or 0 for m in cost["by_meter"]))
    # The orchestrator never ran again: the API logged the job.cost event when it first saw the job ended.
    lines = job_cost_lines(host, job_id)
    assert lines == [lines[0]] and f"job {job_id} cost {cost['total']:.8f} USD" in lines[0]
    # The job list shows the same total, and listing or viewing again logs nothing more.
    listed = jobs.http.get("/api/jobs", params={"status": "cancelled", "limit": 100}).json()["jobs"]
    row = next(j for j in listed if j["id"] == job_id)
    assert row["cost"] == {
        "total": pytest.approx(cost["total"]),
        "currency": "USD",
        "unknown": len(cost["unknown"]),
        "complete": False,
        "status": "cancelled",
        "price_table": "2026-11",
    }
    jobs.view(job_id)
    assert len(job_cost_lines(host, job_id)) == 1


def test_the_job_list_shows_each_ended_jobs_cost_and_none_for_a_running_one(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    waiting = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(waiting, {"waiting_for_user"})
    # A job no one viewed since it ended: the list sums it the first time it lists it (from its history).
    unseen = jobs.submit(MIXED_Q)
    host.wait_status(unseen, {"Completed"}, timeout_s=120)
    listed = jobs.http.get("/api/jobs", params={"limit": 100}).json()["jobs"]
    assert next(j for j in listed if j["id"] == waiting)["cost"] is None
    assert next(j for j in listed if j["id"] == unseen)["cost"]["status"] == "completed"
    ended = [j for j in listed if j["status"] in ("completed", "failed", "cancelled")]
    assert ended
    for row in ended:
        cost = jobs.view(row["id"])["cost"]
        assert row["cost"]["total"] == pytest.approx(cost["total"]), row["id"]
        assert row["cost"]["unknown"] == len(cost["unknown"]) and row["cost"]["status"] == row["status"]
    jobs.cancel(waiting)
