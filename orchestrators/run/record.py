"""The record of one run: its input, its state, the outputs of its steps, and how it is published.

Deterministic: time comes from the orchestration context, logs are written once (never on replay), and the
status and cost events go through the hook ``function_app.py`` installs (``set_job_events``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from shared.executors import AGENT_TURN, PLAN, SUPERVISE, get_executor
from shared.jobs.contracts import Usage
from shared.jobs.models import ErrorInfo, JobInput, JobResult, JobState, StepState, Waiting, custom_status
from shared.jobs.quote import Quote

logger = logging.getLogger("orchestrators.job")

Gen = Generator[Any, Any, Any]
# What a step hands on (its activity's result, or what the orchestrator made of it), by step id.
StepOutput = dict[str, Any]


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
# it (a test driving a run) a status change is only logged as text.
_job_events: JobEvents | None = None


def set_job_events(events: JobEvents) -> None:
    """Install where job status and cost events go (function_app.py does, once)."""
    global _job_events
    _job_events = events


class RunRecord:
    """A run's input, state and step outputs; the one place that publishes them."""

    def __init__(self, context: Any, *, part_of_run: bool = False) -> None:
        self.ctx = context
        self.job = JobInput.model_validate(as_dict(context.get_input()))
        self.state = JobState()
        self._outputs: dict[str, StepOutput] = {}
        self.clarifications: dict[str, str] = {}
        self.last_status: str | None = None
        # A part of a workflow run (a branch, a sub-workflow): a step that fails for good fails the part (its
        # parent decides), and its questions reach people through the root run (``Questions.can_ask``).
        self.part_of_run = part_of_run
        # Why the step being run was skipped (set where it is skipped, read when the step ends).
        self._skip_reason: str | None = None
        # Whether a person chose that skip (a Supervisor never re-runs what a person decided to skip).
        self._skipped_by_user = False

    # --- step outputs and skips ----------------------------------------------------------------

    @property
    def outputs(self) -> Mapping[str, StepOutput]:
        """The outputs of the steps that succeeded, by step id (read-only: ``keep`` adds one)."""
        return MappingProxyType(self._outputs)

    def keep(self, step_id: str, output: StepOutput) -> None:
        """Record a step's output (the later steps and the answer read it)."""
        self._outputs[step_id] = output

    def keep_all(self, outputs: Mapping[str, StepOutput]) -> None:
        """Record several outputs at once (carried over, or merged from a part)."""
        self._outputs.update(outputs)

    def drop(self, step_id: str) -> None:
        """Forget a step's output (it runs again)."""
        self._outputs.pop(step_id, None)

    def clarify(self, step_id: str, text: str) -> None:
        """What a person said about a step; the steps that depend on it are given it."""
        self.clarifications[step_id] = text

    @property
    def skip_reason(self) -> str | None:
        """Why the step being run was skipped, when it was."""
        return self._skip_reason

    @property
    def skipped_by_user(self) -> bool:
        """Whether a person chose the skip of the step being run."""
        return self._skipped_by_user

    def begin_step(self, *, by_user_too: bool = False) -> None:
        """A step starts: no skip recorded yet (``by_user_too``: nor who chose one)."""
        self._skip_reason = None
        if by_user_too:
            self._skipped_by_user = False

    def skipped(self, reason: str, by_user: bool | None = None) -> None:
        """The step being run is skipped, and why (``by_user``: whether a person chose it; None keeps it)."""
        self._skip_reason = reason
        if by_user is not None:
            self._skipped_by_user = by_user

    # --- what the producers of steps change (they write no field of the state themselves) --------

    def start_running(self, plan_status: Literal["planned", "agent"] = "planned") -> None:
        """The run has its plan (a graph, a team) or is an Executor loop, and runs."""
        self.state.plan_status = plan_status
        self.state.status = "running"

    def show_steps(self, steps: list[StepState]) -> None:
        """The steps the view shows, in order (a plan, a graph's nodes, a replan's tail, what a fork carried)."""
        self.state.steps = steps

    def show_plan(self, steps: list[StepState], plan_status: Literal["planned", "agent"] = "planned") -> None:
        """Show the run's steps and start running them."""
        self.show_steps(steps)
        self.start_running(plan_status)

    def put_step(self, step: StepState) -> None:
        """Replace the shown step with the same id (a part's or a fork's copy of it)."""
        for index, shown in enumerate(self.state.steps):
            if shown.id == step.id:
                self.state.steps[index] = step
                return
        raise KeyError(step.id)

    def add_step(self, step: StepState, *, current: bool = True) -> None:
        """Append a step to the view (an Executor's call, a team's round); ``current``: it is the one running."""
        self.state.steps.append(step)
        if current:
            self.state.step_index = len(self.state.steps) - 1

    def at_index(self, index: int) -> None:
        """The step at ``index`` is the one running."""
        self.state.step_index = index

    def at_step(self, step: StepState) -> None:
        """``step`` (one of the shown steps) is the one running."""
        self.state.step_index = self.state.steps.index(step)

    def count_turn(self, turn: int) -> None:
        """The Executor is on turn ``turn`` (agent mode)."""
        self.state.turns = turn

    def carry(self, usage: Usage | None) -> None:
        """A fork: what the origin's carried-over steps (and an agent's earlier turns) used; not in ``usage``."""
        self.state.carried_over = usage

    def continue_replans(self, replans: int) -> None:
        """A fork of a planned job: its own replans are numbered after the origin's ``replans``."""
        self.state.replans = replans

    def add_part_usage(self, usage: Usage) -> None:
        """A part's (a branch's, a sub-workflow's) usage joins the run's."""
        self.state.usage = self.state.usage + usage

    def reset_usage(self, usage: Usage) -> None:
        """The run's usage goes back to ``usage`` (a fork's merged branches: their usage is the origin's)."""
        self.state.usage = usage

    def set_quote(self, quote: Quote) -> None:
        """What the job may cost (shown in the view)."""
        self.state.quote = quote

    def show_waiting(self, waiting: Waiting | None) -> None:
        """A part's question is (or none is) the run's: the view shows it, and a running run waits for it."""
        self.state.waiting = waiting
        if self.state.status in ("running", "waiting_for_user"):
            self.state.status = "waiting_for_user" if waiting is not None else "running"

    def complete(self) -> None:
        """The run ended well: no step is current."""
        self.state.status = "completed"
        self.state.step_index = len(self.state.steps)

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

    def end_wait(self, step: StepState) -> None:
        """Add a finished human wait to the step's waited time (a wait is neither an attempt nor run time)."""
        if step.waiting_since is None:
            return
        started = datetime.fromisoformat(step.waiting_since)
        waited = self.ctx.current_utc_datetime - started
        step.waited_ms += max(0, int(waited.total_seconds() * 1000))
        step.waiting_since = None

    # --- the end -----------------------------------------------------------------------------

    def note_unsupported(self, reason: str) -> None:
        """An answer without support: its step says so, where the view shows it, and the log."""
        for step in reversed(self.state.steps):
            if writes_answer(step.kind) and step.state == "succeeded":
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
                clear_retry(step)
        self.publish()
        self.log("failed at %s: %s %s", info.step_id, info.code, info.message)
        return JobResult(status="failed", usage=self.state.usage, error=info).model_dump(mode="json")


def writes_answer(kind: str) -> bool:
    """Whether a step kind writes the job's answer."""
    spec = get_executor(kind)
    return spec is not None and spec.writes_answer


def runs_sql(kind: str) -> bool:
    """Whether a step kind runs SQL (under the approval policy)."""
    spec = get_executor(kind)
    return spec is not None and spec.runs_sql


def clear_retry(step: StepState) -> None:
    """The step no longer waits out a back-off."""
    step.retry_at = step.next_attempt = step.max_attempts = None


def as_dict(value: Any) -> dict[str, Any]:
    """An activity result or orchestration input as a dict (JSON text is decoded)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def bounded(value: dict[str, Any], limit: int = 2000) -> dict[str, Any]:
    """A value shown in a question or to the Supervisor, cut to ``limit`` characters of JSON."""
    text = json.dumps(value, default=str)
    return value if len(text) <= limit else {"truncated": text[:limit]}


def problems(exc: ValidationError) -> str:
    """The first problems of a validation error, in one line."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors(include_url=False)[:3]
    )[:500]
