"""execute_azure_sql: write SQL for a question (or take the given SQL), guard it, and run it read-only.

The task holds only what a plan or a user may set (question, sql). How the statement may touch the
data comes from the execution context, which only the orchestrator writes (``SqlAccess``): in draft
mode the step stops after the guard and returns the SQL it would run, so the orchestrator can ask a
human to approve or edit it first; in run mode a statement that reads a sensitive table runs only if
it is exactly the guarded statement a human approved.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from shared.executors import register
from shared.executors.common import call_llm, charge_failure, usage_of
from shared.executors.decisions import Decided, DecisionHook, decide
from shared.jobs.contracts import (
    ErrorCode,
    ExecutorInput,
    ExecutorOutput,
    JobOwnerRef,
    ProviderError,
    SqlAccess,
    SqlResult,
)
from shared.jobs.plan import SqlDraft
from shared.providers.interfaces import LLMTask
from shared.runtime.sqlguard.guard import GuardResult, guard_sql

if TYPE_CHECKING:
    from shared.providers.clients import Clients
    from shared.providers.sql.verified import Match

logger = logging.getLogger(__name__)


class SqlTask(BaseModel):
    """The task of an execute_azure_sql step: the only fields a plan or a user's edit may set."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000, title="Step question")
    sql: str | None = Field(
        default=None,
        min_length=1,
        max_length=20_000,
        title="Step SQL",
        description="Clear it to have the SQL written again from the question.",
        json_schema_extra={"contentMediaType": "application/sql"},
    )


SENSITIVE_NEEDS_APPROVAL = (
    "reads the sensitive table(s) {tables}, which needs a human approval of this exact statement: set "
    "approval.sql to 'sensitive' or 'always'"
)


def choose_sql_tool(task: SqlTask, inp: ExecutorInput, clients: Clients) -> Decided:
    """Which configured database answers this step: the one the approval pinned, else a thin decision.

    With one database configured there is nothing to decide. A statement a human approved runs on the
    database it was approved for (the orchestrator pins it in the execution context after the draft).
    """
    settings = clients.settings
    member = clients.database_member
    options = {p: f"{member(p).description} ({member(p).dialect} dialect)" for p in settings.sql_providers}
    pinned = SqlAccess.of(inp.execution_context).sql_database
    if pinned is not None:
        if pinned not in options:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR, f"database {pinned!r} is no longer configured ({list(options)})"
            )
        return Decided(pinned, "the database the statement was drafted and approved for", "rules")

    def rules() -> tuple[str, str]:
        words = set(task.question.lower().replace("?", " ").replace(",", " ").split())
        for provider in options:
            named = words & set(member(provider).aliases)
            if named:
                return provider, f"the question names it ({sorted(named)[0]})"
        return settings.sql_provider, "the question names no database, so the configured one (SQL_PROVIDER)"

    hook = DecisionHook("choose_sql_tool", "Which database should answer this data question?", options, rules)
    return decide(hook, {"question": task.question}, inp, clients)


def guard_step_sql(sql: str, clients: Clients, dialect: str) -> GuardResult:
    """The guard as a SQL step applies it: the configured or catalog allow-list, sensitive tables included."""
    settings = clients.settings
    allowed = set(settings.allowed_tables or clients.catalog.allowed_tables(include_sensitive=True))
    return guard_sql(
        sql, dialect=dialect, allowed_tables=allowed, max_rows=settings.sql_max_rows, columns=clients.catalog.columns()
    )


