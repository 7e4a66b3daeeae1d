"""One call of an executor under the policy: attempts, back-off on a durable timer, fallback across models.

``execute`` calls until the executor succeeds, the step is skipped (None) or the job must stop; what to do after a
failure is decided by ``orchestrators.policy.decide`` (pure), and a step that failed for good goes to a person
(or, in agent mode, back to the Executor; in a part of a run, up to its parent). Attempts scheduled ahead (the
calls of an agent turn, started together) wait here by ``AttemptKey`` for the step that takes them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

from orchestrators.outcomes import EditedTask, ExpiredAnswer, JobStop, ToolStepFailed
from orchestrators.policy import Caller, Failure, Standing, decide, error_options
from orchestrators.run.budgets import Budgets, runs_code
from orchestrators.run.questions import Questions
from orchestrators.run.record import Gen, RunRecord, as_dict, bounded, clear_retry, writes_answer
from shared.executors import AGENT_TURN, CALL_TOOL, PLAN, apply_edits
from shared.executors import uses_llm as executor_uses_llm
from shared.jobs.contracts import (
    ExecutionContext,
    ExecutorError,
    ExecutorInput,
    ExecutorOutput,
    PreviousAttempt,
    SqlAccess,
)
from shared.jobs.models import ErrorInfo, StepState


class AttemptKey(NamedTuple):
    """One attempt of one call: the job, the step (or the internal executor) and the attempt number."""

    job_id: str
    step_id: str
    attempt: int

    @property
    def task_id(self) -> str:
        """The activity's task id (``ExecutorInput.task_id``)."""
        return f"{self.job_id}:{self.step_id}:{self.attempt}"

    @property
    def call_id(self) -> str:
        """The id of the call this attempt starts: the same for all its attempts (tools' idempotency key)."""
        return f"{self.step_id}:{self.attempt}"


