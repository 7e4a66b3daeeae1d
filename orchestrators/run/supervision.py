"""Hybrid mode's Supervisor: after a step, a model may ask to retry it, switch its tool, ask a person or replan.

Its decision is untrusted data, bounded here: a step is re-run at most ``MAX_SUPERVISOR_RETRIES`` times (apart
from its own attempts), a new tool must be a lookup kind the plan may use and its input is built through that
kind's typed model, and the plan is made again at most ``MAX_REPLANS`` times (by the planner the run was
given: the plan producer's, so the core imports no producer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrators.run.record import Gen, bounded, problems, writes_answer
from shared.executors import SUPERVISE, StepInputError, input_for_text, lookup_kinds, text_field_of
from shared.jobs.models import StepState
from shared.jobs.plan import ALREADY_DONE, PlanStep, SupervisorDecision, replanned_steps

if TYPE_CHECKING:
    from orchestrators.run.core import RunCore

MAX_SUPERVISOR_RETRIES = 2
MAX_REPLANS = 2

# Makes a plan for a question, with a note of what already ran: the plan producer's make_plan.
Planner = Callable[[str, str | None], Gen]


class Supervision:
    """The Supervisor's decisions after the steps of a hybrid-mode plan, and their bounds."""

    def __init__(self, core: RunCore, planner: Planner) -> None:
        self.core = core
        self.planner = planner
        # How often the Supervisor has re-run each step (retry or another tool), by step id.
        self.supervisor_reruns: dict[str, int] = {}

    def supervise(self, spec: PlanStep, step: StepState, steps: list[PlanStep], index: int) -> Gen:
        """Hybrid mode: let the Supervisor decide after a step; deterministic code bounds what it may do."""
        out = yield from self.core.attempts.execute(
            None,
            SUPERVISE,
            {
                "question": self.core.job.request.question,
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
            self.core.log("ignoring an invalid supervisor decision after %s: %s", spec.id, problems(exc))
            return None
        self.core.log("supervisor after %s: %s (%s)", spec.id, decision.action, decision.reason[:80])
        # The Supervisor may run a step again (retry or another tool) a bounded number of times, counted apart
        # from the step's own attempts: a step whose retries the policy spent may still be re-run once it is skipped.
        reruns = self.supervisor_reruns.get(step.id, 0)
        if decision.action in ("retry", "choose_tool") and reruns < MAX_SUPERVISOR_RETRIES:
            self.supervisor_reruns[step.id] = reruns + 1
            if decision.action == "retry":
                step.state = "pending"
                self.core.record.drop(spec.id)
            else:
                self.switch_tool(spec, step, steps, index, decision.executor_type)
            return None
        if decision.action == "ask_user" and decision.question:
            reply = yield from self.core.questions.ask(
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
            self.core.record.clarify(spec.id, reply.action())
            return None
        if decision.action == "replan" and self.core.state.replans < MAX_REPLANS:
            return (yield from self.replan(steps, index, decision.reason))
        return None

    def skipped_output(self, step: StepState) -> dict[str, Any]:
        """What the Supervisor is told of a skipped step: why, the error that led to it, and who chose it."""
        return {
            "skipped": True,
            "reason": step.note,
            "error_code": step.error.code if step.error else None,
            "skipped_by_user": self.core.record.skipped_by_user,
        }

    def switch_tool(self, spec: PlanStep, step: StepState, steps: list[PlanStep], index: int, kind: str | None) -> None:
        """Run the step again as another step kind, when the Supervisor asks for one the plan may use."""
        if kind is None or kind == spec.kind or kind not in lookup_kinds():
            return
        text = str(spec.input.get(text_field_of(spec.kind)) or self.core.job.request.question)
        try:
            # Built through the target kind's input model: only a question or query, nothing security-relevant.
            new_input = input_for_text(kind, text)
        except StepInputError as exc:
            self.core.log("ignoring the supervisor's switch after %s: %s", spec.id, exc.message)
            return
        steps[index] = spec.model_copy(update={"kind": kind, "input": new_input})
        step.kind = kind
        step.state = "pending"
        self.core.record.drop(spec.id)

    def replan(self, steps: list[PlanStep], index: int, reason: str) -> Gen:
        """A new plan for what is left; its step ids get a suffix so they never clash with the steps that ran."""
        self.core.state.replans += 1
        ran = [s for s in steps[: index + 1] if s.id in self.core.outputs]
        done = ", ".join(f"{s.id}={s.kind} {json.dumps(str(s.input.get(text_field_of(s.kind)) or ''))}" for s in ran)
        plan = yield from self.planner(self.core.job.request.question, f"{ALREADY_DONE}{done}. {reason}")
        suffix = f"r{self.core.state.replans}"
        # The answer of the new plan also cites what already ran (shared with forks: shared/jobs/fork_carry.py).
        return replanned_steps(list(plan.steps), [s.id for s in ran], suffix, writes_answer)


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
