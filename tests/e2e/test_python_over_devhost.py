"""run_python end to end on a devhost process: SQL rows → code in the local sandbox → a number and a PNG chart,
the chart fetched over HTTP, for a planned job and an agent job (offline model, SQLite sample, bubblewrap).

Needs bubblewrap and ``.venv-sandbox`` (``make sandbox``): skipped without them, failed when ``SANDBOX_REQUIRED=1``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.providers.sql.sampledata import ensure_sample_db
from shared.sandbox.local import LocalSandbox
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MONTHLY_REVENUE = (
    "SELECT strftime('%Y-%m', o.order_date) AS month, ROUND(SUM(i.quantity * i.unit_price), 2) "
    "FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "WHERE o.order_date >= '2025-01-01' AND o.order_date < '2026-01-01' GROUP BY month ORDER BY month"
)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    if not LocalSandbox().available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    data = tmp_path_factory.mktemp("python-host")
    env = {"SANDBOX_PROVIDER": "local", "ARTIFACT_STORE": "local", "ARTIFACT_PATH": str(data / "artifacts.sqlite3")}
    host = DevHostProcess(REPO_ROOT, data / "host", env=env)
    host.start()
    yield JobClient(host)
    host.stop()


def expected_growth() -> float:
    with sqlite3.connect(ensure_sample_db()) as db:
        values = [v for _, v in db.execute(MONTHLY_REVENUE)]
    return round(values[-1] / values[0] - 1, 6)


def chart_of(view: dict[str, Any], step_id: str) -> dict[str, Any]:
    step = next(s for s in view["steps"] if s["id"] == step_id)
    assert step["state"] == "succeeded", step
    (chart,) = [a for a in step["artifacts"] if a["name"] == "chart.png"]
    return dict(chart)


def fetch(jobs: JobClient, job_id: str, ref: str, **headers: str) -> httpx.Response:
    return jobs.http.get(f"/api/jobs/{job_id}/artifacts/{ref}", headers=headers or None)


def test_a_planned_job_computes_the_growth_rate_and_charts_it(jobs: JobClient) -> None:
    job_id = jobs.submit(QUESTION, tools=["python.run"])
    view = jobs.wait(job_id)
    assert view["status"] == "completed", view.get("error")
    assert [s["kind"] for s in view["steps"]] == ["execute_azure_sql", "run_python", "generate_response"]
    output = next(s for s in view["steps"] if s["kind"] == "run_python")["output"]
    assert output["result"]["growth_rate"] == pytest.approx(expected_growth(), abs=1e-6)
    assert output["result"]["from"] == "2025-01" and output["result"]["to"] == "2025-12"
    assert output["sandbox"]["provider"] == "local" and output["sandbox"]["wall_ms"] > 0
    # The answer is told what the code computed, in words (never a JSON object cut short).
    assert "computed with Python: " in view["answer"]["text"] and "growth_rate = " in view["answer"]["text"]
    chart = chart_of(view, "s2")
    got = fetch(jobs, job_id, chart["ref"])
    assert got.status_code == 200 and got.content.startswith(PNG_MAGIC) and len(got.content) == chart["size"]
    assert got.headers["content-type"] == "image/png"
    assert got.headers["x-content-type-options"] == "nosniff" and "sandbox" in got.headers["content-security-policy"]


def test_the_artifact_route_answers_like_the_job_view(jobs: JobClient) -> None:
    job_id = jobs.submit(QUESTION, tools=["python.run"])
    view = jobs.wait(job_id)
    ref = chart_of(view, "s2")["ref"]
    other = jobs.submit("How many orders were placed in 2025?")
    jobs.wait(other)
    # Another job's id with this ref finds nothing; a ref of another shape is refused; no key is 401.
    assert fetch(jobs, other, ref).json()["error"]["code"] == "ARTIFACT_NOT_FOUND"
    assert fetch(jobs, "no-such-job", ref).json()["error"]["code"] == "JOB_NOT_FOUND"
    bad = fetch(jobs, job_id, "chart.png")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "ref"
    anonymous = httpx.get(f"{jobs.host.base_url}/api/jobs/{job_id}/artifacts/{ref}")
    assert anonymous.status_code == 401


def test_without_python_run_the_same_question_runs_no_code(jobs: JobClient) -> None:
    view = jobs.wait(jobs.submit(QUESTION))
    assert view["status"] == "completed"
    assert "run_python" not in [s["kind"] for s in view["steps"]]


def test_an_agent_job_calls_python_run_over_the_rows_it_found(jobs: JobClient) -> None:
    view = jobs.wait(jobs.submit(QUESTION, mode="agent", tools=["python.run"]))
    assert view["status"] == "completed", view.get("error")
    calls = [(s["id"], s["kind"]) for s in view["steps"] if s.get("turn")]
    assert calls == [("t1", "execute_azure_sql"), ("t2", "python.run")]
    step = next(s for s in view["steps"] if s["id"] == "t2")
    assert step["output"]["inputs"] == {"rows": "t1"}
    assert step["output"]["result"]["growth_rate"] == pytest.approx(expected_growth(), abs=1e-6)
    got = fetch(jobs, view["id"], chart_of(view, "t2")["ref"])
    assert got.status_code == 200 and got.content.startswith(PNG_MAGIC)


def test_writes_files_approval_shows_the_files_then_runs_the_approved_code(jobs: JobClient) -> None:
    job_id = jobs.submit(QUESTION, tools=["python.run"], approval={"python": "writes_files"})
    waiting = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
    assert waiting["kind"] == "approval" and waiting["step_id"] == "s2"
    assert [f["name"] for f in waiting["details"]["files"]] == ["chart.png"]
    assert "growth_rate" in waiting["details"]["code"]
    assert jobs.answer(job_id, "approve").status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed"
    assert fetch(jobs, job_id, chart_of(view, "s2")["ref"]).status_code == 200
