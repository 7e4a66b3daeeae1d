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
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from orchestrators.agent import AgentLoop, agent_step
from orchestrators.fork import run_fork
from orchestrators.outcomes import JobStop
from orchestrators.run.core import RunCore
from orchestrators.run.record import (
    Gen,
    bounded,
    problems,
    writes_answer,
)
from shared.executors import (
    PLAN,
    SUPERVISE,
    StepInputError,
    check_plan,
    input_for_text,
    lookup_kinds,
    text_field_of,
)
from shared.jobs.contracts import (
    ErrorCode,
)
from shared.jobs.models import (
    JobResult,
    StepState,
)
from shared.jobs.plan import (
    ALREADY_DONE,
    ORCHESTRATOR_KINDS,
    Plan,
    PlanStep,
    SupervisorDecision,
)

MAX_SUPERVISOR_RETRIES = 2
MAX_REPLANS = 2


# How a workflow or team run walks its graph: a factory of walks, each with ``work()``
# (orchestrators/__init__.py installs WorkflowWalk; no import ring). A fork of a run uses the same walk.
_run_walker: Callable[[RunCore], Any] | None = None


def set_run_walker(walker: Callable[[RunCore], Any]) -> None:
    """Install the walker of workflow and team runs (orchestrators/__init__.py does, once)."""
    global _run_walker
    _run_walker = walker


class JobRun:
    """One execution of the job orchestration; a plain object that tests can drive."""

    def __init__(self, context: Any, *, part_of_run: bool = False) -> None:
        self.core = RunCore(context, agent_step=agent_step, part_of_run=part_of_run)
        self.record = self.core.record
        self.budgets = self.core.budgets
        self.questions = self.core.questions
        self.attempts = self.core.attempts
        self.steps = self.core.steps
        self.ctx, self.job, self.state = self.core.ctx, self.core.job, self.core.state
        # How often the Supervisor has re-run each step (retry or another tool), by step id.
        self.supervisor_reruns: dict[str, int] = {}

    def log(self, message: str, *args: Any) -> None:
        """Log once, not on replay."""
        self.record.log(message, *args)

    def publish(self) -> None:
        """Publish the state."""
        self.record.publish()

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
                answer = yield from _run_walker(self.core).work()
            elif self.job.request.mode == "agent":
                self.attempts.hand_failures_to_executor()
                answer = yield from AgentLoop(self.core).work()
            else:
                plan = yield from self.make_plan(self.job.request.question)
                self.state.plan_status = "planned"
                self.state.steps = [StepState(id=s.id, kind=s.kind, title=s.title) for s in plan.steps]
                self.state.status = "running"
                self.publish()
                answer = yield from self.run_steps(plan)
        except JobStop as stop:
            return self.record.finish_failed(stop.info)
        self.state.status = "completed"
        self.state.step_index = len(self.state.steps)
        unsupported = answer.get("unsupported") if answer else None
        if isinstance(unsupported, str):
            self.record.note_unsupported(unsupported)
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

    def make_plan(self, question: str, context_note: str | None = None) -> Gen:
        """Run the plan executor (with the same retry policy as steps) and validate its plan."""
        task: dict[str, Any] = {"question": question if not context_note else f"{question}\n\n{context_note}"}
        # The planner is offered the kinds the job's tools allow (run_python only with python.run).
        tools = {"allowed_tools": list(self.job.request.tools)} if self.job.request.tools else None
        out = yield from self.attempts.execute(None, PLAN, task, tools)
        if out is None:
            raise JobStop("PLAN_SKIPPED", "planning was skipped, so there is nothing to run")
        # The plan executor checked it too; the orchestrator trusts no activity output.
        try:
            return check_plan(Plan.model_validate(out.result))
        except ValidationError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"planning failed: the plan is not valid: {problems(exc)}") from exc
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
            step.started_at = self.record.now_iso()
            self.record.begin_step(by_user_too=True)
            result = yield from self.steps.run_step(spec, step)
            step.ended_at = self.record.now_iso()
            if result is None:
                step.state = "skipped"
                step.note = self.record.skip_reason or "it was skipped"
                self.log("step %s skipped: %s", spec.id, step.note)
            else:
                step.state = "succeeded"
                self.record.keep(spec.id, result)
                if writes_answer(spec.kind):
                    answer = result
            self.publish()
            if (
                self.job.request.mode == "hybrid"
                and spec.kind not in ORCHESTRATOR_KINDS
                and not writes_answer(spec.kind)
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

    # --- policy ------------------------------------------------------------------------------

    def supervise(self, spec: PlanStep, step: StepState, steps: list[PlanStep], index: int) -> Gen:
        """Hybrid mode: let the Supervisor decide after a step; deterministic code bounds what it may do."""
        out = yield from self.attempts.execute(
            None,
            SUPERVISE,
            {
                "question": self.job.request.question,
                "plan": [s.model_dump(mode="json") for s in steps],
                "step": spec.model_dump(mode="json"),
                "output": bounded(_compact(self.core.outputs.get(spec.id)) or self.skipped_output(step)),
            },
        )
        if out is None:
            return None
        try:
            decision = SupervisorDecision.model_validate(out.result)
        except ValidationError as exc:
            self.log("ignoring an invalid supervisor decision after %s: %s", spec.id, problems(exc))
            return None
        self.log("supervisor after %s: %s (%s)", spec.id, decision.action, decision.reason[:80])
        # The Supervisor may run a step again (retry or another tool) a bounded number of times, counted apart
        # from the step's own attempts: a step whose retries the policy spent may still be re-run once it is skipped.
        reruns = self.supervisor_reruns.get(step.id, 0)
        if decision.action in ("retry", "choose_tool") and reruns < MAX_SUPERVISOR_RETRIES:
            self.supervisor_reruns[step.id] = reruns + 1
            if decision.action == "retry":
                step.state = "pending"
                self.record.drop(spec.id)
            else:
                self.switch_tool(spec, step, steps, index, decision.executor_type)
            return None
        if decision.action == "ask_user" and decision.question:
            reply = yield from self.questions.ask(
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
            self.record.clarify(spec.id, reply.action())
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
            "skipped_by_user": self.record.skipped_by_user,
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
        self.record.drop(spec.id)

    def replan(self, steps: list[PlanStep], index: int, reason: str) -> Gen:
        """A new plan for what is left; its step ids get a suffix so they never clash with the steps that ran."""
        self.state.replans += 1
        ran = [s for s in steps[: index + 1] if s.id in self.core.outputs]
        done = ", ".join(f"{s.id}={s.kind} {json.dumps(str(s.input.get(text_field_of(s.kind)) or ''))}" for s in ran)
        plan = yield from self.make_plan(self.job.request.question, f"{ALREADY_DONE}{done}. {reason}")
        suffix = f"r{self.state.replans}"
        # The answer of the new plan also cites what already ran.
        kept = [s.id for s in ran]
        return [
            s.model_copy(
                update={
                    "id": f"{s.id}{suffix}"[:32],
                    "depends_on": (kept if writes_answer(s.kind) else []) + [f"{d}{suffix}"[:32] for d in s.depends_on],
                }
            )
            for s in plan.steps
        ]


def _is_pending(step: StepState) -> bool:
    # A function, not an inline test: supervise() may set the state back to pending behind mypy's narrowing.
    return step.state == "pending"


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


def job_orchestrator_body(context: Any) -> Gen:
    """The orchestrator body as a plain generator (the decorated function only delegates to it)."""
    return (yield from JobRun(context).run())