class Attempts:
    """The executor calls of a run under its policy."""

    def __init__(self, record: RunRecord, budgets: Budgets, questions: Questions) -> None:
        self.record = record
        self.budgets = budgets
        self.questions = questions
        # Agent mode: a tool step that fails for good goes back to the Executor instead of to the user.
        self.agent_mode = False
        # Agent mode: outputs of first attempts scheduled together with the other calls of a turn.
        self.prefetched: dict[AttemptKey, Any] = {}
        # How many calls each internal executor (planning, supervision) has had: their attempt numbers.
        self.internal_calls: dict[str, int] = {}

    def key(self, step_id: str, attempt: int) -> AttemptKey:
        """The key of one attempt of this run's step (or internal executor): the one place it is made."""
        return AttemptKey(self.record.job.job_id, step_id, attempt)

    def hand_failures_to_executor(self) -> None:
        """Agent mode: a tool step that fails for good goes back to the Executor, not to a person."""
        self.agent_mode = True

    def hand_over(self, key: AttemptKey, raw: Any) -> None:
        """The result of an attempt scheduled ahead; the step's own call takes it instead of scheduling it."""
        self.prefetched[key] = raw

    def execute(
        self,
        step: StepState | None,
        executor_type: str,
        task: dict[str, Any],
        extra: ExecutionContext | None = None,
        *,
        reapprove_edits: bool = False,
        models: list[str | None] | None = None,
    ) -> Gen:
        """Call an executor until it succeeds, is skipped (None), or the job must stop.

        With ``reapprove_edits`` a user's edit is not run but returned as ``EditedTask``: the statement
        was approved, and an edited one must be approved again. ``models`` (a workflow's agent) replaces
        the job's allowed models; the run checked them against the job's when it started. ``extra``: the fields
        of the execution context the caller sets (only those it set are passed on; the identity, the budget left
        and the call id are set here).
        """
        models = list(models or self.record.job.request.constraints.allowed_models) or [None]
        model_index = tries_on_model = 0
        step_id = step.id if step else None
        uses_llm = executor_uses_llm(executor_type)
        context = extra or ExecutionContext()
        if step is not None:
            # One id for every attempt of this call (retries, a person's "retry"); tools send it as their
            # idempotency key. A step that runs again (a workflow loop) starts a new call with a new id.
            prefetched = step.attempts and self.key(step.id, step.attempts) in self.prefetched
            if "call_id" not in context.model_fields_set:
                call = self.key(step.id, step.attempts if prefetched else step.attempts + 1)
                context = context.model_copy(update={"call_id": call.call_id})
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
                self.record.job.policy,
            )
            if decision.action == "stop_budget":
                raise JobStop(error.code, f"stopped before {step_id or 'planning'}: {error.message}", step_id)
            if decision.action == "retry":
                tries_on_model += 1
                yield from self.back_off(step, decision.delay_ms, tries_on_model + 1)
            elif decision.action == "fall_back":
                model_index, tries_on_model = model_index + 1, 0
                self.record.log("falling back to model %s", models[model_index])
            elif decision.action == "repair":
                first_problem = error.message
                task = {**task, "repair": {"rejected_output": rejected, "problems": error.message[:2000]}}
                self.record.log("planning: the plan was rejected (%s); one repair turn", error.message[:200])
            elif decision.action == "stop":
                repaired = f"{first_problem}; after one repair turn: " if first_problem else ""
                what = "planning" if executor_type == PLAN else "the Executor"
                raise JobStop(error.code, f"{what} failed: {repaired}{error.message}"[:2000])
            elif decision.action == "ask_user" and step is None:
                # Planning out of automatic tries on a transient fault: a person may try again or abort.
                yield from self.questions.ask_to_retry(executor_type, error)
                model_index, tries_on_model = 0, 0
            elif decision.action == "give_up_quietly" or step is None:
                return None
            else:
                verdict = yield from self.settle_failure(step, executor_type, task, out, reapprove_edits)
                if not isinstance(verdict, dict):
                    return verdict  # None (skipped) or EditedTask
                task = verdict
                previous = PreviousAttempt.model_validate(_previous_attempt(out))
                context = context.model_copy(update={"previous_attempt": previous})
                model_index, tries_on_model = 0, 0

    def call_once(
        self,
        step: StepState | None,
        executor_type: str,
        task: dict[str, Any],
        context: ExecutionContext,
        model: str | None,
        uses_llm: bool,
    ) -> Gen:
        """One executor call: budget check, step state, the typed input, the activity, its usage."""
        step_id = step.id if step else None
        tool = str(task.get("tool", "")) if executor_type == CALL_TOOL else ""
        self.budgets.check_budget(step_id, uses_llm, model, self.record.job.policy.tool_price.get(tool, 0.0))
        if runs_code(executor_type):
            # Every run of code counts its sandbox time, failed and timed-out ones too: each attempt is checked
            # against what is left now, and may use no more than that.
            context = context.model_copy(update=self.budgets.sandbox_left(step_id))
        if step is None:
            # Planning and supervision calls are numbered per executor, so each has its own task id.
            attempt = self.internal_calls[executor_type] = self.internal_calls.get(executor_type, 0) + 1
            if executor_type == PLAN:
                self.record.log("planning attempt %d", attempt)
        elif step.attempts and self.key(step.id, step.attempts) in self.prefetched:
            attempt = step.attempts  # its turn started this attempt and has shown it running since
        else:
            attempt = step.attempts + 1
            step.attempts = attempt
            step.state = "running"
            clear_retry(step)
            step.model = model
            self.record.publish()
        key = self.key(step_id or executor_type, attempt)
        seconds: float | None = None
        if key in self.prefetched:
            raw = self.prefetched.pop(key)  # scheduled ahead with the other calls of its turn (counted then)
        else:
            self.budgets.count_tool_calls(executor_type, step_id)
            inp = self.executor_input(step_id, executor_type, task, context, model, attempt)
            scheduled_at = self.record.ctx.current_utc_datetime
            raw = yield self.record.ctx.call_activity(executor_type, inp.model_dump(mode="json"))
            seconds = (self.record.ctx.current_utc_datetime - scheduled_at).total_seconds()
        self.budgets.count_call(seconds)
        out = ExecutorOutput.model_validate(as_dict(raw))
        self.record.add_usage(step, out.usage, executor_type)
        self.budgets.count_sandbox(out)
        if step is not None and out.model_used:
            step.model = out.model_used
        return out

    def executor_input(
        self,
        step_id: str | None,
        executor_type: str,
        task: dict[str, Any],
        context: ExecutionContext,
        model: str | None,
        attempt: int,
    ) -> ExecutorInput:
        """The typed input of one executor call (the activity's payload)."""
        return ExecutorInput(
            task_id=self.key(step_id or executor_type, attempt).task_id,
            executor_type=executor_type,
            task=task,
            execution_context=ExecutionContext.model_validate(
                {
                    "job_id": self.record.job.job_id,
                    "step_id": step_id or executor_type,
                    "attempt": attempt,
                    "model": model,
                    "trace": self.record.job.trace,
                    **self.budgets.budget_left(),
                    **context.model_dump(exclude_unset=True),
                }
                # Whose verified queries a SQL step may reuse: the job's owner as the API recorded it.
                | ({"owner": {"id": owner.id, "roles": owner.roles}} if (owner := self.record.job.owner) else {})
            ),
            constraints=self.budgets.constraints,
        )

    def note_failure(self, step: StepState | None, executor_type: str, error: ExecutorError) -> None:
        """Log a failed call and show its error on the step."""
        step_id = step.id if step else None
        self.record.log("%s %s failed: %s %s", executor_type, step_id, error.code, error.message)
        if step is not None:
            step.error = ErrorInfo(code=error.code, message=error.message[:600], step_id=step_id)

    def back_off(self, step: StepState | None, delay_ms: int, next_attempt: int) -> Gen:
        """Wait out a retry's backoff on a durable timer; the view says when, and which try comes next."""
        retry_at = self.record.ctx.current_utc_datetime + timedelta(milliseconds=delay_ms)
        if step is not None:
            step.state = "retrying"  # waiting out a backoff is not running
            step.retry_at = retry_at.isoformat()
            step.next_attempt = next_attempt
            step.max_attempts = self.record.job.policy.max_attempts_per_model
        self.record.publish()
        yield self.record.ctx.create_timer(retry_at)

    def settle_failure(
        self, step: StepState, executor_type: str, task: dict[str, Any], out: ExecutorOutput, reapprove_edits: bool
    ) -> Gen:
        """A step that failed for good: in agent mode its error goes back to the Executor, else the user decides."""
        if self.agent_mode and not writes_answer(executor_type):
            raise ToolStepFailed(out)  # the Executor is shown the error and may try something else
        if self.record.part_of_run and out.error is not None:
            raise JobStop(out.error.code, out.error.message, step.id)  # a part fails where no one can decide
        return (yield from self.ask_after_failure(step, executor_type, task, out, reapprove_edits))

    def ask_after_failure(
        self, step: StepState, executor_type: str, task: dict[str, Any], out: ExecutorOutput, reapprove_edits: bool
    ) -> Gen:
        """Ask the user what to do about a failed step: the task to run again, None to skip, or EditedTask."""
        error = out.error
        assert error is not None
        details: dict[str, Any] = {"error": {"code": error.code, "message": error.message}, "input": bounded(task)}
        failed_sql = _previous_attempt(out)["sql"]
        if failed_sql:
            # Show the statement that failed, and offer it for editing; the task itself is not changed.
            details["sql"] = failed_sql
            details["input"] = bounded({**task, "sql": failed_sql}, limit=22_000)
        options = error_options(error.code)
        question = f"Step '{step.title}' failed ({error.code}): {error.message}"
        if "retry" not in options:
            question = f"Step '{step.title}' cannot run here ({error.code}): {error.message}. Skip it or abort the job?"
        reply = yield from self.questions.ask(
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
            self.record.skipped(
                f"no one answered in time after it failed ({error.code}), so it was skipped"
                if isinstance(reply, ExpiredAnswer)
                else f"the user chose to skip it after it failed ({error.code})",
                by_user=not isinstance(reply, ExpiredAnswer),
            )
            return None
        if action == "edit":
            # ask() only returns an edit that passed the same check as the HTTP edge.
            edited = redraft(task, apply_edits(executor_type, task, reply.edits()))
            return EditedTask(edited) if reapprove_edits else edited
        raise JobStop(error.code, f"{error.message} (aborted by the user)", step.id)


def access_context(access: SqlAccess) -> ExecutionContext:
    """The execution context of a SQL call: what it may read, as the orchestrator decided it."""
    return ExecutionContext.model_validate(access.model_dump())


def _caller(step: StepState | None, executor_type: str) -> Caller:
    """Who made a failed call, for the policy: a step, planning, the Executor's turn, or the Supervisor."""
    if step is not None:
        return "step"
    if executor_type == PLAN:
        return "plan"
    return "executor" if executor_type == AGENT_TURN else "supervise"


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


def redraft(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """An edited SQL step input: a new question without new SQL drops the old SQL, so it is drafted again."""
    if "sql" in new and new.get("sql") == old.get("sql") and new.get("question") != old.get("question"):
        return {k: v for k, v in new.items() if k != "sql"}
    return new
