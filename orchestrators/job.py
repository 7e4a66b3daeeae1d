"""The AI job orchestration: plan, then run each step as an activity, with the policy in one place.

Deterministic by construction: no I/O, clock, randomness or environment reads. Time comes from
``context.current_utc_datetime``; everything the policy needs (retry limits, prices) was resolved by
the API into the orchestration input. The orchestrator owns every decision: retry with backoff
through durable timers, fall back across ``allowed_models``, stop before the budget would be
exceeded, and otherwise ask the user (retry, skip, edit or abort). Human waits race a durable timer.

Trust boundary: plan steps, Supervisor decisions and user edits are untrusted data. A step's input is
validated against its kind's typed model (only question/sql/query-like fields), here again even though
the plan executor checked it. What a SQL step may read (draft or run, and the exact statement a human
approved) is set by this code alone, in the execution context, after the checks that justify it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrators.agent import AgentLoop, ToolStepFailed
from orchestrators.fork import run_fork
from orchestrators.outcomes import EditedTask, ExpiredAnswer, JobStop, event_data
from orchestrators.policy import Caller, Failure, Standing, decide, error_options
from orchestrators.python_step import PythonStep, result_note, runs_code, sandbox_ms
from orchestrators.quote_gate import gate as quote_gate
from orchestrators.quote_gate import max_cost_left
from shared.executors import (
    AGENT_TURN,
    CALL_TOOL,
    PLAN,
    SUPERVISE,
    StepInputError,
    apply_edits,
    check_plan,
    get_executor,
    input_for_text,
    lookup_kinds,
    text_field_of,
    validate_step_input,
)
from shared.executors import uses_llm as executor_uses_llm
from shared.jobs.agent import PYTHON_TOOL
from shared.jobs.contracts import (
    Constraints,
    ErrorCode,
    ExecutionContext,
    ExecutorError,
    ExecutorInput,
    ExecutorOutput,
    SqlAccess,
    Usage,
)
from shared.jobs.costs import CallPrices, Spend, next_call, over_max_cost
from shared.jobs.models import (
    Budget,
    ErrorInfo,
    JobInput,
    JobResult,
    JobState,
    PartNews,
    StepState,
    StepStateName,
    UserAnswer,
    Waiting,
    custom_status,
)
from shared.jobs.plan import (
    AGENT_STEP,
    ALREADY_DONE,
    ASK_USER,
    ORCHESTRATOR_KINDS,
    AgentStepInput,
    AskUserInput,
    Plan,
    PlanStep,
    SupervisorDecision,
)
from shared.jobs.runs import LIMIT_TEXT, REPORT_PART, RUN_LIMIT_EXCEEDED

logger = logging.getLogger(__name__)

Gen = Generator[Any, Any, Any]
APPROVAL_OPTIONS = ["approve", "edit", "reject", "abort"]
MAX_SQL_ROWS_TO_ANSWER = 20
MAX_ANSWER_SOURCES = 200  # ExecutionContext.sources
MAX_SUPERVISOR_RETRIES = 2
MAX_REPLANS = 2


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


# How a workflow or team run walks its graph: a factory of walks, each with ``work()``
# (orchestrators/__init__.py installs WorkflowWalk; no import ring). A fork of a run uses the same walk.
_run_walker: Callable[[JobRun], Any] | None = None


def set_run_walker(walker: Callable[[JobRun], Any]) -> None:
    """Install the walker of workflow and team runs (orchestrators/__init__.py does, once)."""
    global _run_walker
    _run_walker = walker


class JobEvents(Protocol):
    """Where a job's status and cost events go: ``shared.runtime.telemetry`` (function_app.py installs it)."""

    def log_job_status(
        self, *, job_id: str, status: str, previous_status: str | None, error_code: str | None, waiting_kind: str | None
    ) -> None:
        """Log a status change (called once, never on replay)."""

    def log_job_cost(self, *, job_id: str, status: str, events: Any, owner: str | None, workflow: str | None) -> Any:
        """Log a finished job's cost ledger (called once, never on replay)."""


# The telemetry reads settings and price files, so the orchestrator does not import it: function_app.py
# installs it here (no import of I/O from orchestrator code; an import-linter contract holds it). Without
# it (a test driving JobRun) a status change is only logged as text.
_job_events: JobEvents | None = None


def set_job_events(events: JobEvents) -> None:
    """Install where job status and cost events go (function_app.py does, once)."""
    global _job_events
    _job_events = events


