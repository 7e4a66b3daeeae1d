"""The plan producer: a planned job's steps come from the plan executor, and run in order through the core.

The plan is untrusted data: it is validated (``check_plan``) after the executor checked it, and every step's input
is validated again by the core when it runs. In hybrid mode the Supervisor may retry, switch, ask or replan after
a step (orchestrators/run/supervision.py); a fork of a planned job goes on from its fork point through
``run_steps``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from orchestrators.outcomes import JobStop
from orchestrators.quote_gate import gate as quote_gate
from orchestrators.run.core import RunCore
from orchestrators.run.record import Gen, problems, writes_answer
from orchestrators.run.supervision import Supervision
from shared.executors import PLAN, check_plan
from shared.jobs.contracts import ErrorCode, ExecutionContext
from shared.jobs.models import StepState
from shared.jobs.plan import ORCHESTRATOR_KINDS, Plan


class PlanRun:
    """A planned job (or the rest of one, in a fork): make the plan, run its steps."""

    def __init__(self, core: RunCore) -> None:
        self.core = core
        self.supervision = Supervision(core, self.make_plan)

    def work(self) -> Gen:
        """Plan, show the plan, and run it; returns the answer of the last step that writes one."""
        plan = yield from self.make_plan(self.core.job.request.question)
        self.core.record.show_plan([StepState(id=s.id, kind=s.kind, title=s.title) for s in plan.steps])
        self.core.publish()
        yield from quote_gate(self.core, plan)  # the quote, and approval.cost_over (orchestrators/quote_gate.py)
        return (yield from self.run_steps(plan))

    def make_plan(self, question: str, context_note: str | None = None) -> Gen:
        """Run the plan executor (with the same retry policy as steps) and validate its plan."""
        task: dict[str, Any] = {"question": question if not context_note else f"{question}\n\n{context_note}"}
        # The planner is offered the kinds the job's tools allow (run_python only with python.run).
        tools = (
            ExecutionContext(allowed_tools=list(self.core.job.request.tools)) if self.core.job.request.tools else None
        )
        out = yield from self.core.attempts.execute(None, PLAN, task, tools)
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
            step = self.core.state.steps[index]
            self.core.record.at_index(index)
            step.started_at = self.core.record.now_iso()
            self.core.record.begin_step(by_user_too=True)
            result = yield from self.core.steps.run_step(spec, step)
            step.ended_at = self.core.record.now_iso()
            if result is None:
                step.state = "skipped"
                step.note = self.core.record.skip_reason or "it was skipped"
                self.core.log("step %s skipped: %s", spec.id, step.note)
            else:
                step.state = "succeeded"
                self.core.record.keep(spec.id, result)
                if writes_answer(spec.kind):
                    answer = result
            self.core.publish()
            if (
                self.core.job.request.mode == "hybrid"
                and spec.kind not in ORCHESTRATOR_KINDS
                and not writes_answer(spec.kind)
            ):
                replacement = yield from self.supervision.supervise(spec, step, steps, index)
                if replacement is not None:
                    steps = steps[: index + 1] + replacement
                    self.core.record.show_steps(
                        self.core.state.steps[: index + 1]
                        + [StepState(id=s.id, kind=s.kind, title=s.title) for s in replacement]
                    )
                    self.core.publish()
                elif _is_pending(step):  # the supervisor asked for a retry of this step
                    continue
            index += 1
        return answer


def _is_pending(step: StepState) -> bool:
    # A function, not an inline test: supervise() may set the state back to pending behind mypy's narrowing.
    return step.state == "pending"
