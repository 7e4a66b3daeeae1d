"""A failed SQL step shows the statement that failed, and a retry feeds it back to the SQL writer."""

from __future__ import annotations

from typing import Any

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.jobs.contracts import ExecutorOutput, Usage
from tests.jobs.test_policy_inline import Script, job_input, ok

SQL_PLAN = {
    "steps": [
        {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": {"question": "returns by region"}},
        {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}, "depends_on": ["s1"]},
    ]
}
BAD_SQL = "SELECT region_name, COUNT(*) FROM returns GROUP BY region_name"
GOOD = {"question": "returns by region", "sql": "SELECT 1", "columns": ["n"], "rows": [[1]], "row_count": 1}


def rejected(sql: str) -> dict[str, Any]:
    message = "SQL rejected (UNKNOWN_COLUMN): unknown column `region_name`"
    out = ExecutorOutput.failure(
        "SQL_REJECTED",  # type: ignore[arg-type]
        message,
        usage=Usage(tokens_input=5),
        result={"sql": sql, "executed": False},
    )
    return out.model_dump(mode="json")


def test_the_error_question_shows_the_failing_sql_and_a_retry_feeds_it_back() -> None:
    asked: list[dict[str, Any]] = []
    holder: dict[str, InlineContext] = {}

    def answer(_: str) -> Any:
        asked.append(holder["ctx"].custom_status["waiting"])
        return "retry"

    script = Script(
        plan=[ok(SQL_PLAN)],
        execute_azure_sql=[rejected(BAD_SQL), ok(GOOD)],
        generate_response=[ok({"answer": "ok", "citations": []})],
    )
    ctx = holder["ctx"] = InlineContext(job_input(approval={"sql": "never"}), script, answer)
    result = run_inline(job_orchestrator_body, ctx)
    assert result["status"] == "completed", result
    sql_calls = [p for name, p in script.calls if name == "execute_azure_sql"]
    first, second = sql_calls
    assert first["execution_context"]["previous_attempt"] is None
    previous = second["execution_context"]["previous_attempt"]
    assert previous["sql"] == BAD_SQL and previous["error"]["code"] == "SQL_REJECTED"
    assert "unknown column" in previous["error"]["message"]
    # The task itself is unchanged: the writer writes again, it is not handed the failed SQL to run.
    assert "sql" not in second["task"]
    # The question showed the statement that failed, offered for editing.
    (waiting,) = asked
    assert waiting["kind"] == "error"
    assert waiting["details"]["sql"] == BAD_SQL and waiting["details"]["input"]["sql"] == BAD_SQL
