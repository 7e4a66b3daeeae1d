"""A retried SQL step shows the SQL writer its failed query and the error, so it does not write it again."""

from __future__ import annotations

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.providers.llm.test_executors_over_fake import SQL, _payload, clients  # noqa: F401 (fixture)

FAILED = "SELECT region_name FROM regions"


def test_the_previous_attempt_reaches_the_sql_writer_as_data(fake_openai: FakeOpenAI, clients: Clients) -> None:  # noqa: F811
    fake_openai.always(JsonReply(SQL), task="write_sql")
    previous = {"sql": FAILED, "error": {"code": "SQL_REJECTED", "message": "unknown column `region_name`"}}
    out = run_executor(
        _payload("execute_azure_sql", {"question": "list regions"}, previous_attempt=previous), clients=clients
    )
    assert out["status"] == "success", out
    user = fake_openai.requests_for("write_sql")[-1].user_text
    assert '<untrusted_data name="previous_attempt">' in user
    assert f"- your previous query: {FAILED}" in user
    assert "- it failed with SQL_REJECTED: unknown column `region_name`" in user
    # A first attempt sends no such block.
    run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert "previous_attempt" not in fake_openai.requests_for("write_sql")[-1].user_text


def test_a_database_error_returns_the_statement_that_failed(fake_openai: FakeOpenAI, clients: Clients) -> None:  # noqa: F811
    # Valid for the guard and the catalog, but the value makes SQLite fail at run time.
    failing = {"sql": "SELECT name FROM regions WHERE abs(-9223372036854775808) > 0", "tables": ["regions"]}
    fake_openai.always(JsonReply(failing), task="write_sql")
    out = run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert out["status"] == "failed" and out["error"]["code"] == "SQL_ERROR", out
    assert out["result"]["sql"].startswith("SELECT name FROM regions WHERE") and out["result"]["executed"] is True
    assert out["usage"]["total_tokens"] > 0 and out["model_used"] == "chat-dep"
