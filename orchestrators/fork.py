"""A fork of a job: carry the steps before the fork point over from the origin, then run the rest.

The fork's input names only its origin and fork point; the ``load_fork_base`` activity reads the origin's plan
and the carried steps' results once, and its result is in the fork's own history, so a replay (or a restart
after a crash) sees the same base and never runs a carried step again. The plan is carried over too: no
planning call. Only results travel: the steps from the fork point on run under the fork's own request
(its approval policy, constraints and tools); no approval of the origin reaches an execution context here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrators.outcomes import JobStop
from shared.executors import StepInputError, apply_edits, check_plan
from shared.jobs.contracts import ErrorCode
from shared.jobs.fork import LOAD_FORK_BASE, ForkBaseResult, edited_input
from shared.jobs.models import StepState
from shared.jobs.plan import Plan

if TYPE_CHECKING:
    from collections.abc import Generator

    from orchestrators.job import JobRun


def run_fork(run: JobRun) -> Generator[Any, Any, Any]:
    """Load the base, show the carried steps as done, and run the plan from the fork point; returns the answer."""
    fork = run.job.fork
    assert fork is not None
    raw = yield run.ctx.call_activity(LOAD_FORK_BASE, {"origin": fork.origin, "from_step": fork.from_step})
    try:
        loaded = ForkBaseResult.model_validate(_as_dict(raw))
    except (ValidationError, ValueError) as exc:
        raise JobStop(ErrorCode.INVALID_INPUT, f"the fork's base is not valid: {exc}"[:600], fork.from_step) from exc
    base = loaded.base
    if base is None:
        raise JobStop(loaded.error_code or "FORK_NOT_SUPPORTED", loaded.error_message or "no base", fork.from_step)
    try:
        plan = check_plan(Plan.model_validate(base.plan))
    except ValueError as exc:  # ValidationError too: the origin's plan no longer passes today's checks
        raise JobStop(ErrorCode.BAD_REQUEST, f"the origin's plan is not valid here: {exc}"[:600]) from exc
    steps = list(plan.steps)
    spec = steps[base.index]
    if spec.id != fork.from_step:
        raise JobStop(ErrorCode.BAD_REQUEST, f"the fork point {fork.from_step!r} is not step {base.index + 1}")
    if fork.input:
        try:
            # The same check as any edit: only the kind's editable fields, each valid; nothing else is merged.
            new_input = edited_input(spec.input, apply_edits(spec.kind, spec.input, fork.input))
        except StepInputError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"the fork's edit of {spec.id!r}: {exc.message}", spec.id) from exc
        steps[base.index] = spec.model_copy(update={"input": new_input})
        plan = plan.model_copy(update={"steps": steps})
    carried = [c.step for c in base.carried]
    for item in base.carried:
        if item.output is not None:
            run.outputs[item.step.id] = item.output
    run.state.plan_status = "planned"
    run.state.steps = carried + [StepState(id=s.id, kind=s.kind, title=s.title) for s in steps[base.index :]]
    run.state.status = "running"
    run.publish()
    run.log("forked from %s at %s; %d steps carried over", fork.origin, fork.from_step, len(carried))
    return (yield from run.run_steps(plan, start=base.index))


def _as_dict(value: Any) -> dict[str, Any]:
    import json

    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
