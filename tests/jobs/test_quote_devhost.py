"""The quote over HTTP on devhost: approval.cost_over asks before the first step and reject stops the job;
budget.max_cost stops before the step that would cross it, naming the meter; a job keeps the price table
version it was quoted with when a newer table is added."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
TABLE = REPO_ROOT / "shared" / "runtime" / "prices" / "2026-11.json"


def table(version: str, storage_price: float) -> str:
    """The repo's table under another version, with Azure Storage transactions priced (made-up prices)."""
    body = json.loads(TABLE.read_text(encoding="utf-8"))
    body["version"] = version
    body["prices"]["storage.transactions"] |= {"price": storage_price, "source": "test", "date": "2000-01-01"}
    return json.dumps(body)


@pytest.fixture(scope="module")
def prices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prices")
    (folder / "2000-01.json").write_text(table("2000-01", 0.001), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, prices_dir: Path) -> Iterator[DevHostProcess]:
    env = {"COST_HOSTING": "flex_on_demand", "COST_INSTANCE_MEMORY_MB": "4096", "COST_PRICES_DIR": str(prices_dir)}
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("quote-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


def completed_tasks(host: DevHostProcess, job_id: str) -> list[str]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true"}
    resp = host.client.get(host.webhook(f"instances/{job_id}"), params=params)
    assert resp.status_code in (200, 202), resp.text  # 202 while it runs
    return [e.get("FunctionName") for e in resp.json()["historyEvents"] if e["EventType"] == "TaskCompleted"]


def test_over_cost_over_the_job_asks_with_its_quote_and_reject_stops_it_before_the_first_step(
    host: DevHostProcess,
) -> None:
    jobs = JobClient(host)
    job_id = jobs.submit(MIXED_Q, approval={"cost_over": 0.0001})
    view = jobs.wait(job_id, {"waiting_for_user"})
    waiting, quote = view["waiting"], view["quote"]
    assert waiting["kind"] == "cost" and waiting["options"] == ["approve", "reject"] and waiting["form"] == "choice"
    summary = {"low": quote["low"], "high": quote["high"], "currency": "USD"}
    assert {k: waiting["details"][k] for k in summary} == summary and waiting["details"]["cost_over"] == 0.0001
    assert quote["price_table_version"] == "2000-01" and quote["currency"] == "USD"
    assert 0 < quote["low"] <= quote["high"] and quote["high"] > 0.0001
    assert [s["step_id"] for s in quote["by_step"]] == ["(job)"] + [s["id"] for s in view["steps"]]
    # The offline model is priced (0 USD); DTS is not in use: no meter without a price on this host.
    assert quote["unknown"] == []
    assert completed_tasks(host, job_id) == ["plan"]  # nothing past planning
    assert all(s["state"] == "pending" for s in view["steps"])
    # The catalog publishes the kind of question with its options.
    kinds = {k["kind"]: k for k in jobs.http.get("/api/catalog").json()["question_kinds"]}
    assert [o["value"] for o in kinds["cost"]["options"]] == ["approve", "reject"]

    assert jobs.answer(job_id, "reject").status_code == 202
    done = jobs.wait(job_id, timeout_s=120)
    assert done["status"] == "failed" and done["error"]["code"] == "QUOTE_REJECTED"
    assert "a person rejected it" in done["error"]["message"]
    assert completed_tasks(host, job_id) == ["plan"]


def test_approved_the_job_runs_and_its_cost_falls_in_its_quote(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    job_id = jobs.submit(MIXED_Q, approval={"cost_over": 0.0001})
    jobs.wait(job_id, {"waiting_for_user"})
    assert jobs.answer(job_id, "approve").status_code == 202
    done = jobs.wait(job_id, timeout_s=120)
    assert done["status"] == "completed", done.get("error")
    quote, cost = done["quote"], done["cost"]
    assert quote["low"] <= cost["total"] <= quote["high"]
    assert cost["price_table"]["version"] == quote["price_table_version"] == "2000-01"
    # The CLI prints the quote beside the cost.
    assert host.keys is not None
    shown = subprocess.run(
        [sys.executable, "-m", "devhost", "jobs", "show", job_id, "--url", host.base_url, "--key", host.keys.function],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("quote: $"))
    assert line == f"quote: ${quote['low']:.6f} to ${quote['high']:.6f} USD (prices 2000-01)"


def test_max_cost_stops_before_the_step_that_would_cross_it_naming_the_meter(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    # A call's worst case: its 10 s timeout on 4 GB at 0.000026 USD/GB-s (0.00104) + 2 executions (0.0000008)
    # + 9 Storage transactions at 0.001 (0.009): planning fits in 0.0100412, the first step after it does not.
    worst = 10 * 4 * 0.000026 + 2 * 0.4e-6 + 9 * 0.001
    job_id = jobs.submit(MIXED_Q, constraints={"timeout_ms": 10_000, "budget": {"max_cost": worst + 4e-7}})
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "failed" and view["error"]["code"] == "BUDGET_EXCEEDED", view.get("error")
    first = view["steps"][0]["id"]
    assert view["error"]["step_id"] == first
    assert view["error"]["message"].startswith(f"stopped before {first}")
    assert view["error"]["message"].endswith("the meter that crosses it: storage.transactions")
    assert completed_tasks(host, job_id) == ["plan"]


def test_a_job_keeps_the_price_table_it_was_quoted_with_when_a_newer_one_is_added(
    host: DevHostProcess, prices_dir: Path
) -> None:
    jobs = JobClient(host)
    old = jobs.wait(jobs.submit(MIXED_Q), timeout_s=120)
    assert old["status"] == "completed", old.get("error")
    assert old["quote"]["price_table_version"] == old["cost"]["price_table"]["version"] == "2000-01"
    storage = {m["meter"]: m for m in old["cost"]["by_meter"]}["storage.transactions"]
    assert storage["unit_price"] == 0.001

    (prices_dir / "2000-02.json").write_text(table("2000-02", 0.002), encoding="utf-8")
    again = jobs.view(old["id"])
    assert again["cost"]["price_table"]["version"] == "2000-01"
    assert again["cost"]["total"] == pytest.approx(old["cost"]["total"])
    assert again["quote"] == old["quote"]
    # A job started now is quoted and priced with the newer table.
    new = jobs.wait(jobs.submit(MIXED_Q), timeout_s=120)
    assert new["quote"]["price_table_version"] == new["cost"]["price_table"]["version"] == "2000-02"
    assert {m["meter"]: m for m in new["cost"]["by_meter"]}["storage.transactions"]["unit_price"] == 0.002
    assert new["quote"]["high"] > old["quote"]["high"]
