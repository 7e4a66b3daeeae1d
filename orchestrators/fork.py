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

from orchestrators.agent import AgentLoop
from orchestrators.outcomes import JobStop
from shared.executors import StepInputError, apply_edits, check_plan, lookup_kinds
from shared.jobs.agent import REQUEST_USER_FEEDBACK, ToolCallRecord
from shared.jobs.contracts import ErrorCode
from shared.jobs.fork import LOAD_FORK_BASE, ForkBase, ForkBaseResult, edited_input
from shared.jobs.models import StepState
from shared.jobs.plan import Plan
from shared.tools.python import PYTHON_TOOL, RUN_PYTHON

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
    run.state.carried_over = base.carried_usage()
    if base.agent is not None:
        return (yield from _run_agent_fork(run, base))
    if base.plan is None:
        raise JobStop(ErrorCode.BAD_REQUEST, "the fork's base has no plan")
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


def _run_agent_fork(run: JobRun, base: ForkBase) -> Generator[Any, Any, Any]:
    """An agent job from a turn: the earlier tool calls carried over, the Executor given the transcript it saw."""
    agent, fork = base.agent, run.job.fork
    assert agent is not None and fork is not None
    loop = AgentLoop(run)
    try:
        loop.transcript = [ToolCallRecord.model_validate(r) for r in agent.transcript]
    except ValidationError as exc:
        raise JobStop(ErrorCode.INVALID_INPUT, "the origin's transcript is not valid", fork.from_step) from exc
    # Lookups' results are the answer's sources; a family tool's data reached the Executor only (as in the origin).
    kept = lookup_kinds() | {PYTHON_TOOL, RUN_PYTHON}
    for item in base.carried:
        if item.output is not None and item.step.kind in kept:
            run.outputs[item.step.id] = item.output
    loop.calls = len(base.carried)
    loop.replies = [answer for r in loop.transcript if (answer := _reply(r)) is not None]
    run.agent_mode = True
    run.state.steps = [c.step for c in base.carried]
    run.log("forked from %s at %s; %d tool calls carried over", fork.origin, fork.from_step, loop.calls)
    if agent.turn == 0:  # only the answer runs again
        loop.turns = run.state.turns = agent.turns_taken
        run.state.plan_status = "agent"
        run.state.status = "running"
        run.publish()
        return (yield from loop.write_answer())
    loop.first_turn = agent.turn
    loop.turns = run.state.turns = agent.turn - 1
    return (yield from loop.work())


def _reply(record: ToolCallRecord) -> str | None:
    """What a person told the Executor, from a carried request_user_feedback call (the answer is written for it)."""
    if record.tool != REQUEST_USER_FEEDBACK or not record.success or not isinstance(record.data, dict):
        return None
    answer = record.data.get("answer")
    return answer if isinstance(answer, str) else None


def _as_dict(value: Any) -> dict[str, Any]:
    import json

    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
