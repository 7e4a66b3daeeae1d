"""The execute_azure_sql executor end to end over PostgreSQL (SQL_PROVIDER=postgresql), offline SQL writer."""

from __future__ import annotations

from typing import Any

import pytest

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.providers.sql.sqlite import SqliteOdbcDatabase
from tests.providers.sql.postgres.conftest import Sample

pytestmark = pytest.mark.slow  # a real server starts for these tests

QUESTION = "Which region had the most returns in Q3?"


@pytest.fixture(scope="module")
def clients(pg_sample: Sample) -> Clients:
    settings = pg_sample.settings()
    return Clients(settings)


def _step(task: dict[str, Any], **context: Any) -> dict[str, Any]:
    return {
        "task_id": "t1",
        "executor_type": "execute_azure_sql",
        "task": task,
        "execution_context": {"job_id": "job-pg", "step_id": "s1", **context},
    }


def test_a_question_is_written_guarded_and_answered_by_postgresql(
    clients: Clients, sample_db: SqliteOdbcDatabase
) -> None:
    out = run_executor(_step({"question": QUESTION}), clients=clients)
    assert out["status"] == "success", out
    result = out["result"]
    assert result["dialect"] == "postgres" and result["tables"] == ["order_items", "orders", "regions", "returns"]
    assert result["columns"] == ["region", "return_count"] and len(result["rows"]) == 1
    # The same answer as the SQLite sample gives.
    lite = sample_db.execute(
        "SELECT regions.name, COUNT(*) FROM returns JOIN order_items USING (order_item_id) JOIN orders "
        "USING (order_id) JOIN regions USING (region_id) WHERE return_date >= '2025-07-01' "
        "AND return_date < '2025-10-01' GROUP BY regions.name ORDER BY 2 DESC LIMIT 1",
        max_rows=1,
        timeout_s=10,
    )
    assert result["rows"] == lite.rows


def test_sensitive_tables_need_the_approval_of_that_exact_statement(clients: Clients) -> None:
    contacts = "SELECT email FROM customer_contacts ORDER BY customer_id"
    draft = run_executor(_step({"question": "contacts", "sql": contacts}, sql_mode="draft"), clients=clients)
    assert draft["status"] == "success" and draft["result"]["sensitive_tables"] == ["customer_contacts"]
    guarded = draft["result"]["sql"]
    refused = run_executor(_step({"question": "contacts", "sql": contacts}), clients=clients)
    assert refused["status"] == "failed" and refused["error"]["code"] == "SQL_REJECTED"
    other = run_executor(_step({"question": "contacts", "sql": contacts}, approved_sql="SELECT 1"), clients=clients)
    assert other["status"] == "failed" and other["error"]["code"] == "SQL_REJECTED"
    approved = run_executor(_step({"question": "contacts", "sql": contacts}, approved_sql=guarded), clients=clients)
    assert approved["status"] == "success", approved
    assert approved["result"]["sql"] == guarded and "@" in approved["result"]["rows"][0][0]


def test_a_write_never_reaches_the_server(clients: Clients) -> None:
    out = run_executor(_step({"question": "x", "sql": "DELETE FROM regions"}), clients=clients)
    assert out["status"] == "failed" and out["error"]["code"] == "SQL_REJECTED"
    assert out["result"] == {"sql": "DELETE FROM regions", "executed": False}
