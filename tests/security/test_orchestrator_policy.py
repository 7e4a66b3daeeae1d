"""The orchestrator's SQL policy, driven inline: every path by which a plan, a timeout or a user could widen access.

The plan and the answer are scripted executor outputs; execute_azure_sql is the real executor (guard
and access check) over a database that records what it was asked to run, so these tests pin both the
orchestrator's decisions and what reaches the database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors.runner import run_executor
from shared.jobs.contracts import ExecutorOutput, Usage
from shared.providers.clients import Clients
from shared.providers.interfaces import QueryRows
from shared.providers.sql.catalog import load_catalog
from shared.runtime.settings import Settings

CONTACTS_SQL = "SELECT email, phone FROM customer_contacts"
REGIONS_SQL = "SELECT name FROM regions"
ANSWER_OK = {"answer": "Done.", "citations": []}
EMAIL = "jack.thomas1@example.com"


def ok(result: dict[str, Any]) -> dict[str, Any]:
    return ExecutorOutput(status="success", result=result, usage=Usage(tokens_input=5)).model_dump(mode="json")


def plan_with(sql_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "steps": [
            {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": sql_input},
            {
                "id": "s2",
                "kind": "generate_response",
                "title": "answer",
                "input": {"question": "q"},
                "depends_on": ["s1"],
            },
        ]
    }


class RecordingDatabase:
    """Records every statement it is asked to run and how (returns one contact-like row)."""

    dialect = "sqlite"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def execute(self, sql: str, **kwargs: Any) -> QueryRows:
        self.calls.append((sql, kwargs))
        return QueryRows(columns=["email"], rows=[[EMAIL]])


class Harness:
    """Scripted plan and answer; the real SQL executor; scripted user answers, recording each question."""

    def __init__(self, plan: dict[str, Any], answers: list[Any], *, sql_outputs: list[dict[str, Any]] | None = None):
        self.plan = plan
        self.answers = list(answers)
        self.sql_outputs = list(sql_outputs or [])
        self.db = RecordingDatabase()
        self.clients = Clients(Settings(), database=self.db, catalog=load_catalog())
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.questions: list[dict[str, Any]] = []
        self.ctx: InlineContext | None = None

    def activity(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, payload))
        if name == "plan":
            return ok(self.plan)
        if name == "generate_response":
            return ok(ANSWER_OK)
        if name == "execute_azure_sql" and self.sql_outputs and payload["execution_context"].get("sql_mode") == "run":
            return self.sql_outputs.pop(0)
        return run_executor(payload, expected_type=name, clients=self.clients)

    def answer(self, event: str) -> Any:
        assert self.ctx is not None
        self.questions.append(self.ctx.custom_status["waiting"])
        return self.answers.pop(0) if self.answers else None  # None: nobody answers, the wait expires

    def run(self, **request: Any) -> dict[str, Any]:
        job = {
            "job_id": "j1",
            "request": {"question": "Who are our customers?", **request},
            # Unanswered questions expire after a second, so a broken barrier fails instead of hanging.
            "policy": {"max_attempts_per_model": 1, "first_retry_ms": 1, "max_retry_ms": 5, "user_wait_seconds": 1},
        }
        self.ctx = InlineContext(job, self.activity, self.answer)
        return dict(run_inline(job_orchestrator_body, self.ctx))

    def sql_calls(self) -> list[dict[str, Any]]:
        return [p for n, p in self.calls if n == "execute_azure_sql"]

    def ran(self) -> list[str]:
        return [sql for sql, _ in self.db.calls]


def guarded(sql: str) -> str:
    out = run_executor(
        {
            "task_id": "t",
            "executor_type": "execute_azure_sql",
            "task": {"question": "q", "sql": sql},
            "execution_context": {"sql_mode": "draft"},
        },
        clients=Clients(Settings(), database=RecordingDatabase(), catalog=load_catalog()),
    )
    return str(out["result"]["sql"])


@pytest.mark.parametrize(
    "bad_input",
    [
        {"question": "contacts", "sql": CONTACTS_SQL, "allow_sensitive": True},
        {"question": "contacts", "sql": CONTACTS_SQL, "mode": "run"},
        {"question": "contacts", "approved_sql": CONTACTS_SQL},
    ],
)
@pytest.mark.parametrize("approval", ["never", "always"])
def test_a_plan_that_sets_a_security_field_fails_planning(bad_input: dict[str, Any], approval: str) -> None:
    # The plan activity's output is not trusted: the orchestrator validates it again.
    h = Harness(plan_with(bad_input), [])
    result = h.run(approval={"sql": approval})
    assert result["status"] == "failed" and result["error"]["code"] == "BAD_REQUEST"
    field = next(k for k in bad_input if k not in ("question", "sql"))
    assert "planning failed" in result["error"]["message"] and f"input.{field}" in result["error"]["message"]
    assert "s1" in result["error"]["message"]
    assert h.sql_calls() == [] and h.ran() == []


@pytest.mark.parametrize("approval", ["always", "sensitive"])
def test_plan_sql_on_a_sensitive_table_waits_showing_that_exact_sql(approval: str) -> None:
    h = Harness(plan_with({"question": "contacts", "sql": CONTACTS_SQL}), ["approve"])
    result = h.run(approval={"sql": approval})
    assert result["status"] == "completed"
    [question] = h.questions
    shown = question["details"]["sql"]
    assert question["kind"] == "approval" and shown == guarded(CONTACTS_SQL)
    assert question["details"]["sensitive_tables"] == ["customer_contacts"]
    draft, run = h.sql_calls()
    assert draft["execution_context"]["sql_mode"] == "draft" and draft["execution_context"].get("approved_sql") is None
    assert set(draft["task"]) <= {"question", "sql"} and set(run["task"]) <= {"question", "sql"}
    assert run["execution_context"]["sql_mode"] == "run" and run["execution_context"]["approved_sql"] == shown
    assert h.db.calls == [(shown, h.db.calls[0][1])] and h.db.calls[0][1]["sensitive"] is True


def test_approval_never_rejects_a_sensitive_statement_with_sql_rejected() -> None:
    h = Harness(plan_with({"question": "contacts", "sql": CONTACTS_SQL}), ["abort"])
    result = h.run(approval={"sql": "never"})
    assert result["status"] == "failed" and result["error"]["code"] == "SQL_REJECTED"
    message = result["error"]["message"]
    assert "customer_contacts" in message and "approval.sql" in message and "sensitive" in message
    [question] = h.questions
    assert question["kind"] == "error" and "approval.sql" in question["question"]
    assert h.ran() == []


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_an_expired_wait_never_approves_a_sensitive_read() -> None:
    h = Harness(plan_with({"question": "contacts", "sql": CONTACTS_SQL}), [])
    result = h.run(approval={"sql": "always", "timeout_seconds": 1, "on_timeout": "approve"})
    assert result["status"] == "failed" and result["error"]["code"] == "WAIT_EXPIRED"
    assert "sensitive" in result["error"]["message"] and "never approves" in result["error"]["message"]
    assert result["error"]["step_id"] == "s1"
    assert len(h.questions) == 1 and h.ran() == []


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_an_expired_wait_may_still_approve_an_ordinary_statement_but_records_no_approval() -> None:
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), [])
    result = h.run(approval={"sql": "always", "timeout_seconds": 1, "on_timeout": "approve"})
    assert result["status"] == "completed"
    run = h.sql_calls()[-1]
    assert run["execution_context"]["approved_sql"] is None
    assert h.ran() == [guarded(REGIONS_SQL)] and h.db.calls[0][1]["sensitive"] is False


@pytest.mark.parametrize(
    "bad_edit",
    [
        {"action": "edit", "sql": CONTACTS_SQL, "allow_sensitive": True},
        {"action": "edit", "input": {"sql": CONTACTS_SQL, "mode": "run"}},
        {"action": "edit", "approved_sql": CONTACTS_SQL},
    ],
)
def test_an_edit_with_a_security_field_at_the_approval_is_never_merged(bad_edit: dict[str, Any]) -> None:
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), [bad_edit, "reject"])
    result = h.run(approval={"sql": "always"})
    assert result["status"] == "completed"  # rejected: the step is skipped, the job goes on
    first, second = h.questions
    assert second["question_id"] != first["question_id"] and second["details"]["sql"] == first["details"]["sql"]
    assert "cannot be edited" in second["details"]["refused_edit"]
    assert [c["execution_context"]["sql_mode"] for c in h.sql_calls()] == ["draft"]
    assert h.ran() == []


def test_an_edit_with_a_security_field_after_a_failure_is_never_merged() -> None:
    failed = ExecutorOutput.failure("SEARCH_ERROR", "index missing").model_dump(mode="json")  # type: ignore[arg-type]
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), [], sql_outputs=[failed])
    h.answers = [{"action": "edit", "sql": CONTACTS_SQL, "allow_sensitive": True}, "abort"]
    result = h.run(approval={"sql": "never"})
    assert result["status"] == "failed" and "aborted" in result["error"]["message"]
    first, second = h.questions
    assert first["kind"] == second["kind"] == "error" and "allow_sensitive" in second["details"]["refused_edit"]
    assert all("allow_sensitive" not in c["task"] for c in h.sql_calls())
    assert h.ran() == []


def test_edited_sql_is_guarded_and_shown_for_approval_again() -> None:
    h = Harness(
        plan_with({"question": "regions", "sql": REGIONS_SQL}),
        [{"action": "edit", "sql": CONTACTS_SQL}, "approve"],
    )
    result = h.run(approval={"sql": "always"})
    assert result["status"] == "completed"
    first, second = h.questions
    assert first["details"]["sql"] == guarded(REGIONS_SQL)
    assert second["details"]["sql"] == guarded(CONTACTS_SQL)  # the guarded edit, not the raw text
    assert second["details"]["sensitive_tables"] == ["customer_contacts"]
    assert [c["execution_context"]["sql_mode"] for c in h.sql_calls()] == ["draft", "draft", "run"]
    assert h.ran() == [guarded(CONTACTS_SQL)] and h.db.calls[0][1]["sensitive"] is True


def test_an_edit_after_an_approved_run_failed_goes_back_to_approval() -> None:
    failed = ExecutorOutput.failure("SQL_ERROR", "no such column").model_dump(mode="json")  # type: ignore[arg-type]
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), [], sql_outputs=[failed])
    h.answers = ["approve", {"action": "edit", "sql": CONTACTS_SQL}, "reject"]
    result = h.run(approval={"sql": "always"})
    assert result["status"] == "completed"
    kinds = [q["kind"] for q in h.questions]
    assert kinds == ["approval", "error", "approval"]
    assert h.questions[2]["details"]["sql"] == guarded(CONTACTS_SQL)
    assert h.ran() == []  # the edited statement was shown for approval and rejected: nothing ran


def test_an_edited_question_is_drafted_again_not_run_with_the_old_sql() -> None:
    drafted: list[str] = []
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), [{"action": "edit", "question": "x"}, "reject"])
    original: Callable[[str, dict[str, Any]], dict[str, Any]] = h.activity

    def activity(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if name == "execute_azure_sql" and "sql" not in payload["task"]:
            drafted.append(payload["task"]["question"])
            h.calls.append((name, payload))
            return ok({"sql": guarded("SELECT region_id FROM regions"), "tables": ["regions"], "sensitive_tables": []})
        return original(name, payload)

    h.activity = activity  # type: ignore[method-assign]
    assert h.run(approval={"sql": "always"})["status"] == "completed"
    assert drafted == ["x"] and h.questions[1]["details"]["sql"] == guarded("SELECT region_id FROM regions")


def test_a_lying_draft_cannot_skip_the_approval_of_a_sensitive_read() -> None:
    # The draft activity claims no sensitive tables; with the "sensitive" policy the orchestrator then records
    # no approval, and the run refuses the statement anyway.
    h = Harness(plan_with({"question": "contacts", "sql": CONTACTS_SQL}), ["abort"])
    original = h.activity

    def activity(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        out = original(name, payload)
        if name == "execute_azure_sql" and payload["execution_context"].get("sql_mode") == "draft":
            out["result"]["sensitive_tables"] = []
        return out

    h.activity = activity  # type: ignore[method-assign]
    result = h.run(approval={"sql": "sensitive"})
    assert result["status"] == "failed" and result["error"]["code"] == "SQL_REJECTED"
    assert h.ran() == []


def test_an_invalid_supervisor_decision_is_ignored() -> None:
    plan = {
        "steps": [
            {"id": "s1", "kind": "consult_rag", "title": "docs", "input": {"query": "refunds"}},
            {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": "q"}},
        ]
    }
    h = Harness(plan, [])
    original = h.activity

    def activity(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if name == "supervise":
            h.calls.append((name, payload))
            return ok({"action": "choose_tool", "executor_type": "execute_azure_sql", "reason": 5})
        if name == "consult_rag":
            h.calls.append((name, payload))
            return ok({"query": "refunds", "chunks": []})
        return original(name, payload)

    h.activity = activity  # type: ignore[method-assign]
    assert h.run(mode="hybrid")["status"] == "completed"
    assert h.sql_calls() == []


def test_invalid_and_refused_answers_ask_the_same_question_again_keeping_the_last_refusal() -> None:
    bad_edit = {"action": "edit", "sql": CONTACTS_SQL, "allow_sensitive": True}
    h = Harness(plan_with({"question": "regions", "sql": REGIONS_SQL}), ["bogus", bad_edit, "nonsense", "reject"])
    result = h.run(approval={"sql": "always"})
    assert result["status"] == "completed"
    ids = [q["question_id"] for q in h.questions]
    assert ids == ["s1-q1", "s1-q2", "s1-q3", "s1-q4"]
    assert len({(q["kind"], q["question"], q["details"]["sql"]) for q in h.questions}) == 1
    assert ["refused_edit" in q["details"] for q in h.questions] == [False, False, True, True]
    assert h.questions[2]["details"]["refused_edit"] == h.questions[3]["details"]["refused_edit"]
    assert h.ran() == []