class JobRun:
    """One execution of the job orchestration; a plain object that tests can drive."""

    def __init__(self, context: Any) -> None:
        self.ctx = context
        self.job = JobInput.model_validate(_as_dict(context.get_input()))
        self.state = JobState()
        self.outputs: dict[str, dict[str, Any]] = {}
        self.clarifications: dict[str, str] = {}
        self.last_status: str | None = None
        # Why the step being run was skipped (set where it is skipped, read when the step ends).
        self.skip_reason: str | None = None
        # How often the Supervisor has re-run each step (retry or another tool), by step id.
        self.supervisor_reruns: dict[str, int] = {}
        # Agent mode: a tool step that fails for good goes back to the Executor instead of to the user.
        self.agent_mode = False
        # Agent mode: outputs of first attempts scheduled together with the other calls of a turn, by task id.
        self.prefetched: dict[str, Any] = {}
        # Whether a person chose that skip (a Supervisor never re-runs what a person decided to skip).
        self.skipped_by_user = False
        # How many calls each internal executor (planning, supervision) has had: their attempt numbers.
        self.internal_calls: dict[str, int] = {}
        # Sandbox time the job's run_python calls used (their outputs say), for budget.max_sandbox_seconds.
        self.sandbox_ms = 0
        # Tool calls this run made (tool nodes, family tools, run_python), for its RunLimits.max_tool_calls.
        self.tool_calls = 0
        # A part of a workflow run (a branch, a sub-workflow): a step that fails for good fails the part (its
        # parent decides), and its questions reach people through the root run (``can_ask``).
        self.part_of_run = False
        # A workflow's agent node runs under the agent's own per-call limits (the job's allowed models kept).
        self.step_constraints: Constraints | None = None
        # An agent node's own budget, with the run's usage when the node started: (who, budget, tokens, cost).
        self.scoped_budget: tuple[str, Budget, int, float] | None = None
        # The calls this job made and their seconds, for the priced infrastructure meters of budget.max_cost.
        self.spend = Spend()

    # --- plumbing ----------------------------------------------------------------------------

    def now_iso(self) -> str:
        """Orchestration time, replay-safe."""
        return str(self.ctx.current_utc_datetime.isoformat())

    def log(self, message: str, *args: Any) -> None:
        """Log once, not on replay."""
        if not self.ctx.is_replaying:
            logger.info("job %s: " + message, self.job.job_id, *args)

    def publish(self) -> None:
        """Write the compact state as custom status; log status changes once (not on replay)."""
        self.ctx.set_custom_status(custom_status(self.state))
        if self.state.status != self.last_status:
            if not self.ctx.is_replaying:
                if _job_events is None:
                    logger.info("job %s is %s", self.job.job_id, self.state.status)
                else:
                    _job_events.log_job_status(
                        job_id=self.job.job_id,
                        status=self.state.status,
                        previous_status=self.last_status,
                        error_code=self.state.error.code if self.state.error else None,
                        waiting_kind=self.state.waiting.kind if self.state.waiting else None,
                    )
                    if self.state.status in ("completed", "failed") and not self.part_of_run:
                        _job_events.log_job_cost(  # the job's ledger from its own history (shared/runtime/ledger.py)
                            job_id=self.job.job_id,
                            status=self.state.status,
                            events=getattr(self.ctx, "histories", None),
                            owner=self.job.owner.id if self.job.owner else None,
                            workflow=self.job.run.id if self.job.run else None,
                        )
            self.last_status = self.state.status

    def add_usage(self, step: StepState | None, usage: Usage, executor_type: str = PLAN) -> None:
        """Count a call's usage into the job and its step, or planning, or the Supervisor (hybrid mode)."""
        self.state.usage = self.state.usage + usage
        if step is not None:
            step.usage = step.usage + usage
        elif executor_type == SUPERVISE:
            self.state.supervisor_usage = self.state.supervisor_usage + usage
        elif executor_type == AGENT_TURN:
            self.state.executor_usage = self.state.executor_usage + usage
        else:
            self.state.plan_usage = self.state.plan_usage + usage

    # --- the job -----------------------------------------------------------------------------

    def run(self) -> Gen:
        """Plan, run every step, and return the JobResult."""
        self.log("planning: %s", self.job.request.question[:80])
        self.publish()
        try:
            if self.job.fork is not None:
                # A fork: the steps before the fork point are carried over, the rest run (orchestrators/fork.py).
                answer = yield from run_fork(self, _run_walker)
            elif self.job.run is not None:
                # A workflow or team run: the graph replaces the plan (orchestrators/workflow.py).
                if _run_walker is None:
                    raise JobStop("CONFIG_ERROR", "workflow runs are not installed in this app")
                yield from quote_gate(self)  # the run's quote, and approval.cost_over (orchestrators/quote_gate.py)
                answer = yield from _run_walker(self).work()
            elif self.job.request.mode == "agent":
                self.agent_mode = True
                yield from quote_gate(self)
                answer = yield from AgentLoop(self).work()
            else:
                plan = yield from self.make_plan(self.job.request.question)
                self.state.plan_status = "planned"
                self.state.steps = [StepState(id=s.id, kind=s.kind, title=s.title) for s in plan.steps]
                self.state.status = "running"
                self.publish()
                yield from quote_gate(self, plan)
                answer = yield from self.run_steps(plan)
        except JobStop as stop:
            return self.finish_failed(stop.info)
        self.state.status = "completed"
        self.state.step_index = len(self.state.steps)
        unsupported = answer.get("unsupported") if answer else None
        if isinstance(unsupported, str):
            self.note_unsupported(unsupported)
        self.publish()
        self.log("completed; %s tokens", self.state.usage.total_tokens)
        return JobResult(
            status="completed",
            answer=answer.get("answer") if answer else None,
            citations=answer.get("citations", []) if answer else [],
            unsupported=unsupported[:500] if isinstance(unsupported, str) else None,
            usage=self.state.usage,
            outputs=answer.get("outputs") if answer and self.job.run is not None else None,
        ).model_dump(mode="json")

    def note_unsupported(self, reason: str) -> None:
        """An answer without support: its step says so, where the view shows it, and the log."""
        for step in reversed(self.state.steps):
            if _writes_answer(step.kind) and step.state == "succeeded":
                step.note = f"the answer has no support: {reason}"[:300]
                break
        self.log("completed with an answer that has no support: %s", reason[:200])

    def finish_failed(self, info: ErrorInfo) -> dict[str, Any]:
        """Record the failure at its step and end the job."""
        self.state.status = "failed"
        self.state.error = info
        self.state.waiting = None
        if self.state.plan_status == "planning":
            self.state.plan_status = "failed"  # the plan never came: the view must not say "Planning…"
        for step in self.state.steps:
            if step.id == info.step_id and step.state in ("running", "retrying", "waiting", "pending"):
                self.end_wait(step)
                step.state = "failed"
                step.ended_at = self.now_iso()
                step.error = info
                _clear_retry(step)
        self.publish()
        self.log("failed at %s: %s %s", info.step_id, info.code, info.message)
        return JobResult(status="failed", usage=self.state.usage, error=info).model_dump(mode="json")

    def make_plan(self, question: str, context_note: str | None = None) -> Gen:
        """Run the plan executor (with the same retry policy as steps) and validate its plan."""
        task: dict[str, Any] = {"question": question if not context_note else f"{question}\n\n{context_note}"}
        # The planner is offered the kinds the job's tools allow (run_python only with python.run).
        tools = {"allowed_tools": list(self.job.request.tools)} if self.job.request.tools else None
        out = yield from self.execute(None, PLAN, task, tools)
        if out is None:
            raise JobStop("PLAN_SKIPPED", "planning was skipped, so there is nothing to run")
        # The plan executor checked it too; the orchestrator trusts no activity output.
        try:
            return check_plan(Plan.model_validate(out.result))
        except ValidationError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"planning failed: the plan is not valid: {_problems(exc)}") from exc
        except ValueError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"planning failed: the plan is not valid: {exc}") from exc

    def run_steps(self, plan: Plan, start: int = 0) -> Gen:
        """Run the plan's steps in order from ``start``; returns the answer of the last generate_response step."""
        answer: dict[str, Any] | None = None
        index = start
        steps = list(plan.steps)
        while index < len(steps):
            spec = steps[index]
            step = self.state.steps[index]
            self.state.step_index = index
            step.started_at = self.now_iso()
            self.skip_reason = None
            self.skipped_by_user = False
            result = yield from self.run_step(spec, step)
            step.ended_at = self.now_iso()
            if result is None:
                step.state = "skipped"
                step.note = self.skip_reason or "it was skipped"
                self.log("step %s skipped: %s", spec.id, step.note)
            else:
                step.state = "succeeded"
                self.outputs[spec.id] = result
                if _writes_answer(spec.kind):
                    answer = result
            self.publish()
            if (
                self.job.request.mode == "hybrid"
                and spec.kind not in ORCHESTRATOR_KINDS
                and not _writes_answer(spec.kind)
            ):
                replacement = yield from self.supervise(spec, step, steps, index)
                if replacement is not None:
                    steps = steps[: index + 1] + replacement
                    self.state.steps = self.state.steps[: index + 1] + [
                        StepState(id=s.id, kind=s.kind, title=s.title) for s in replacement
                    ]
                    self.publish()
                elif _is_pending(step):  # the supervisor asked for a retry of this step
                    continue
            index += 1
        return answer

    def run_step(self, spec: PlanStep, step: StepState) -> Gen:
        """Run one step; returns its result dict, or None when skipped."""
        if spec.kind == ASK_USER:
            try:
                asked = AskUserInput.model_validate(validate_step_input(spec.kind, spec.input))
            except StepInputError as exc:
                raise JobStop(ErrorCode.BAD_REQUEST, f"step {spec.id!r} ({spec.kind}): {exc.message}", spec.id) from exc
            options = asked.options[:8]
            reply = yield from self.ask(
                step,
                "clarify",
                asked.question,
                options,
                default=options[0] if options else None,
                free_text=True,
            )
            text = reply.action() if isinstance(reply.answer, str) else json.dumps(reply.answer)
            self.clarifications[spec.id] = text
            return {"answer": text}

        if spec.kind == AGENT_STEP:
            part = AgentStepInput.model_validate(self.task_for(spec))
            return (yield from AgentLoop(self, part.question, step).work_step())

        task = self.task_for(spec)
        if runs_code(spec.kind):
            return (yield from PythonStep(self, spec, step).work(task))
        if _runs_sql(spec.kind):
            return (yield from self.run_sql_step(spec, step, task))
        extra: dict[str, Any] = {}
        if _writes_answer(spec.kind):
            extra["sources"] = self.sources_for(spec)
            extra["step_notes"] = self.notes_for(spec)
        out = yield from self.execute(step, spec.kind, task, extra)
        return None if out is None else (out.result or {})

    def run_sql_step(self, spec: PlanStep, step: StepState, task: dict[str, Any]) -> Gen:
        """A SQL step under the approval policy: SQL from the plan, the SQL writer or an edit is treated alike."""
        if self.job.request.approval.sql == "never":
            # Nothing is approved, so the executor refuses any statement that reads a sensitive table.
            out = yield from self.execute(step, spec.kind, task, SqlAccess(sql_mode="run").model_dump())
            return None if out is None else (out.result or {})
        while True:
            approved = yield from self.approve_sql(spec, step, task)
            if approved is None:
                return None
            run_task, access = approved
            out = yield from self.execute(step, spec.kind, run_task, access.model_dump(), reapprove_edits=True)
            if isinstance(out, EditedTask):
                task = out.task  # edited after approval: draft and approve the new statement again
                continue
            return None if out is None else (out.result or {})

    def task_for(self, spec: PlanStep) -> dict[str, Any]:
        """The executor task of a step (its input re-validated), with any clarifications the user gave for it."""
        try:
            task = validate_step_input(spec.kind, spec.input)
        except StepInputError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"step {spec.id!r} ({spec.kind}): {exc.message}", spec.id) from exc
        notes = [self.clarifications[d] for d in spec.depends_on if d in self.clarifications]
        if notes:
            key = text_field_of(spec.kind)
            task[key] = f"{task.get(key, '')} ({'; '.join(notes)})".strip()[:2000]
        return task

    def notes_for(self, spec: PlanStep) -> list[str]:
        """What the answer must say about the steps it depends on that did not run, and why."""
        wanted = set(spec.depends_on) if spec.depends_on else None
        notes = [
            f"The step '{s.title}' did not run: {s.note or 'it was skipped'}."
            for s in self.state.steps
            if s.state == "skipped" and s.id != spec.id and (wanted is None or s.id in wanted)
        ]
        # What code computed reaches the answer as a note (it is neither a passage nor SQL rows to cite).
        for s in self.state.steps:
            ran_code = runs_code(s.kind) or s.kind == PYTHON_TOOL
            if ran_code and s.id in self.outputs and (wanted is None or s.id in wanted):
                notes.append(result_note(s.title, self.outputs[s.id]))
        return notes[:12]

    def sources_for(self, spec: PlanStep) -> list[dict[str, Any]]:
        """Compact sources for the answer: chunks and SQL rows of the steps it depends on."""
        wanted = spec.depends_on or list(self.outputs)
        sources: list[dict[str, Any]] = []
        for step_id, out in _lookups(wanted, self.outputs):
            for chunk in out.get("chunks", []):
                sources.append(
                    {
                        "source_id": chunk["source_id"],
                        "kind": "document",
                        "title": chunk.get("title"),
                        "content": chunk.get("content", ""),
                    }
                )
            if "sql" in out and "rows" in out:
                rows = list(out.get("rows") or [])
                shown = rows[:MAX_SQL_ROWS_TO_ANSWER]
                sources.append(
                    {
                        "source_id": out.get("source_id") or f"sql:{step_id}",
                        "kind": "sql",
                        "title": out.get("question"),
                        "sql": out["sql"],
                        "columns": out.get("columns", []),
                        "rows": shown,
                        # The answer writer must know a result is partial, so it never concludes from it.
                        "row_count": out.get("row_count", len(rows)),
                        "truncated": bool(out.get("truncated")),
                        "rows_shown": len(shown),
                    }
                    # Only when the step used one: the inputs of jobs without it stay as they were (replay).
                    | ({"verified_query": out["verified_query"]} if out.get("verified_query") else {})
                )
        # A passage several lookups found is one source, and the contract takes at most MAX_ANSWER_SOURCES
        # (an agent job may make 64 lookups).
        unique: dict[str, dict[str, Any]] = {}
        for source in sources:
            unique.setdefault(str(source["source_id"]), source)
        return list(unique.values())[:MAX_ANSWER_SOURCES]

    # --- policy ------------------------------------------------------------------------------

    def execute(
        self,
        step: StepState | None,
        executor_type: str,
        task: dict[str, Any],
        extra: dict[str, Any] | None = None,
        *,
        reapprove_edits: bool = False,
        models: list[str | None] | None = None,
    ) -> Gen:
        """Call an executor until it succeeds, is skipped (None), or the job must stop.

        With ``reapprove_edits`` a user's edit is not run but returned as ``EditedTask``: the statement
        was approved, and an edited one must be approved again. ``models`` (a workflow's agent) replaces
        the job's allowed models; the run checked them against the job's when it started.
        """
        models = list(models or self.job.request.constraints.allowed_models) or [None]
        model_index = tries_on_model = 0
        step_id = step.id if step else None
        uses_llm = executor_uses_llm(executor_type)
        context = dict(extra or {})
        if step is not None:
            # One id for every attempt of this call (retries, a person's "retry"); tools send it as their
            # idempotency key. A step that runs again (a workflow loop) starts a new call with a new id.
            prefetched = step.attempts and f"{self.job.job_id}:{step.id}:{step.attempts}" in self.prefetched
            context.setdefault("call_id", f"{step.id}:{step.attempts if prefetched else step.attempts + 1}")
        first_problem: str | None = None  # the reason of a plan that was repaired, for the final message
        while True:
            out = yield from self.call_once(step, executor_type, task, context, models[model_index], uses_llm)
            if out.status != "failed" or out.error is None:
                if step is not None:
                    step.error = None
                return out
            error = out.error
            self.note_failure(step, executor_type, error)
            caller = _caller(step, executor_type)
            rejected = _rejected_output(out)
            decision = decide(
                Failure(error.code, error.retryable, error.retry_after_ms, repairable=rejected is not None),
                Standing(tries_on_model, model_index, len(models), uses_llm, caller, first_problem is not None),
                self.job.policy,
            )
            if decision.action == "stop_budget":
                raise JobStop(error.code, f"stopped before {step_id or 'planning'}: {error.message}", step_id)
            if decision.action == "retry":
                tries_on_model += 1
                yield from self.back_off(step, decision.delay_ms, tries_on_model + 1)
            elif decision.action == "fall_back":
                model_index, tries_on_model = model_index + 1, 0
                self.log("falling back to model %s", models[model_index])
            elif decision.action == "repair":
                first_problem = error.message
                task = {**task, "repair": {"rejected_output": rejected, "problems": error.message[:2000]}}
                self.log("planning: the plan was rejected (%s); one repair turn", error.message[:200])
            elif decision.action == "stop":
                repaired = f"{first_problem}; after one repair turn: " if first_problem else ""
                what = "planning" if executor_type == PLAN else "the Executor"
                raise JobStop(error.code, f"{what} failed: {repaired}{error.message}"[:2000])
            elif decision.action == "ask_user" and step is None:
                # Planning out of automatic tries on a transient fault: a person may try again or abort.
                yield from self.ask_to_retry(executor_type, error)
                model_index, tries_on_model = 0, 0
            elif decision.action == "give_up_quietly" or step is None:
                return None
            else:
                verdict = yield from self.settle_failure(step, executor_type, task, out, reapprove_edits)
                if not isinstance(verdict, dict):
                    return verdict  # None (skipped) or EditedTask
                task = verdict
                context["previous_attempt"] = _previous_attempt(out)
                model_index, tries_on_model = 0, 0

    def call_once(
        self,
        step: StepState | None,
        executor_type: str,
        task: dict[str, Any],
        context: dict[str, Any],
        model: str | None,
        uses_llm: bool,
    ) -> Gen:
        """One executor call: budget check, step state, the typed input, the activity, its usage."""
        step_id = step.id if step else None
        tool = str(task.get("tool", "")) if executor_type == CALL_TOOL else ""
        self.check_budget(step_id, uses_llm, model, self.job.policy.tool_price.get(tool, 0.0))
        if runs_code(executor_type):
            # Every run of code counts its sandbox time, failed and timed-out ones too: each attempt is checked
            # against what is left now, and may use no more than that.
            context = {**context, **self.sandbox_left(step_id)}
        if step is None:
            # Planning and supervision calls are numbered per executor, so each has its own task id.
            attempt = self.internal_calls[executor_type] = self.internal_calls.get(executor_type, 0) + 1
            if executor_type == PLAN:
                self.log("planning attempt %d", attempt)
        elif step.attempts and f"{self.job.job_id}:{step.id}:{step.attempts}" in self.prefetched:
            attempt = step.attempts  # its turn started this attempt and has shown it running since
        else:
            attempt = step.attempts + 1
            step.attempts = attempt
            step.state = "running"
            _clear_retry(step)
            step.model = model
            self.publish()
        task_id = f"{self.job.job_id}:{step_id or executor_type}:{attempt}"
        if task_id in self.prefetched:
            raw = self.prefetched.pop(task_id)  # scheduled ahead with the other calls of its turn (counted then)
        else:
            self.count_tool_calls(executor_type, step_id)
            inp = self.executor_input(step_id, executor_type, task, context, model, attempt)
            scheduled_at = self.ctx.current_utc_datetime
            raw = yield self.ctx.call_activity(executor_type, inp.model_dump(mode="json"))
            self.spend.seconds += max(0.0, (self.ctx.current_utc_datetime - scheduled_at).total_seconds())
        self.spend.calls += 1
        out = ExecutorOutput.model_validate(_as_dict(raw))
        self.add_usage(step, out.usage, executor_type)
        self.sandbox_ms += sandbox_ms(out)
        if step is not None and out.model_used:
            step.model = out.model_used
        return out

    def executor_input(
        self,
        step_id: str | None,
        executor_type: str,
        task: dict[str, Any],
        context: dict[str, Any],
        model: str | None,
        attempt: int,
    ) -> ExecutorInput:
        """The typed input of one executor call (the activity's payload)."""
        return ExecutorInput(
            task_id=f"{self.job.job_id}:{step_id or executor_type}:{attempt}",
            executor_type=executor_type,
            task=task,
            execution_context=ExecutionContext.model_validate(
                {
                    "job_id": self.job.job_id,
                    "step_id": step_id or executor_type,
                    "attempt": attempt,
                    "model": model,
                    "trace": self.job.trace,
                    **self.budget_left(),
                    **context,
                }
            ),
            constraints=self.step_constraints
            or Constraints.model_validate(self.job.request.constraints.model_dump(exclude={"budget"})),
        )

    def note_failure(self, step: StepState | None, executor_type: str, error: ExecutorError) -> None:
        """Log a failed call and show its error on the step."""
        step_id = step.id if step else None
        self.log("%s %s failed: %s %s", executor_type, step_id, error.code, error.message)
        if step is not None:
            step.error = ErrorInfo(code=error.code, message=error.message[:600], step_id=step_id)

    def back_off(self, step: StepState | None, delay_ms: int, next_attempt: int) -> Gen:
        """Wait out a retry's backoff on a durable timer; the view says when, and which try comes next."""
        retry_at = self.ctx.current_utc_datetime + timedelta(milliseconds=delay_ms)
        if step is not None:
            step.state = "retrying"  # waiting out a backoff is not running
            step.retry_at = retry_at.isoformat()
            step.next_attempt = next_attempt
            step.max_attempts = self.job.policy.max_attempts_per_model
        self.publish()
        yield self.ctx.create_timer(retry_at)

    def settle_failure(
        self, step: StepState, executor_type: str, task: dict[str, Any], out: ExecutorOutput, reapprove_edits: bool
    ) -> Gen:
        """A step that failed for good: in agent mode its error goes back to the Executor, else the user decides."""
        if self.agent_mode and not _writes_answer(executor_type):
            raise ToolStepFailed(out)  # the Executor is shown the error and may try something else
        if self.part_of_run and out.error is not None:
            raise JobStop(out.error.code, out.error.message, step.id)  # a part fails where no one can decide
        return (yield from self.ask_after_failure(step, executor_type, task, out, reapprove_edits))

    def ask_after_failure(
        self, step: StepState, executor_type: str, task: dict[str, Any], out: ExecutorOutput, reapprove_edits: bool
    ) -> Gen:
        """Ask the user what to do about a failed step: the task to run again, None to skip, or EditedTask."""
        error = out.error
        assert error is not None
        details: dict[str, Any] = {"error": {"code": error.code, "message": error.message}, "input": _bounded(task)}
        failed_sql = _previous_attempt(out)["sql"]
        if failed_sql:
            # Show the statement that failed, and offer it for editing; the task itself is not changed.
            details["sql"] = failed_sql
            details["input"] = _bounded({**task, "sql": failed_sql}, limit=22_000)
        options = error_options(error.code)
        question = f"Step '{step.title}' failed ({error.code}): {error.message}"
        if "retry" not in options:
            question = f"Step '{step.title}' cannot run here ({error.code}): {error.message}. Skip it or abort the job?"
        reply = yield from self.ask(
            step,
            "error",
            question[:1000],
            options,
            default="skip",
            details=details,
            edit_of=(executor_type, task),
        )
        action = reply.action()
        if action == "retry":
            return task
        if action == "skip":
            self.skipped_by_user = not isinstance(reply, ExpiredAnswer)
            self.skip_reason = (
                f"no one answered in time after it failed ({error.code}), so it was skipped"
                if isinstance(reply, ExpiredAnswer)
                else f"the user chose to skip it after it failed ({error.code})"
            )
            return None
        if action == "edit":
            # ask() only returns an edit that passed the same check as the HTTP edge.
            edited = _redraft(task, apply_edits(executor_type, task, reply.edits()))
            return EditedTask(edited) if reapprove_edits else edited
        raise JobStop(error.code, f"{error.message} (aborted by the user)", step.id)

    def count_tool_calls(self, executor_type: str, step_id: str | None, calls: int = 1) -> None:
        """Count tool calls against the run's ``max_tool_calls``; stop the run before one that would exceed it."""
        limits = self.job.run.limits if self.job.run is not None else None
        if limits is None or not (executor_type == CALL_TOOL or runs_code(executor_type)):
            return
        if self.tool_calls + calls > limits.max_tool_calls:
            raise self.limit_reached(
                "max_tool_calls", step_id, f"{self.tool_calls} made, {limits.max_tool_calls} allowed"
            )
        self.tool_calls += calls

    def limit_reached(self, limit: str, step_id: str | None, why: str) -> JobStop:
        """The stop of a run that reached one of its limits (the view names it: error.limit)."""
        share = " (this part's share of the run's limit)" if self.part_of_run else ""
        message = f"run limit {limit} reached ({LIMIT_TEXT[limit]}): {why}{share}"
        return JobStop(RUN_LIMIT_EXCEEDED, message, step_id, limit=limit)

    def sandbox_left(self, step_id: str | None) -> dict[str, Any]:
        """The sandbox seconds left of ``budget.max_sandbox_seconds`` for the next run; BUDGET_EXCEEDED when none."""
        budget = self.job.request.constraints.budget.max_sandbox_seconds
        if budget is None:
            return {}
        left = round(budget - self.sandbox_ms / 1000, 3)
        if left <= 0:
            raise JobStop(
                ErrorCode.BUDGET_EXCEEDED,
                f"stopped before {step_id or 'the next run'}: the job used {self.sandbox_ms / 1000:g} s of sandbox "
                f"time (failed and timed-out runs included), its budget is {budget:g} s",
                step_id,
            )
        return {"sandbox_seconds_left": left}

    def ask_to_retry(self, executor_type: str, error: ExecutorError) -> Gen:
        """A call that is no step (planning) failed for now: wait for a person to retry it, or stop the job."""
        what = "planning" if executor_type == PLAN else executor_type
        failed = f"{what} failed ({error.code}): {error.message}"
        if not self.can_ask:
            raise JobStop(error.code, failed[:2000])
        reply = yield from self.ask(
            None,
            "error",
            f"{failed[:900]}. Try again, or abort the job?",
            ["retry", "abort"],
            default=None,
            details={"error": {"code": error.code, "message": error.message}},
        )
        if reply.action() != "retry":
            raise JobStop(error.code, f"{failed} (aborted by the user)"[:2000])

    def budgets(self) -> list[tuple[str, Budget, int, float]]:
        """Each budget in force with the tokens and cost used against it: the job's, and the agent node's."""
        usage = self.state.usage
        scopes = [("the job", self.job.request.constraints.budget, usage.total_tokens, usage.estimated_cost)]
        if self.scoped_budget is not None:
            who, budget, tokens0, cost0 = self.scoped_budget
            scopes.append((who, budget, usage.total_tokens - tokens0, usage.estimated_cost - cost0))
        return scopes

    def budget_left(self) -> dict[str, Any]:
        """What is left of the tightest budget in force, for the executor's own check of its prompt size."""
        left: dict[str, Any] = {}
        for _, budget, tokens, cost in self.budgets():
            if budget.max_total_tokens is not None:
                tokens_left = budget.max_total_tokens - tokens
                left["budget_tokens_left"] = min(tokens_left, left.get("budget_tokens_left", tokens_left))
            if budget.max_estimated_cost is not None:
                cost_left = round(budget.max_estimated_cost - cost, 8)
                left["budget_cost_left"] = min(cost_left, left.get("budget_cost_left", cost_left))
        return max_cost_left(self, left)  # budget.max_cost's share for the prompt (orchestrators/quote_gate.py)

    def check_budget(self, step_id: str | None, uses_llm: bool, model: str | None, call_price: float = 0.0) -> None:
        """Stop before a call whose worst case would exceed the job budget or the running agent's own.

        ``call_price``: what the call itself costs (a priced tool), on top of its tokens.
        """
        reserve = (self.step_constraints or self.job.request.constraints).max_tokens if uses_llm else 0
        price = self.job.policy.output_price.get(model or "", max(self.job.policy.output_price.values(), default=0))
        where = step_id or "planning"
        for who, budget, tokens, cost in self.budgets():
            if budget.max_total_tokens is not None and tokens + reserve > budget.max_total_tokens:
                raise JobStop(
                    "BUDGET_EXCEEDED",
                    f"stopped before {where}: {who} used {tokens} tokens, the next call may use up to {reserve} "
                    f"more, {who}'s budget is {budget.max_total_tokens}",
                    step_id,
                )
            next_cost = reserve * price + call_price
            if budget.max_estimated_cost is not None and cost + next_cost > budget.max_estimated_cost:
                raise JobStop(
                    "BUDGET_EXCEEDED",
                    f"stopped before {where}: {who}'s estimated cost {cost:.6f} USD plus up to {next_cost:.6f} "
                    f"USD for the next call exceeds {who}'s budget {budget.max_estimated_cost} USD",
                    step_id,
                )
            if budget.max_cost is not None:
                self.check_max_cost(budget.max_cost, who, where, step_id, cost, model, reserve * price, call_price)

    def check_max_cost(
        self,
        max_cost: float,
        who: str,
        where: str,
        step_id: str | None,
        cost: float,
        model: str | None,
        tokens_cost: float,
        call_price: float,
    ) -> None:
        """budget.max_cost: every priced meter so far plus the next call's worst case (shared/jobs/costs.py)."""
        prices = self.job.policy.call_prices or CallPrices(table="")
        spent = {"tokens, tools and sandbox": cost, **self.spend.by_meter(prices)}
        timeout_s = (self.step_constraints or self.job.request.constraints).timeout_ms / 1000
        upcoming = next_call(prices, timeout_s)
        if tokens_cost:
            upcoming[f"llm.tokens:{model}" if model else "llm.tokens"] = tokens_cost
        if call_price:
            upcoming["tools.calls"] = call_price
        crossed = over_max_cost(max_cost, spent, upcoming, who, where)
        if crossed is not None:
            raise JobStop("BUDGET_EXCEEDED", crossed[1], step_id)

    def approve_sql(self, spec: PlanStep, step: StepState, task: dict[str, Any]) -> Gen:
        """Draft (guard) the SQL and ask for approval when the policy says so.

        Returns ``(task, access)`` to run, or None when the step is skipped. Only a human's "approve" of
        the exact guarded statement records it as ``approved_sql``; an edit is drafted and shown again.
        """
        policy = self.job.request.approval
        while True:
            draft = yield from self.execute(
                step, spec.kind, task, SqlAccess(sql_mode="draft").model_dump(), reapprove_edits=True
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
                raise JobStop(
                    ErrorCode.INVALID_INPUT, f"the SQL draft is not valid: {_problems(exc)}", spec.id
                ) from exc
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
                    f"{self.approval_seconds} s; an expired wait never approves a sensitive read "
                    "(on_timeout=approve applies only to other statements)"
                )
            reply = yield from self.ask(
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
                timeout_seconds=self.approval_seconds,
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
                task = _redraft(run_task, apply_edits(spec.kind, run_task, reply.edits()))
                continue
            if action == "reject":
                self.skipped_by_user = not isinstance(reply, ExpiredAnswer)
                self.skip_reason = (
                    "its SQL query was not approved in time, so it was not run"
                    if isinstance(reply, ExpiredAnswer)
                    else "the user rejected its SQL query"
                )
                return None
            raise JobStop("REJECTED_BY_USER", "the user aborted the job at the SQL approval", spec.id)

    def ask(
        self,
        step: StepState | None,
        kind: str,
        question: str,
        options: list[str],
        *,
        default: str | None,
        details: dict[str, Any] | None = None,
        free_text: bool = False,
        timeout_seconds: int | None = None,
        expiry_falls_back: bool | None = None,
        expiry_message: str | None = None,
        edit_of: tuple[str, dict[str, Any]] | None = None,
    ) -> Gen:
        """Wait for the user's answer to one question, racing a durable timer.

        With ``edit_of`` (step kind, current input) an ``edit`` answer must pass ``apply_edits``: an edit
        that sets a field the kind does not allow is never merged, and the question is asked again.
        """
        if not self.can_ask:
            raise JobStop("NO_ONE_TO_ASK", f"a part of a run cannot wait for a person: {question[:300]}", _id(step))
        wait = self.job.request.wait
        seconds = timeout_seconds or wait.timeout_seconds or self.job.policy.user_wait_seconds
        falls_back = expiry_falls_back if expiry_falls_back is not None else wait.on_expiry == "default"
        fallback = default if falls_back else None
        while True:
            question_id = self._next_question_id(step)
            now = self.ctx.current_utc_datetime
            expires = now + timedelta(seconds=seconds)
            waiting = Waiting(
                question_id=question_id,
                step_id=step.id if step else None,
                kind=kind,  # type: ignore[arg-type]
                question=question[:1000],
                options=options,
                free_text=free_text,
                details=details or {},
                asked_at=now.isoformat(),
                expires_at=expires.isoformat(),
                expiry_default=fallback,
                step_kind=step.kind if step else None,
            )
            resume_state = self._start_waiting(step, waiting)
            yield from self.report_question(waiting, step)
            event = self.ctx.wait_for_external_event(f"answer:{question_id}")
            timer = self.ctx.create_timer(expires)
            winner = yield self.ctx.task_any([event, timer])
            self._stop_waiting(step, resume_state)
            yield from self.report_question(waiting, step, "answered" if winner is event else "expired")
            if winner is not event:
                break
            if not timer.is_completed:
                timer.cancel()
            reply, refused = self._check_answer(question_id, event.result, options, free_text, edit_of)
            if reply is not None:
                self.publish()
                return reply
            if refused is not None:
                details = {**(details or {}), "refused_edit": refused[:300]}
            # An invalid or refused answer: the same question is asked again.
        if fallback is not None:
            self.log("question %s expired; proceeding with %s", question_id, fallback)
            self.publish()
            return ExpiredAnswer(answer=fallback)
        message = expiry_message or f"no answer to '{question[:200]}' within {seconds} s"
        raise JobStop("WAIT_EXPIRED", message, step.id if step else None)

    @property
    def approval_seconds(self) -> int:
        """How long an approval waits: the request's approval.timeout_seconds, else the app's wait setting."""
        return self.job.request.approval.timeout_seconds or self.job.policy.user_wait_seconds

    @property
    def can_ask(self) -> bool:
        """Whether a person can answer here: the job itself, or a part that reports to its root run."""
        return not self.part_of_run or (self.job.run is not None and self.job.run.report_to is not None)

    def report_question(
        self, waiting: Waiting, step: StepState | None, ended: Literal["answered", "expired"] | None = None
    ) -> Gen:
        """A part tells its root run of its question (asked, or answered / expired): the root's view shows it."""
        report = self.job.run.report_to if self.part_of_run and self.job.run else None
        if report is None:
            return
        news = PartNews(
            instance=self.job.job_id,
            question_id=waiting.question_id,
            asked=None if ended else waiting.model_copy(update={"instance": self.job.job_id}),
            ended=ended,
            step=step.model_dump(mode="json") if step else None,
            anchor=report.anchor,
        )
        body = {"to": report.model_dump(mode="json"), "news": news.model_dump(mode="json")}
        try:
            yield self.ctx.call_activity(REPORT_PART, body)
        except Exception as exc:  # the question still waits (and expires); only the root's view misses it
            self.log("could not report question %s to %s: %s", waiting.question_id, report.instance, exc)

    def _next_question_id(self, step: StepState | None) -> str:
        """Count one more question and name it after its step (or the job); a part's also after the part.

        A part's instance id is ``<root id>:<path>``: its question ids stay unique across the whole run,
        which is what the root's job API claims answers by.
        """
        self.state.questions_asked += 1
        base = f"{step.id if step else 'job'}-q{self.state.questions_asked}"
        if self.part_of_run and ":" in self.job.job_id:
            return f"{base}@{self.job.job_id.split(':', 1)[1]}"
        return base

    def _start_waiting(self, step: StepState | None, waiting: Waiting) -> StepStateName:
        """Publish the job as waiting on ``waiting``; returns the state the step resumes in once answered."""
        self.state.waiting = waiting
        self.state.status = "waiting_for_user"
        resume_state: StepStateName = "running"
        if step is not None:
            # A step that already ended (a Supervisor question after it) keeps its state once answered.
            ended = step.state in ("succeeded", "skipped", "failed")
            resume_state = step.state if ended else "running"
            step.state = "waiting"
            # Only a wait inside the step's run is taken out of its duration.
            step.waiting_since = None if ended else waiting.asked_at
            _clear_retry(step)
        self.publish()
        self.log("waiting for the user (%s): %s", waiting.question_id, waiting.question[:80])
        return resume_state

    def _stop_waiting(self, step: StepState | None, resume_state: StepStateName) -> None:
        """The wait is over (answered or expired): the job runs again and the step resumes."""
        self.state.waiting = None
        self.state.status = "running"
        if step is not None:
            self.end_wait(step)
            step.state = resume_state

    def _check_answer(
        self,
        question_id: str,
        raw: Any,
        options: list[str],
        free_text: bool,
        edit_of: tuple[str, dict[str, Any]] | None,
    ) -> tuple[UserAnswer | None, str | None]:
        """The accepted answer, or None with why an edit was refused (None too when the answer was invalid)."""
        reply = _parse_answer(raw)
        if reply is None or not (free_text or reply.action() in options):
            self.log("ignoring an invalid answer to %s", question_id)
            return None, None
        refused = _refused_edit(reply, edit_of)
        if refused is None:
            return reply, None
        self.log("refused the edit answering %s: %s", question_id, refused)
        return None, refused

    def end_wait(self, step: StepState) -> None:
        """Add a finished human wait to the step's waited time (a wait is neither an attempt nor run time)."""
        if step.waiting_since is None:
            return
        started = datetime.fromisoformat(step.waiting_since)
        waited = self.ctx.current_utc_datetime - started
        step.waited_ms += max(0, int(waited.total_seconds() * 1000))
        step.waiting_since = None

    def supervise(self, spec: PlanStep, step: StepState, steps: list[PlanStep], index: int) -> Gen:
        """Hybrid mode: let the Supervisor decide after a step; deterministic code bounds what it may do."""
        out = yield from self.execute(
            None,
            SUPERVISE,
            {
                "question": self.job.request.question,
                "plan": [s.model_dump(mode="json") for s in steps],
                "step": spec.model_dump(mode="json"),
                "output": _bounded(_compact(self.outputs.get(spec.id)) or self.skipped_output(step)),
            },
        )
        if out is None:
            return None
        try:
            decision = SupervisorDecision.model_validate(out.result)
        except ValidationError as exc:
            self.log("ignoring an invalid supervisor decision after %s: %s", spec.id, _problems(exc))
            return None
        self.log("supervisor after %s: %s (%s)", spec.id, decision.action, decision.reason[:80])
        # The Supervisor may run a step again (retry or another tool) a bounded number of times, counted apart
        # from the step's own attempts: a step whose retries the policy spent may still be re-run once it is skipped.
        reruns = self.supervisor_reruns.get(step.id, 0)
        if decision.action in ("retry", "choose_tool") and reruns < MAX_SUPERVISOR_RETRIES:
            self.supervisor_reruns[step.id] = reruns + 1
            if decision.action == "retry":
                step.state = "pending"
                self.outputs.pop(spec.id, None)
            else:
                self.switch_tool(spec, step, steps, index, decision.executor_type)
            return None
        if decision.action == "ask_user" and decision.question:
            reply = yield from self.ask(
                step,
                "clarify",
                decision.question,
                decision.options,
                default=decision.options[0] if decision.options else None,
                free_text=True,
            )
            for later in steps[index + 1 :]:
                if spec.id not in later.depends_on:
                    later.depends_on.append(spec.id)
            self.clarifications[spec.id] = reply.action()
            return None
        if decision.action == "replan" and self.state.replans < MAX_REPLANS:
            return (yield from self.replan(steps, index, decision.reason))
        return None

    def skipped_output(self, step: StepState) -> dict[str, Any]:
        """What the Supervisor is told of a skipped step: why, the error that led to it, and who chose it."""
        return {
            "skipped": True,
            "reason": step.note,
            "error_code": step.error.code if step.error else None,
            "skipped_by_user": self.skipped_by_user,
        }

    def switch_tool(self, spec: PlanStep, step: StepState, steps: list[PlanStep], index: int, kind: str | None) -> None:
        """Run the step again as another step kind, when the Supervisor asks for one the plan may use."""
        if kind is None or kind == spec.kind or kind not in lookup_kinds():
            return
        text = str(spec.input.get(text_field_of(spec.kind)) or self.job.request.question)
        try:
            # Built through the target kind's input model: only a question or query, nothing security-relevant.
            new_input = input_for_text(kind, text)
        except StepInputError as exc:
            self.log("ignoring the supervisor's switch after %s: %s", spec.id, exc.message)
            return
        steps[index] = spec.model_copy(update={"kind": kind, "input": new_input})
        step.kind = kind
        step.state = "pending"
        self.outputs.pop(spec.id, None)

    def replan(self, steps: list[PlanStep], index: int, reason: str) -> Gen:
        """A new plan for what is left; its step ids get a suffix so they never clash with the steps that ran."""
        self.state.replans += 1
        ran = [s for s in steps[: index + 1] if s.id in self.outputs]
        done = ", ".join(f"{s.id}={s.kind} {json.dumps(str(s.input.get(text_field_of(s.kind)) or ''))}" for s in ran)
        plan = yield from self.make_plan(self.job.request.question, f"{ALREADY_DONE}{done}. {reason}")
        suffix = f"r{self.state.replans}"
        # The answer of the new plan also cites what already ran.
        kept = [s.id for s in ran]
        return [
            s.model_copy(
                update={
                    "id": f"{s.id}{suffix}"[:32],
                    "depends_on": (kept if _writes_answer(s.kind) else [])
                    + [f"{d}{suffix}"[:32] for d in s.depends_on],
                }
            )
            for s in plan.steps
        ]


def _id(step: StepState | None) -> str | None:
    return step.id if step else None


def _caller(step: StepState | None, executor_type: str) -> Caller:
    """Who made a failed call, for the policy: a step, planning, the Executor's turn, or the Supervisor."""
    if step is not None:
        return "step"
    if executor_type == PLAN:
        return "plan"
    return "executor" if executor_type == AGENT_TURN else "supervise"


def _lookups(wanted: list[str], outputs: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The outputs of the wanted steps, an agent step's lookups (its ``parts``) each as its own."""
    found: list[tuple[str, dict[str, Any]]] = []
    for step_id in wanted:
        out = outputs.get(step_id) or {}
        found.append((step_id, out))
        found.extend((step_id, part) for part in out.get("parts") or [] if isinstance(part, dict))
    return found


def _is_pending(step: StepState) -> bool:
    # A function, not an inline test: supervise() may set the state back to pending behind mypy's narrowing.
    return step.state == "pending"


def _writes_answer(kind: str) -> bool:
    spec = get_executor(kind)
    return spec is not None and spec.writes_answer


def _runs_sql(kind: str) -> bool:
    spec = get_executor(kind)
    return spec is not None and spec.runs_sql


def _clear_retry(step: StepState) -> None:
    step.retry_at = step.next_attempt = step.max_attempts = None


def _redraft(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """An edited SQL step input: a new question without new SQL drops the old SQL, so it is drafted again."""
    if "sql" in new and new.get("sql") == old.get("sql") and new.get("question") != old.get("question"):
        return {k: v for k, v in new.items() if k != "sql"}
    return new


def _refused_edit(reply: UserAnswer, edit_of: tuple[str, dict[str, Any]] | None) -> str | None:
    """Why an edit answer may not be merged into the step input, or None when it may (or is no edit)."""
    if edit_of is None or reply.action() != "edit":
        return None
    try:
        apply_edits(edit_of[0], edit_of[1], reply.edits())
    except StepInputError as exc:
        return exc.message
    return None


def _rejected_output(out: ExecutorOutput) -> str | None:
    """The model output a failed call rejected, when the executor returned it (bounded)."""
    result = out.result if isinstance(out.result, dict) else {}
    text = result.get("rejected_output")
    return text[:8000] if isinstance(text, str) and text else None


def _previous_attempt(out: ExecutorOutput) -> dict[str, Any]:
    """The failed attempt a retried step is shown: its statement (if it had one) and its error."""
    error = out.error
    assert error is not None
    result = out.result if isinstance(out.result, dict) else {}
    sql = result.get("sql")
    return {
        "sql": sql[:20_000] if isinstance(sql, str) else None,
        "error": {"code": error.code[:64], "message": error.message[:2000]},
    }


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors(include_url=False)[:3]
    )[:500]


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def _parse_answer(raw: Any) -> UserAnswer | None:
    # Raw posts to the Durable API arrive as values, answers raised through the SDK client as JSON text.
    raw = event_data(raw)
    try:
        if isinstance(raw, dict) and "answer" in raw:
            return UserAnswer.model_validate(raw)
        return UserAnswer(answer=raw)
    except ValueError:
        return None


def _compact(output: dict[str, Any] | None) -> dict[str, Any] | None:
    """A step output as the Supervisor sees it: every chunk and the first rows, each cut short, so it fits whole."""
    if not output:
        return output
    compact = dict(output)
    if isinstance(compact.get("chunks"), list):
        compact["chunks"] = [
            {**c, "content": str(c.get("content", ""))[:160]} if isinstance(c, dict) else c
            for c in compact["chunks"][:8]
        ]
    if isinstance(compact.get("rows"), list):
        compact["rows"] = compact["rows"][:5]
    return compact


def _bounded(value: dict[str, Any], limit: int = 2000) -> dict[str, Any]:
    text = json.dumps(value, default=str)
    return value if len(text) <= limit else {"truncated": text[:limit]}


def job_orchestrator_body(context: Any) -> Gen:
    """The orchestrator body as a plain generator (the decorated function only delegates to it)."""
    return (yield from JobRun(context).run())
