"""A fork of a job: carry the steps before the fork point over from the origin, then run the rest.

The fork's input names only its origin and fork point; the ``load_fork_base`` activity reads the origin's plan
and the carried steps' results once, and its result is in the fork's own history, so a replay (or a restart
after a crash) sees the same base and never runs a carried step again. The plan is carried over too: no
planning call. Only results travel: the steps from the fork point on run under the fork's own request
(its approval policy, constraints and tools); no approval of the origin reaches an execution context here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrators.agent import AgentLoop
from orchestrators.node_edit import edited_node
from orchestrators.outcomes import JobStop
from shared.executors import StepInputError, apply_edits, check_plan, lookup_kinds
from shared.jobs.agent import PYTHON_TOOL, REQUEST_USER_FEEDBACK, RUN_PYTHON, ToolCallRecord
from shared.jobs.contracts import ErrorCode
from shared.jobs.fork import LOAD_FORK_BASE, ForkBase, ForkBaseResult, WorkflowBase, edited_input
from shared.jobs.models import StepState
from shared.jobs.plan import ASK_USER, Plan

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from orchestrators.plan import PlanRun
    from orchestrators.run.core import RunCore


def run_fork(run: RunCore, plan_run: PlanRun, walker: Callable[[RunCore], Any]) -> Generator[Any, Any, Any]:
    """Load the base, show the carried steps as done, and run the plan from the fork point; returns the answer.

    ``plan_run`` runs a planned job's steps from the fork point; ``walker`` makes the walk of a workflow run (the one
    JobRun runs runs with), for a fork of one.
    """
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
    run.record.carry(base.carried_usage())
    if base.agent is not None:
        return (yield from _run_agent_fork(run, base))
    if base.workflow is not None:
        return (yield from _run_workflow_fork(run, base, walker))
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
    run.record.keep_all(base.outputs)  # what a carried agent step's calls found (``<step>-t<n>``)
    for item in base.carried:
        if item.output is not None:
            run.record.keep(item.step.id, item.output)
            if item.step.kind == ASK_USER and isinstance(item.output.get("answer"), str):
                # A person's answer reaches the steps that depend on it as text, as in the origin: a result only.
                run.record.clarify(item.step.id, item.output["answer"])
    for step_id, text in base.clarifications.items():  # what people told the origin's Supervisor, as text
        run.record.clarify(step_id, text)
    run.record.continue_replans(base.replans)
    run.record.show_plan(carried + [StepState(id=s.id, kind=s.kind, title=s.title) for s in steps[base.index :]])
    run.publish()
    run.log("forked from %s at %s; %d steps carried over", fork.origin, fork.from_step, len(carried))
    return (yield from plan_run.run_steps(plan, start=base.index))


def _run_agent_fork(run: RunCore, base: ForkBase) -> Generator[Any, Any, Any]:
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
            run.record.keep(item.step.id, item.output)
    loop.calls = len(base.carried)
    loop.replies = [answer for r in loop.transcript if (answer := _reply(r)) is not None]
    run.attempts.hand_failures_to_executor()
    run.record.show_steps([c.step for c in base.carried])
    run.log("forked from %s at %s; %d tool calls carried over", fork.origin, fork.from_step, loop.calls)
    if agent.turn == 0:  # only the answer runs again
        loop.turns = agent.turns_taken
        run.record.count_turn(agent.turns_taken)
        run.record.start_running("agent")
        run.publish()
        return (yield from loop.write_answer())
    loop.first_turn = agent.turn
    loop.turns = agent.turn - 1
    run.record.count_turn(loop.turns)
    return (yield from loop.work())


def _run_workflow_fork(run: RunCore, base: ForkBase, walker: Callable[[RunCore], Any]) -> Generator[Any, Any, Any]:
    """A workflow run from a node, pinned to the origin's definition: the nodes that ended before it are carried.

    Their results are the origin's (a step or tool node's activity result, a branch's part result, a person's
    answer); conditions and joins are evaluated again on them (pure, so they decide as they did); the walk then
    goes on from the fork point.
    """
    assert base.workflow is not None
    if run.job.run is None:
        raise JobStop(ErrorCode.BAD_REQUEST, "the fork of a workflow run names no run")
    walk = walker(run)
    workflow = yield from walk.root()
    if workflow is None:  # a supervisor team: its rounds, the ones before the fork point carried over
        return (yield from _run_team_fork(run, base, walk))
    walk.open(workflow)
    if run.job.fork is not None and run.job.fork.input:
        node = walk.nodes.get(run.job.fork.from_step)
        if node is None:
            raise JobStop(ErrorCode.BAD_REQUEST, f"the run has no node {run.job.fork.from_step!r} to edit")
        walk.nodes[node.id] = edited_node(node, run.job.fork.input)
    run.record.keep_all(base.outputs)  # what a carried agent node's calls found (``<node>-t<n>``)
    if base.workflow.branch is not None:
        _fork_in_branch(run, base, walk)
    usage = run.state.usage
    for item in base.carried:
        node = walk.nodes.get(item.step.id)
        if node is None or node.id in walk.region:
            continue  # a branch's node comes back with its branch (its parallel node)
        walk.ended[node.id] = item.step.state
        if item.step.state == "succeeded":
            run.record.keep(node.id, _carried_output(walk, node, item.output, base.workflow))
    run.record.reset_usage(usage)  # merged branches brought their usage: it is the origin's, counted apart
    by_id = {c.step.id: c.step for c in base.carried}
    run.record.show_steps([by_id.get(s.id, s) for s in run.state.steps])
    fork = run.job.fork
    run.log(
        "forked from %s at %s; %d nodes carried over",
        fork.origin if fork else "",
        fork.from_step if fork else "",
        len(base.carried),
    )
    run.publish()
    yield from walk.walk()
    return walk.finish()


def _fork_in_branch(run: RunCore, base: ForkBase, walk: Any) -> None:
    """A fork point inside a parallel branch: when the walk reaches that parallel node, its other branches are the
    origin's part results (merged, never started) and the forked branch starts with its nodes before the fork point
    carried over (``BranchFork``), then runs from the fork point (with its edit)."""
    from shared.definitions.models import ParallelNode
    from shared.jobs.contracts import Usage
    from shared.jobs.runs import BranchFork, PartResult

    wb, fork = base.workflow, run.job.fork
    assert wb is not None and fork is not None and wb.branch is not None
    parallel = walk.nodes.get(wb.parallel)
    if not isinstance(parallel, ParallelNode) or walk.region.get(fork.from_step) != wb.branch:
        raise JobStop("FORK_NOT_SUPPORTED", f"{fork.from_step!r} is not in branch {wb.branch!r} of {wb.parallel!r}")
    steps = {c.step.id: c.step for c in base.carried}
    for branch in parallel.branches:
        if branch == wb.branch:
            continue
        if branch not in wb.parts:
            raise JobStop("FORK_NOT_SUPPORTED", f"branch {branch!r} of {parallel.id!r} is not in the origin's history")
        part = PartResult.model_validate(wb.parts[branch])
        shown = [steps[s["id"]].model_dump(mode="json") if s.get("id") in steps else s for s in part.steps]
        # Its usage is the origin's, counted apart (``usage.carried_over``); its steps show as carried over.
        walk.carried_parts[branch] = part.model_copy(update={"steps": shown, "usage": Usage()})
    own = [c for c in base.carried if walk.region.get(c.step.id) == wb.branch]
    walk.branch_forks[wb.branch] = BranchFork(
        at=fork.from_step,
        steps=[c.step.model_dump(mode="json") for c in own],
        outputs={c.step.id: c.output for c in own if c.output is not None},
        edit=fork.input or None,
    )


def _run_team_fork(run: RunCore, base: ForkBase, walk: Any) -> Generator[Any, Any, Any]:
    """A supervisor team from a round: the rounds before it (the supervisor's choices, the members' answers) are
    carried over as results, so the rounds are rebuilt as the origin ran them; the fork point's round runs again."""
    from orchestrators.team import TeamRounds
    from shared.jobs.fork import AgentNodeEdit

    fork = run.job.fork
    assert fork is not None
    edit: tuple[str, str] | None = None
    if fork.input:
        try:
            edit = (fork.from_step, AgentNodeEdit.model_validate(fork.input).prompt)
        except ValidationError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"the fork's edit of {fork.from_step!r}: {exc}"[:600]) from exc
    carried: dict[str, tuple[StepState, dict[str, Any]]] = {}
    for item in base.carried:
        if item.step.state != "succeeded" or item.output is None:
            raise JobStop("FORK_NOT_SUPPORTED", f"round {item.step.id!r} of the origin has no result to carry over")
        carried[item.step.id] = (item.step, item.output)
    run.record.keep_all(base.outputs)  # what the carried rounds' calls found (``<step>-t<n>``)
    run.log("forked from %s at %s; %d rounds carried over", fork.origin, fork.from_step, len(carried))
    return (yield from TeamRounds(walk, walk.team, carried, edit).work())


