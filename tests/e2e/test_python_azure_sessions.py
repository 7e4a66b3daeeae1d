"""A whole job (SQL → run_python → answer) with SANDBOX_PROVIDER=azure_sessions against the fake pool on loopback.

The real orchestrator body runs inline (devhost/inline.py) over the real executors; the only stand-ins are the
session pool (tests/fakes/sessions_server.py: the service's REST API over HTTPS, code run in a subprocess of the
sandbox venv, which has the pool image's pandas and matplotlib) and the managed identity (a static token),
both injected through the one client factory. Checked: one session per job (the same identifier for every
call of a job, another for the next job), the number and the chart the code made, the chart in the
artifact store. Needs ``.venv-sandbox`` (``make sandbox``): skipped without it, failed when SANDBOX_REQUIRED=1.
"""

from __future__ import annotations

import os
import sqlite3
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.providers.sql.catalog import load_catalog
from shared.providers.sql.sampledata import ensure_sample_db
from shared.runtime.artifacts import get_artifact_store
from shared.runtime.settings import Settings
from shared.sandbox.azure_sessions import SCOPE, session_identifier
from shared.sandbox.local import DEFAULT_VENV
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.sessions_server import FakeSessionsPool

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MONTHLY_REVENUE = (
    "SELECT strftime('%Y-%m', o.order_date) AS month, ROUND(SUM(i.quantity * i.unit_price), 2) "
    "FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "WHERE o.order_date >= '2025-01-01' AND o.order_date < '2026-01-01' GROUP BY month ORDER BY month"
)


@pytest.fixture(scope="module")
def pool() -> Iterator[FakeSessionsPool]:
    python = DEFAULT_VENV / "bin" / "python"
    if not python.exists():
        reason = f"{python} is missing (`make sandbox`): the fake pool runs code with the sandbox's libraries"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    with FakeSessionsPool(python=str(python)) as fake:
        yield fake


@pytest.fixture()
def clients(pool: FakeSessionsPool, tmp_path: Path) -> tuple[Clients, StaticTokenCredential]:
    settings = Settings(
        llm_provider="offline",
        search_provider="local",
        sql_provider="sqlite",
        sandbox_provider="azure_sessions",
        sandbox_sessions_endpoint=pool.endpoint,
        artifact_store="local",
        artifact_path=tmp_path / "artifacts.sqlite3",
    )
    credential = StaticTokenCredential(pool.token)
    trust = ssl.create_default_context(cafile=pool.ca_file)
    return Clients(settings, catalog=load_catalog(), sandbox_credential=credential, sandbox_tls=trust), credential


def run_job(job_id: str, clients: Clients) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The job's result, its last custom status (the job state) and the run_python outputs, in call order."""
    job = {
        "job_id": job_id,
        "request": {"question": QUESTION, "mode": "deterministic", "tools": ["python.run"]},
        "policy": {"first_retry_ms": 1, "max_retry_ms": 5},
    }

    runs: list[dict[str, Any]] = []

    def activity(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        out = run_executor(payload, expected_type=name, clients=clients)
        if name == "run_python":
            runs.append(out)
        return out

    ctx = InlineContext(job, activity, instance_id=job_id)
    result: dict[str, Any] = run_inline(job_orchestrator_body, ctx)
    return result, ctx.custom_status, runs


def expected_growth() -> float:
    with sqlite3.connect(ensure_sample_db()) as db:
        values = [v for _, v in db.execute(MONTHLY_REVENUE)]
    return round(values[-1] / values[0] - 1, 6)


def test_a_job_runs_its_code_in_one_session_of_the_pool(
    pool: FakeSessionsPool, clients: tuple[Clients, StaticTokenCredential]
) -> None:
    factory, credential = clients
    pool.calls.clear()
    result, state, runs = run_job("job-azure-1", factory)
    assert result["status"] == "completed", result.get("error")
    assert [s["kind"] for s in state["steps"]] == ["execute_azure_sql", "run_python", "generate_response"]
    (run,) = runs
    assert run["status"] == "success", run.get("error")
    output = run["result"]
    assert output["sandbox"]["provider"] == "azure_sessions"
    assert output["result"]["growth_rate"] == pytest.approx(expected_growth(), abs=1e-6)
    # The chart came back from the session and is in the artifact store.
    (chart,) = [f for f in output["files"] if f["name"] == "chart.png"]
    stored = get_artifact_store(factory.settings).get("job-azure-1", chart["ref"])
    assert stored is not None and stored[1].startswith(PNG_MAGIC) and len(stored[1]) == chart["size"]
    # Upload, execute, download: every call in the job's one session, with the factory's credential.
    assert [c.path.split("/out-")[0] for c in pool.calls] == ["/files/upload", "/code/execute", "/files/content"]
    assert {c.identifier for c in pool.calls} == {session_identifier("job-azure-1")}
    assert credential.scopes and set(credential.scopes) == {(SCOPE,)}


def test_each_job_has_its_own_session(pool: FakeSessionsPool, clients: tuple[Clients, StaticTokenCredential]) -> None:
    factory, _ = clients
    seen: dict[str, set[str]] = {}
    for job_id in ("job-azure-2", "job-azure-3"):
        pool.calls.clear()
        result, _, runs = run_job(job_id, factory)
        assert result["status"] == "completed" and [r["status"] for r in runs] == ["success"]
        seen[job_id] = {c.identifier for c in pool.calls}
    assert seen["job-azure-2"] == {session_identifier("job-azure-2")}
    assert seen["job-azure-3"] == {session_identifier("job-azure-3")}
    assert seen["job-azure-2"] != seen["job-azure-3"]
