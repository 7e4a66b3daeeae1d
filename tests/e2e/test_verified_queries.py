"""Verified queries over HTTP on devhost with Azurite: saved, reused with another value, guarded, still approved."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from shared.providers.sql.sampledata import ensure_sample_db
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

RETURNS_SQL = (
    "SELECT g.name AS region, COUNT(*) AS return_count FROM returns r "
    "JOIN order_items oi ON oi.order_item_id = r.order_item_id JOIN orders o ON o.order_id = oi.order_id "
    "JOIN regions g ON g.region_id = o.region_id "
    "WHERE g.name = {region} AND r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01' GROUP BY g.name"
)
REGIONS = ["North", "South", "East", "West"]
RETURNS = {
    "id": "returns-by-region-q3",
    "name": "returns by region and quarter",
    "question": "How many returns did the {region} region have in Q3?",
    "sql": RETURNS_SQL,
    "variables": {"region": {"values": REGIONS}},
}
CONTACTS = {
    "id": "contacts-by-segment",
    "name": "contacts on file by segment",
    "question": "How many customers in the {segment} segment have contact details on file?",
    "sql": "SELECT COUNT(*) AS contacts FROM customer_contacts cc JOIN customers c ON c.customer_id = cc.customer_id "
    "WHERE c.segment = {segment}",
    "variables": {"segment": {"values": ["Business", "Consumer"]}},
}


@pytest.fixture(scope="module")
def jobs(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "vq" + uuid.uuid4().hex[:12]}
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("verified-host"), env=env)
    proc.start(timeout_s=180)
    yield JobClient(proc)
    proc.stop()


def direct(sql: str) -> list[list[Any]]:
    with sqlite3.connect(ensure_sample_db()) as conn:
        return [list(r) for r in conn.execute(sql)]


def test_save_list_and_refuse_what_the_guard_or_the_slots_refuse(jobs: JobClient) -> None:
    saved = jobs.http.post("/api/verified-queries", json=RETURNS)
    assert saved.status_code == 201, saved.text
    body = saved.json()
    assert body["approved_at"] and len(body["catalog_version"]) == 12 and body["retired"] is False
    assert jobs.http.post("/api/verified-queries", json=RETURNS).json()["error"]["code"] == "VERIFIED_QUERY_EXISTS"
    listed = jobs.http.get("/api/verified-queries").json()["verified_queries"]
    assert [q["id"] for q in listed] == ["returns-by-region-q3"]

    writes = RETURNS | {"id": "bad-write", "sql": "DELETE FROM returns WHERE {region} = 1"}
    refused = jobs.http.post("/api/verified-queries", json=writes)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_VERIFIED_QUERY"
    assert refused.json()["error"]["field"] == "sql"
    unslotted = RETURNS | {"id": "bad-slots", "question": "How many returns in Q3?"}
    refused = jobs.http.post("/api/verified-queries", json=unslotted)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_VERIFIED_QUERY"
    quoted = RETURNS | {"id": "bad-value", "variables": {"region": {"values": ["x' OR '1'='1"]}}}
    assert jobs.http.post("/api/verified-queries", json=quoted).status_code == 400


def test_a_later_job_reuses_it_with_another_region_and_retiring_stops_that(jobs: JobClient) -> None:
    jobs.http.post("/api/verified-queries", json=RETURNS)  # 201, or 409 when the test above saved it
    view = jobs.wait(jobs.submit("How many returns did the South region have in Q3?"), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    [sql_step] = [s for s in view["steps"] if s["kind"] == "execute_azure_sql"]
    out = sql_step["output"]
    assert out["verified_query"]["id"] == "returns-by-region-q3"
    assert out["verified_query"]["values"] == {"region": "South"}
    # The guard still ran: it capped the rows; the result is the database's own.
    assert "limit" in out["sql"].lower() and "'South'" in out["sql"]
    assert out["rows"] == direct(RETURNS_SQL.replace("{region}", "'South'"))
    # The answer says which verified query answered, cites it, and its figure checks against the cells.
    answer = view["answer"]
    assert "verified query 'returns by region and quarter'" in answer["text"]
    [cited] = [c for c in answer["citations"] if c["kind"] == "sql"]
    assert "verified query" in (cited["title"] or "")
    assert answer["claims"] and all(c["check"]["status"] == "verified" for c in answer["claims"])

    retired = jobs.http.delete("/api/verified-queries/returns-by-region-q3")
    assert retired.status_code == 200 and retired.json()["retired"] is True
    assert jobs.http.get("/api/verified-queries").json()["verified_queries"] == []
    again = jobs.wait(jobs.submit("How many returns did the South region have in Q3?"), timeout_s=180)
    [sql_step] = [s for s in again["steps"] if s["kind"] == "execute_azure_sql"]
    assert "verified_query" not in (sql_step.get("output") or {})


def test_a_verified_query_on_a_sensitive_table_still_needs_approval(jobs: JobClient) -> None:
    assert jobs.http.post("/api/verified-queries", json=CONTACTS).status_code == 201
    question = "How many customers in the Business segment have contact details on file?"
    # Without an approval policy that asks, the sensitive read is refused, verified or not.
    refused_id = jobs.submit(question)
    refused = jobs.wait(refused_id, {"waiting_for_user"}, timeout_s=180)["waiting"]
    assert refused["kind"] == "error" and refused["details"]["error"]["code"] == "SQL_REJECTED"
    assert "sensitive_table" in refused["details"]["error"]["message"] and "'Business'" in refused["details"]["sql"]
    assert jobs.answer(refused_id, "abort").status_code == 202
    # With approval.sql=sensitive, the job shows the verified statement and runs it once approved.
    job_id = jobs.submit(question, approval={"sql": "sensitive"})
    waiting = jobs.wait(job_id, {"waiting_for_user"}, timeout_s=180)["waiting"]
    assert waiting["kind"] == "approval" and waiting["details"]["sensitive_tables"] == ["customer_contacts"]
    assert "'Business'" in waiting["details"]["sql"]
    assert jobs.answer(job_id, "approve").status_code == 202
    view = jobs.wait(job_id, timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    [sql_step] = [s for s in view["steps"] if s["kind"] == "execute_azure_sql"]
    assert sql_step["output"]["verified_query"]["id"] == "contacts-by-segment"
    assert sql_step["output"]["sql"] == waiting["details"]["sql"]


def test_the_cli_applies_lists_and_retires(jobs: JobClient, tmp_path: Path) -> None:
    host = jobs.host
    assert host.keys is not None
    cli = [sys.executable, "-m", "devhost", "verified-queries"]
    where = ["--url", host.base_url, "--key", host.keys.function]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args, *where], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)

    spec = tmp_path / "orders.json"
    spec.write_text(json.dumps(RETURNS | {"id": "orders-by-region-cli", "name": "from the CLI"}), encoding="utf-8")
    applied = run("apply", "-f", str(spec))
    assert applied.returncode == 0 and "saved verified query orders-by-region-cli" in applied.stdout, applied
    assert "edited verified query orders-by-region-cli" in run("apply", "-f", str(spec)).stdout
    listed = run("list", "--json")
    assert "orders-by-region-cli" in [q["id"] for q in json.loads(listed.stdout)]
    assert run("retire", "orders-by-region-cli").returncode == 0
    assert "orders-by-region-cli" not in [q["id"] for q in json.loads(run("list", "--json").stdout)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(RETURNS | {"id": "bad-cli", "sql": "DROP TABLE returns -- {region}"}), encoding="utf-8")
    refused = run("apply", "-f", str(bad))
    assert refused.returncode == 2 and "INVALID_VERIFIED_QUERY" in refused.stdout + refused.stderr