@register(
    "execute_azure_sql",
    description="Answer a question about the business data (orders, revenue, returns, products, customers, "
    "regions, quarters) with one read-only SQL query; returns the SQL and its rows.",
    uses_llm=True,
    input_model=SqlTask,
    runs_sql=True,
)
def execute_azure_sql(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Write (if needed), guard and run one read-only query."""
    task = SqlTask.model_validate(inp.task)
    access = SqlAccess.of(inp.execution_context)
    settings = clients.settings
    chosen = choose_sql_tool(task, inp, clients)
    database = clients.database_for(chosen.choice)
    catalog = clients.catalog
    usage = chosen.usage
    model_used: str | None = chosen.model_used
    sql = task.sql
    # A statement a person approved before for this kind of question comes first (still guarded and approved below).
    reader = inp.execution_context.owner
    verified = None if sql else find_verified(task.question, clients, reader)
    if verified is not None:
        sql = verified.sql
    if not sql:
        response = call_llm(
            inp,
            clients,
            LLMTask.WRITE_SQL,
            {
                "question": task.question,
                "dialect": database.dialect,
                "catalog": catalog.prompt_view(database.dialect),
                "max_rows": settings.sql_max_rows,
                "previous_attempt": _previous_attempt_lines(inp),
            },
            SqlDraft,
        )
        usage = usage + usage_of(response, clients)
        model_used = response.model_used
        sql = response.output.sql

    # Sensitive tables pass the guard in every mode (so a draft can show them); whether such a statement
    # may run is decided below, from the approval the orchestrator recorded, never from the task.
    verdict = guard_step_sql(sql, clients, database.dialect)
    if not verdict.accepted or verdict.sql is None:
        return ExecutorOutput.failure(
            ErrorCode.SQL_REJECTED,
            f"SQL rejected ({verdict.reason_code}): {verdict.message}",
            usage=usage,
            model_used=model_used,
            result={"sql": sql, "executed": False},
        )
    if verified is None and task.sql:
        # An approved (or edited back) statement that is a verified query's is still that query: say so.
        verified = same_verified(task.question, verdict.sql, clients, database.dialect, reader)
    sensitive = sorted(t for t in verdict.tables if catalog.is_sensitive(t))
    if access.sql_mode == "draft":
        draft = {
            "sql": verdict.sql,
            "tables": sorted(verdict.tables),
            "sensitive_tables": sensitive,
            "draft": True,
            "database": chosen.as_dict(),
        } | ({"verified_query": verified.describe()} if verified else {})
        return ExecutorOutput(status="success", result=draft, usage=usage, model_used=model_used)

    # The approval covers one exact statement: the guarded text a human saw is the text that runs.
    approved = access.approved_sql is not None and access.approved_sql == verdict.sql
    if sensitive and not approved:
        return ExecutorOutput.failure(
            ErrorCode.SQL_REJECTED,
            "SQL rejected (sensitive_table): the statement " + SENSITIVE_NEEDS_APPROVAL.format(tables=sensitive),
            usage=usage,
            model_used=model_used,
            result={"sql": verdict.sql, "executed": False},
        )
    timeout_s = max(1, min(settings.sql_timeout_seconds, inp.constraints.timeout_ms // 1000))
    try:
        rows = database.execute(
            verdict.sql,
            max_rows=settings.sql_max_rows,
            timeout_s=timeout_s,
            sensitive=bool(sensitive) and approved,
        )
    except ProviderError as exc:
        # The SQL writer's tokens were spent whether or not the query then runs; the statement that
        # failed goes back with the error, so a person (and a retry) can see what ran.
        failed = charge_failure(exc, usage, model_used)
        return ExecutorOutput.failure(
            failed.code,
            failed.message,
            retry_after_ms=failed.retry_after_ms,
            usage=failed.usage,
            model_used=failed.model_used,
            result={"sql": verdict.sql, "executed": True},
        )
    result = SqlResult(
        question=task.question,
        sql=verdict.sql,
        dialect=database.dialect,
        tables=sorted(verdict.tables),
        columns=rows.columns,
        rows=rows.rows,
        row_count=len(rows.rows),
        truncated=rows.truncated,
        source_id=f"sql:{inp.execution_context.step_id or inp.task_id}",
    )
    body = {**result.model_dump(mode="json"), "database": chosen.as_dict()}
    if verified is not None:
        body["verified_query"] = verified.describe()
    return ExecutorOutput(status="success", result=body, usage=usage, model_used=model_used)


def find_verified(question: str, clients: Clients, owner: JobOwnerRef | None) -> Match | None:
    """The verified query the job's owner may reuse matching the question, its slots filled; else None.

    ``owner`` comes from the execution context, which only the orchestrator writes (from the job's input, which
    the API set from the Easy Auth principal): never from the task, a plan or a model.
    """
    try:
        return clients.verified_match(question, owner)
    except Exception as exc:  # the store is an aid: without it the SQL is written as before
        logger.warning("verified queries could not be read (%s): writing the SQL instead", type(exc).__name__)
        return None


def same_verified(
    question: str, guarded_sql: str, clients: Clients, dialect: str, owner: JobOwnerRef | None
) -> Match | None:
    """The verified query matching the question when its guarded statement is exactly ``guarded_sql``."""
    candidate = find_verified(question, clients, owner)
    if candidate is None or guard_step_sql(candidate.sql, clients, dialect).sql != guarded_sql:
        return None
    return candidate


def _previous_attempt_lines(inp: ExecutorInput) -> list[str] | None:
    """The failed statement and its error from the last attempt, so a retry writes a different query."""
    previous = inp.execution_context.previous_attempt
    if previous is None:
        return None
    lines = [f"your previous query: {previous.sql}"] if previous.sql else []
    return [*lines, f"it failed with {previous.error.code}: {previous.error.message}"]
