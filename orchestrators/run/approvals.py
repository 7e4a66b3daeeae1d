"""SQL steps under the approval policy: a draft is guarded, shown to a person when the policy says so, and run.

What a SQL step may read is set here alone, in the execution context (``SqlAccess``): only a person's
"approve" of the exact guarded statement records it as ``approved_sql``; an expired wait never approves a read
of a sensitive table; an edit is drafted and shown again. SQL from the plan, the SQL writer or an edit is
treated alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrators.outcomes import EditedTask, ExpiredAnswer, JobStop
from orchestrators.run.attempts import Attempts, access_context, redraft
from orchestrators.run.questions import Questions
from orchestrators.run.record import Gen, RunRecord, problems
from shared.executors import apply_edits
from shared.jobs.contracts import ErrorCode, SqlAccess
from shared.jobs.models import StepState
from shared.jobs.plan import PlanStep

APPROVAL_OPTIONS = ["approve", "edit", "reject", "abort"]


class DatabaseChoice(BaseModel):
    """The database a SQL step chose, as its draft reports it."""

    model_config = ConfigDict(extra="ignore")

    choice: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)
    decided_by: str = Field(default="rules", max_length=16)


class SqlDraftResult(BaseModel):
    """The draft an execute_azure_sql step returns in draft mode (activity output: validated, not trusted)."""

    model_config = ConfigDict(extra="ignore")

    sql: str = Field(min_length=1, max_length=20_000)
    tables: list[str] = Field(default_factory=list)
    sensitive_tables: list[str] = Field(default_factory=list)
    # Which database the draft was made on (choose_sql_tool); the approved statement runs there.
    database: DatabaseChoice | None = None


class SqlApprovals:
    """The SQL steps of a run: draft, approval, run."""

    def __init__(self, record: RunRecord, attempts: Attempts, questions: Questions) -> None:
        self.record = record
        self.attempts = attempts
        self.questions = questions

    def run_sql_step(self, spec: PlanStep, step: StepState, task: dict[str, Any]) -> Gen:
        """A SQL step under the approval policy: SQL from the plan, the SQL writer or an edit is treated alike."""
        if self.record.job.request.approval.sql == "never":
            # Nothing is approved, so the executor refuses any statement that reads a sensitive table.
            out = yield from self.attempts.execute(step, spec.kind, task, access_context(SqlAccess(sql_mode="run")))
            return None if out is None else (out.result or {})
        while True:
            approved = yield from self.approve_sql(spec, step, task)
            if approved is None:
                return None
            run_task, access = approved
            out = yield from self.attempts.execute(
                step, spec.kind, run_task, access_context(access), reapprove_edits=True
            )
            if isinstance(out, EditedTask):
                task = out.task  # edited after approval: draft and approve the new statement again
                continue
            return None if out is None else (out.result or {})

    def approve_sql(self, spec: PlanStep, step: StepState, task: dict[str, Any]) -> Gen:
        """Draft (guard) the SQL and ask for approval when the policy says so.

        Returns ``(task, access)`` to run, or None when the step is skipped. Only a human's "approve" of
        the exact guarded statement records it as ``approved_sql``; an edit is drafted and shown again.
        """
        policy = self.record.job.request.approval
        while True:
            draft = yield from self.attempts.execute(
                step, spec.kind, task, access_context(SqlAccess(sql_mode="draft")), reapprove_edits=True
            )
            if draft is None:
                return None
            if isinstance(draft, EditedTask):
                # The user edited the step after a failed draft: the edit replaces the task this loop drafts.
                task = draft.task
                continue
            try:
                result = SqlDraftResult.model_validate(draft.result or {})
            except ValidationError as exc:
                raise JobStop(ErrorCode.INVALID_INPUT, f"the SQL draft is not valid: {problems(exc)}", spec.id) from exc
            run_task = {**task, "sql": result.sql}
            database = result.database.choice if result.database else None
            if policy.sql == "sensitive" and not result.sensitive_tables:
                # No approval recorded: should the draft have hidden a sensitive table, the run refuses it.
                return run_task, SqlAccess(sql_mode="run", sql_database=database)
            sensitive = sorted(result.sensitive_tables)
            default = {"approve": "approve", "reject": "reject"}.get(policy.on_timeout)
            expiry_note = None
            if sensitive and default == "approve":
                # A wait that expires never approves a read of sensitive tables, whatever on_timeout says.
                default = None
                expiry_note = (
                    f"the approval of a statement that reads the sensitive table(s) {sensitive} expired after "
                    f"{self.questions.approval_seconds} s; an expired wait never approves a sensitive read "
                    "(on_timeout=approve applies only to other statements)"
                )
            reply = yield from self.questions.ask(
                step,
                "approval",
                f"Approve this SQL for step '{step.title}'?"[:1000],
                APPROVAL_OPTIONS,
                default=default,
                details={
                    "sql": result.sql,
                    "tables": result.tables,
                    "sensitive_tables": sensitive,
                    **({"database": database} if database else {}),
                },
                timeout_seconds=self.questions.approval_seconds,
                expiry_falls_back=policy.on_timeout != "fail",
                expiry_message=expiry_note,
                edit_of=(spec.kind, run_task),
            )
            action = reply.action()
            if action == "approve":
                if isinstance(reply, ExpiredAnswer):
                    # No human approved: nothing sensitive may run.
                    return run_task, SqlAccess(sql_mode="run", sql_database=database)
                return run_task, SqlAccess(sql_mode="run", approved_sql=result.sql, sql_database=database)
            if action == "edit":
                # A human approves the exact statement that runs: the edited SQL is guarded and shown again.
                task = redraft(run_task, apply_edits(spec.kind, run_task, reply.edits()))
                continue
            if action == "reject":
                self.record.skipped(
                    "its SQL query was not approved in time, so it was not run"
                    if isinstance(reply, ExpiredAnswer)
                    else "the user rejected its SQL query",
                    by_user=not isinstance(reply, ExpiredAnswer),
                )
                return None
            raise JobStop("REJECTED_BY_USER", "the user aborted the job at the SQL approval", spec.id)
