"""choose_sql_tool over the SQLite sample and a real PostgreSQL; an approved statement stays on its database."""

from __future__ import annotations

from typing import Any

import pytest

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from tests.providers.sql.postgres.conftest import Sample

pytestmark = pytest.mark.slow  # a real server starts for these tests

QUESTION = "Which region had the most returns in Q3?"


@pytest.fixture(scope="module")
def clients(pg_sample: Sample) -> Clients:
    settings = pg_sample.settings(sql_provider="sqlite", sql_provider_choices="postgresql")
    return Clients(settings)


def _run(clients: Clients, task: dict[str, Any], **context: Any) -> dict[str, Any]:
    payload = {
        "task_id": "t1",
        "executor_type": "execute_azure_sql",
        "task": task,
        "execution_context": {"job_id": "job-choice", "step_id": "s1", **context},
    }
    return run_executor(payload, clients=clients)


def test_a_question_that_names_no_database_runs_on_the_configured_one(clients: Clients) -> None:
    out = _run(clients, {"question": QUESTION})
    assert out["status"] == "success", out
    assert out["result"]["dialect"] == "sqlite"
    assert out["result"]["database"]["choice"] == "sqlite" and out["result"]["database"]["decided_by"] == "rules"


def test_a_question_that_names_postgres_runs_there_with_the_same_answer(clients: Clients) -> None:
    lite = _run(clients, {"question": QUESTION})
    out = _run(clients, {"question": f"{QUESTION} Use the postgres database."})
    assert out["status"] == "success", out
    assert out["result"]["dialect"] == "postgres" and out["result"]["database"]["choice"] == "postgresql"
    assert "postgres" in out["result"]["database"]["reason"]
    assert out["result"]["rows"] == lite["result"]["rows"]


def test_an_approved_statement_runs_on_the_database_it_was_drafted_for(clients: Clients) -> None:
    contacts = "SELECT email FROM customer_contacts ORDER BY customer_id"
    draft = _run(clients, {"question": "postgres contacts", "sql": contacts}, sql_mode="draft")
    assert draft["status"] == "success" and draft["result"]["database"]["choice"] == "postgresql"
    guarded = draft["result"]["sql"]
    # The run's question no longer names postgres: the pinned database wins over a new decision.
    run = _run(clients, {"question": "contacts", "sql": contacts}, approved_sql=guarded, sql_database="postgresql")
    assert run["status"] == "success", run
    assert run["result"]["dialect"] == "postgres" and run["result"]["database"]["choice"] == "postgresql"


def test_a_pinned_database_that_is_not_configured_is_a_config_error(clients: Clients) -> None:
    out = _run(clients, {"question": QUESTION}, sql_database="azure_sql")
    assert out["status"] == "failed" and out["error"]["code"] == "CONFIG_ERROR"
    assert "azure_sql" in out["error"]["message"]