def _carried_output(walk: Any, node: Any, output: dict[str, Any] | None, base: WorkflowBase) -> Any:
    """A carried node's output as the walk holds it (see WorkflowWalk.dispatch), from what the origin recorded."""
    from orchestrators.outcomes import event_data, structured
    from shared.definitions.models import (
        AgentNode,
        ConditionNode,
        HumanNode,
        JoinNode,
        LoopNode,
        ParallelNode,
        StepNode,
        ToolNode,
        WorkflowNode,
    )
    from shared.jobs.runs import PartResult

    if isinstance(node, StepNode) or (isinstance(node, ToolNode) and node.tool in lookup_kinds()):
        return output or {}
    if isinstance(node, WorkflowNode | LoopNode):
        # A sub-workflow's result (its part's), a loop's iterations: rebuilt from the origin's records.
        return output or {}
    if isinstance(node, AgentNode):
        # Its answer (text, citations) and calls, rebuilt from the origin's records; a schema applied again (pure).
        schema = base.schemas.get(node.id)
        text = str((output or {}).get("text") or "")
        return {**(output or {}), **structured(text, schema, node.id)} if schema is not None else output or {}
    if isinstance(node, ToolNode):
        envelope = output or {}
        return {"success": bool(envelope.get("success", True)), "data": envelope.get("data"), "error": None}
    if isinstance(node, ConditionNode):
        return walk.decide(node)
    if isinstance(node, JoinNode):
        return walk.join(node)
    if isinstance(node, ParallelNode):
        for branch in node.branches:
            if branch not in base.parts:
                raise JobStop("FORK_NOT_SUPPORTED", f"branch {branch!r} of {node.id!r} is not in the origin's history")
            walk.merge(branch, PartResult.model_validate(base.parts[branch]))
        return {}
    if isinstance(node, HumanNode):
        raw = event_data(base.answers.get(node.id))
        answer = raw.get("answer") if isinstance(raw, dict) else raw
        return {"answer": answer.strip() if isinstance(answer, str) else json.dumps(answer)}
    raise JobStop(
        "FORK_NOT_SUPPORTED", f"a {node.kind} node ({node.id!r}) cannot be carried over; fork at it or before"
    )


def _reply(record: ToolCallRecord) -> str | None:
    """What a person told the Executor, from a carried request_user_feedback call (the answer is written for it)."""
    if record.tool != REQUEST_USER_FEEDBACK or not record.success or not isinstance(record.data, dict):
        return None
    answer = record.data.get("answer")
    return answer if isinstance(answer, str) else None


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
