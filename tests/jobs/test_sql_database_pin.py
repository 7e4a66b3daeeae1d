"""The database a SQL draft was made on is pinned by the orchestrator: the approved statement runs there."""

from __future__ import annotations

from typing import Any

from tests.jobs.test_policy_inline import ANSWER_OK, Script, ok, run

PLAN = {
    "steps": [
        {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": {"question": "returns by region"}},
        {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
    ]
}
CHOICE = {"choice": "postgresql", "reason": "the question names it", "decided_by": "rules"}
DRAFT = {"sql": "SELECT 1", "tables": ["orders"], "sensitive_tables": [], "draft": True, "database": CHOICE}
ROWS = {"sql": "SELECT 1", "columns": ["x"], "rows": [[1]], "row_count": 1, "dialect": "postgres"}


def test_the_approval_shows_the_database_and_the_run_is_pinned_to_it() -> None:
    script = Script(plan=[ok(PLAN)], execute_azure_sql=[ok(DRAFT), ok(ROWS)], generate_response=[ok(ANSWER_OK)])

    def answer(_event: str) -> Any:
        return {"answer": "approve"}

    result, ctx = run(script, answer, approval={"sql": "always"})
    assert result["status"] == "completed"
    runs = [p["execution_context"] for n, p in script.calls if n == "execute_azure_sql"]
    assert runs[0]["sql_mode"] == "draft" and runs[0]["sql_database"] is None
    assert runs[1]["sql_database"] == "postgresql" and runs[1]["approved_sql"] == "SELECT 1"


def test_a_plan_or_an_edit_cannot_pin_a_database() -> None:
    plan = {
        "steps": [
            {"id": "s1", "kind": "execute_azure_sql", "title": "d", "input": {"question": "q", "sql_database": "x"}},
            {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
        ]
    }
    script = Script(plan=[ok(plan)])
    result, _ = run(script)
    assert result["status"] == "failed" and "sql_database" in result["error"]["message"]
