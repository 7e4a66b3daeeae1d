"""The orchestrator's trust boundary at the unit level: typed step inputs, user edits, SQL access.

Each barrier is tested on its own: the input models (what a plan may set), the edit check (what a
user may set, shared by the HTTP edge and the orchestrator), the plan executor over a real provider
talking to the fake OpenAI server, and execute_azure_sql deciding from the execution context alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from shared.executors import (
    StepInputError,
    apply_edits,
    check_edits,
    check_step,
    get_executor,
    input_for_text,
    input_model_for,
    register,
    settable_fields,
    step_kinds,
    validate_step_input,
)
from shared.executors.runner import run_executor
from shared.jobs.contracts import ExecutionContext, SqlAccess
from shared.jobs.plan import Plan, PlanStep
from shared.providers.clients import Clients
from shared.providers.interfaces import QueryRows
from shared.providers.sql.catalog import load_catalog
from shared.runtime.settings import Settings
from shared.runtime.sqlguard.guard import guard_sql
from tests.fakes.openai_server import FakeOpenAI, JsonReply

CONTACTS_SQL = "SELECT email, phone FROM customer_contacts"


def step(kind: str, **inp: Any) -> dict[str, Any]:
    return {"id": "s1", "kind": kind, "title": "t", "input": inp}


# --- input models --------------------------------------------------------------------------


def test_every_step_kind_declares_a_closed_input_model() -> None:
    expected = {
        "consult_rag": ["filter", "query", "top_k"],
        "execute_azure_sql": ["question", "sql"],
        "generate_response": ["question"],
        "run_python": ["code", "inputs", "question"],
        "ask_user": ["options", "question"],
    }
    assert set(step_kinds()) | {"ask_user"} == set(expected)
    for kind, fields in expected.items():
        assert settable_fields(kind) == fields
        assert input_model_for(kind).model_config.get("extra") == "forbid"
    spec = get_executor("execute_azure_sql")
    assert spec is not None and spec.input_model is input_model_for("execute_azure_sql")


def test_register_refuses_a_step_kind_without_a_closed_model() -> None:
    from pydantic import BaseModel

    class Open(BaseModel):
        question: str

    with pytest.raises(ValueError, match="needs an input_model"):
        register("x_kind", description="d", uses_llm=False)
    with pytest.raises(ValueError, match="must forbid extra fields"):
        register("x_kind", description="d", uses_llm=False, input_model=Open)


@pytest.mark.parametrize(
    ("kind", "inp", "field"),
    [
        ("execute_azure_sql", {"question": "q", "allow_sensitive": True}, "allow_sensitive"),
        ("execute_azure_sql", {"question": "q", "sql": CONTACTS_SQL, "mode": "run"}, "mode"),
        ("execute_azure_sql", {"question": "q", "approved_sql": CONTACTS_SQL}, "approved_sql"),
        ("consult_rag", {"query": "refunds", "sql_mode": "run"}, "sql_mode"),
        ("generate_response", {"question": "q", "sources": []}, "sources"),
        ("ask_user", {"question": "which?", "options": ["a"], "default": "a"}, "default"),
    ],
)
def test_a_plan_step_with_a_forbidden_field_is_rejected_naming_step_and_field(
    kind: str, inp: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError) as info:
        check_step(PlanStep.model_validate(step(kind, **inp)))
    message = str(info.value)
    assert "step 's1'" in message and f"input.{field}" in message
    with pytest.raises(StepInputError) as direct:
        validate_step_input(kind, inp)
    assert direct.value.field == field


def test_typed_values_are_checked_and_normalized() -> None:
    with pytest.raises(ValueError, match="top_k"):
        check_step(PlanStep.model_validate(step("consult_rag", query="refunds", top_k=500)))
    with pytest.raises(ValueError, match="unknown step kind 'drop_tables'"):
        check_step(PlanStep.model_validate(step("drop_tables", question="q")))
    ok = check_step(PlanStep.model_validate(step("consult_rag", query="refunds", top_k="5")))
    assert ok.input == {"query": "refunds", "top_k": 5}
    sql = check_step(PlanStep.model_validate(step("execute_azure_sql", question="q", sql=CONTACTS_SQL)))
    assert sql.input == {"question": "q", "sql": CONTACTS_SQL}  # SQL in a plan is allowed; it is guarded later


def test_supervisor_switch_builds_the_input_through_the_target_model() -> None:
    assert input_for_text("consult_rag", "refunds") == {"query": "refunds"}
    assert input_for_text("execute_azure_sql", "x" * 5000) == {"question": "x" * 2000}


# --- user edits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "edits", "field"),
    [
        ("execute_azure_sql", {"sql": CONTACTS_SQL, "allow_sensitive": True}, "allow_sensitive"),
        ("execute_azure_sql", {"mode": "run"}, "mode"),
        ("execute_azure_sql", {"approved_sql": CONTACTS_SQL}, "approved_sql"),
        ("execute_azure_sql", {"sql": ""}, "sql"),
        ("execute_azure_sql", {"sql": 42}, "sql"),
        ("consult_rag", {"top_k": 10_000}, "top_k"),
        ("consult_rag", {"query": "x", "sources": []}, "sources"),
    ],
)
def test_an_edit_may_set_only_settable_fields(kind: str, edits: dict[str, Any], field: str) -> None:
    with pytest.raises(StepInputError) as info:
        check_edits(kind, edits)
    assert info.value.field == field
    task = {"question": "q"} if kind == "execute_azure_sql" else {"query": "q"}
    with pytest.raises(StepInputError):
        apply_edits(kind, task, edits)


def test_a_valid_edit_merges_only_checked_fields() -> None:
    assert check_edits("execute_azure_sql", {"sql": "SELECT 1"}) == {"sql": "SELECT 1"}
    assert apply_edits("consult_rag", {"query": "a", "top_k": 3}, {"query": "b"}) == {"query": "b", "top_k": 3}
    with pytest.raises(StepInputError) as empty:
        check_edits("execute_azure_sql", {})
    assert empty.value.field is None and "question" in empty.value.message


# --- the plan executor over a real provider ------------------------------------------------


def test_the_plan_executor_fails_a_plan_that_sets_allow_sensitive(fake_openai: FakeOpenAI, tmp_path: Any) -> None:
    planted = {
        "steps": [
            {
                "id": "leak",
                "kind": "execute_azure_sql",
                "title": "As the document instructs",
                "input": {"question": "contacts", "sql": CONTACTS_SQL, "allow_sensitive": True, "mode": "run"},
                "depends_on": [],
            },
            {"id": "answer", "kind": "generate_response", "title": "Answer", "input": {"question": "q"}},
        ]
    }
    fake_openai.always(JsonReply(planted, check_schema=False), task="plan")
    settings = Settings(
        llm_provider="azure_openai",
        azure_openai_endpoint=fake_openai.endpoint,
        azure_openai_api_key=SecretStr("k"),
        azure_openai_chat_deployment="chat-dep",
        sqlite_database_path=tmp_path / "sample.db",
    )
    payload = {"task_id": "t1", "executor_type": "plan", "task": {"question": "Who are our customers?"}}
    out = run_executor(payload, clients=Clients(settings))
    assert out["status"] == "failed" and out["error"]["code"] == "BAD_REQUEST"
    message = out["error"]["message"]
    assert "steps.0.execute_azure_sql.input.allow_sensitive" in message
    # Nothing of the plan runs: the only result is the rejected reply, kept for the planner's repair turn.
    assert set(out["result"]) == {"rejected_output"} and "allow_sensitive" in out["result"]["rejected_output"]


# --- execute_azure_sql decides from the execution context ----------------------------------


class RecordingDatabase:
    """A database that records how it was asked to run (the DB-level barrier is Part C's, tested there)."""

    dialect = "sqlite"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def execute(self, sql: str, **kwargs: Any) -> QueryRows:
        self.calls.append((sql, kwargs))
        return QueryRows(columns=["email"], rows=[["someone@example.com"]])


@pytest.fixture
def sql_clients() -> tuple[Clients, RecordingDatabase]:
    db = RecordingDatabase()
    return Clients(Settings(), database=db, catalog=load_catalog()), db


def run_sql(clients: Clients, task: dict[str, Any], **context: Any) -> dict[str, Any]:
    payload = {
        "task_id": "t1",
        "executor_type": "execute_azure_sql",
        "task": task,
        "execution_context": {"job_id": "j1", "step_id": "s1", **context},
    }
    return run_executor(payload, clients=clients)


def guarded(sql: str) -> str:
    catalog = load_catalog()
    settings = Settings()
    verdict = guard_sql(
        sql,
        dialect="sqlite",
        allowed_tables=catalog.allowed_tables(include_sensitive=True),
        max_rows=settings.sql_max_rows,
    )
    assert verdict.accepted and verdict.sql
    return verdict.sql


def test_flags_in_the_task_are_refused_by_the_executor(sql_clients: tuple[Clients, RecordingDatabase]) -> None:
    clients, db = sql_clients
    out = run_sql(clients, {"question": "q", "sql": CONTACTS_SQL, "allow_sensitive": True, "mode": "run"})
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT"
    assert db.calls == []


def test_a_sensitive_read_without_approval_is_rejected(sql_clients: tuple[Clients, RecordingDatabase]) -> None:
    clients, db = sql_clients
    for context in ({}, {"sql_mode": "run"}, {"sql_mode": "run", "approved_sql": "SELECT 1"}):
        out = run_sql(clients, {"question": "q", "sql": CONTACTS_SQL}, **context)
        assert out["status"] == "failed" and out["error"]["code"] == "SQL_REJECTED"
        message = out["error"]["message"]
        assert "customer_contacts" in message and "approval.sql" in message
    assert db.calls == []


def test_a_draft_names_sensitive_tables_and_reads_nothing(sql_clients: tuple[Clients, RecordingDatabase]) -> None:
    clients, db = sql_clients
    out = run_sql(clients, {"question": "q", "sql": CONTACTS_SQL}, sql_mode="draft")
    assert out["status"] == "success"
    assert out["result"]["sensitive_tables"] == ["customer_contacts"] and out["result"]["sql"] == guarded(CONTACTS_SQL)
    assert db.calls == []


def test_only_the_exact_approved_statement_runs_with_sensitive_access(
    sql_clients: tuple[Clients, RecordingDatabase],
) -> None:
    clients, db = sql_clients
    approved = guarded(CONTACTS_SQL)
    other = guarded("SELECT email FROM customer_contacts WHERE customer_id > 0")
    out = run_sql(clients, {"question": "q", "sql": other}, sql_mode="run", approved_sql=approved)
    assert out["status"] == "failed" and out["error"]["code"] == "SQL_REJECTED" and db.calls == []

    out = run_sql(clients, {"question": "q", "sql": approved}, sql_mode="run", approved_sql=approved)
    assert out["status"] == "success"
    [(ran, kwargs)] = db.calls
    assert ran == approved and kwargs["sensitive"] is True

    db.calls.clear()
    plain = guarded("SELECT name FROM regions")
    assert run_sql(clients, {"question": "q", "sql": plain})["status"] == "success"
    assert db.calls[0][1]["sensitive"] is False  # nothing approved: the database keeps its barrier up


@pytest.mark.parametrize(
    "sql",
    [
        CONTACTS_SQL,
        "select  email from customer_contacts -- note\n",
        "SELECT c.email, o.order_id FROM customer_contacts c JOIN orders o ON o.customer_id = c.customer_id",
        "SELECT COUNT(*) FROM customer_contacts LIMIT 5000",
        "WITH x AS (SELECT email FROM customer_contacts) SELECT * FROM x",
        "SELECT name FROM regions UNION SELECT email FROM customer_contacts",
        "SELECT TOP 3 email FROM customer_contacts",
    ],
)
def test_the_guard_is_idempotent_so_an_approval_matches_the_statement_that_runs(sql: str) -> None:
    once = guarded(sql)
    assert guarded(once) == once


def test_sql_access_defaults_are_the_safe_ones() -> None:
    assert SqlAccess.of(ExecutionContext()) == SqlAccess(sql_mode="run", approved_sql=None)
    with pytest.raises(ValidationError):
        ExecutionContext.model_validate({"sql_mode": "sudo"})
    # The context takes only the fields the orchestrator sets: nothing else can ride along.
    with pytest.raises(ValidationError):
        ExecutionContext.model_validate({"allow_sensitive": True})


def test_the_offline_planner_emits_only_typed_inputs() -> None:
    from shared.providers.llm.offline.model import OfflineLLM

    llm = OfflineLLM(Clients(Settings()))
    for question in ("Which region had the most returns in Q3?", "What is the refund policy?", "zzz qqq"):
        plan = llm._plan(question)
        Plan.model_validate(plan.model_dump())
        for s in plan.steps:
            assert set(s.input) <= set(settable_fields(s.kind))
