"""Forks of a job: what a fork carries over from its origin, read from the origin's committed history.

A fork re-runs a job from one of its steps with a change. The steps before that step are carried over as
results: ``fork_base`` reads them (and the plan) from the origin's Durable status and history, a pure function
the API uses to check a fork before it starts and the ``load_fork_base`` activity uses to give the fork's
orchestrator the same facts (its result is then in the fork's own history, so a replay never reads the origin
again). Only results travel: never an approval, never an execution context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.jobs import fork_carry as carry
from shared.jobs.contracts import Usage
from shared.jobs.durable_json import decode
from shared.jobs.fork_branch import BranchRefused, branch_window
from shared.jobs.models import JobInput, JobState, StepState
from shared.jobs.plan import AGENT_STEP, ASK_USER, Plan

LOAD_FORK_BASE = "load_fork_base"
PLAN_EXECUTOR = "plan"  # shared.executors.PLAN (the domain layer does not import the registry)
SUPERVISE_EXECUTOR = "supervise"
AGENT_TURN_EXECUTOR = "agent_turn"
# Origin steps that can be carried over must have ended this way; a failed one is where a fork may start.
CARRIED_STATES = frozenset({"succeeded", "skipped"})
# Workflow nodes whose output the orchestrator made from several records: rebuilt by shared/jobs/fork_carry.py.
AGENT_NODE, LOOP_NODE, WORKFLOW_NODE = "agent", "loop", "workflow"
# An agent's tool call that failed went back to the Executor as an error: it is carried over like the others.
FINISHED_TOOL_STATES = frozenset({"succeeded", "skipped", "failed"})


class AgentNodeEdit(BaseModel):
    """A fork's edit of a workflow agent node: its prompt (as long as an Executor's question may be)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=2000, title="Prompt", description="what the agent is asked")


# The node kinds whose input a fork may edit (api/catalog.py publishes this; api/fork.py and orchestrators/fork.py
# check by it): a step node and a lookup tool node edit their step kind's fields (the node's field named here holds
# the kind), an agent node its prompt (the model named here).
NODE_EDIT_STEP_KIND: dict[str, str] = {"step": "step", "tool": "tool"}
NODE_EDIT_MODELS: dict[str, type[BaseModel]] = {"agent": AgentNodeEdit}


class CarriedStep(BaseModel):
    """A step carried over from the origin: its recorded state (timings, usage) and its result."""

    step: StepState
    output: dict[str, Any] | None = None


class AgentBase(BaseModel):
    """An agent job's fork point: the turn it starts from (0: only the answer runs again), the transcript the
    Executor saw at that turn (its last MAX_TRANSCRIPT records, all it is ever shown), and the turns' usage."""

    turn: int = Field(ge=0)
    # The turns the origin took in all (a fork at the answer keeps them).
    turns_taken: int = Field(default=0, ge=0)
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    executor_usage: Usage = Field(default_factory=Usage)


class WorkflowBase(BaseModel):
    """A workflow run's fork point: its parallel branches' results (by branch) and the answers its human nodes
    got (by node), for the nodes carried over; the walk rebuilds the rest (conditions, joins) from them."""

    parts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    answers: dict[str, Any] = Field(default_factory=dict)
    # The fork point's node as the run's definition has it (what its input edits are checked against).
    node: dict[str, Any] | None = None
    # A carried agent node's output schema (its answer's JSON object is taken through it again), by node.
    schemas: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A fork point inside a parallel branch: the root's parallel node and the branch (its entry) that runs again
    # from the fork point; the parallel's other branches are carried over with their part results (``parts``).
    parallel: str | None = None
    branch: str | None = None


class ForkBase(BaseModel):
    """What a fork starts from: the origin's plan (or agent turn) and the steps before the fork point, as results."""

    plan: dict[str, Any] | None = None
    index: int = Field(ge=0)
    carried: list[CarriedStep] = Field(default_factory=list)
    agent: AgentBase | None = None
    workflow: WorkflowBase | None = None
    # Results that are no step of the view: the calls of a carried agent step or node (``<step>-t<n>``).
    outputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A hybrid job: the replans the plan had at the fork point (the fork's next replan is numbered after them).
    replans: int = Field(default=0, ge=0)
    # A hybrid job: what people told the Supervisor about the carried steps (the later steps' questions carry it).
    clarifications: dict[str, str] = Field(default_factory=dict)
    # What the Executor's turns of each carried agent step or node (a turn is no step), or a carried sub-workflow
    # (its nodes are not the run's steps), used in the origin.
    turn_usage: dict[str, Usage] = Field(default_factory=dict)

    def carried_usage(self) -> Usage:
        """What the carried-over work used in the origin: its steps, an agent job's earlier turns, and the turns
        of its carried agent steps and nodes."""
        total = self.agent.executor_usage if self.agent else Usage()
        for used in self.turn_usage.values():
            total = total + used
        for item in self.carried:
            total = total + item.step.usage
        return total


class ForkError(Exception):
    """Why a job cannot be forked at that step: a stable code, a message, and the request field at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class ForkBaseResult(BaseModel):
    """The ``load_fork_base`` activity's result: the base, or why there is none (code and message)."""

    base: ForkBase | None = None
    error_code: str | None = None
    error_message: str | None = Field(default=None, max_length=600)


def _task_ref(event: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The step id an activity event belongs to (from its task id ``<job>:<step>:<attempt>``) and its input."""
    inp = decode(event.get("Input"))
    if not isinstance(inp, dict):
        return None, {}
    parts = str(inp.get("task_id", "")).rsplit(":", 2)
    return (parts[1] if len(parts) == 3 else None), inp


def _history(status: dict[str, Any]) -> list[dict[str, Any]]:
    events = status.get("historyEvents") or status.get("history") or []
    return [e for e in events if isinstance(e, dict)]


def _recorded(
    history: list[dict[str, Any]],
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]], ForkBase | None]:
    """The last plan, each step's last successful result (SQL drafts and Supervisor calls left out), and the
    base the origin itself was forked from (when it is a fork)."""
    plan: dict[str, Any] | None = None
    outputs: dict[str, dict[str, Any]] = {}
    own_base: ForkBase | None = None
    for event in history:
        if event.get("EventType") != "TaskCompleted":
            continue
        result = decode(event.get("Result"))
        if not isinstance(result, dict):
            continue
        if event.get("FunctionName") == LOAD_FORK_BASE or "base" in result and "error_code" in result:
            try:
                own_base = ForkBaseResult.model_validate(result).base or own_base
            except ValidationError:
                pass
            continue
        step_id, inp = _task_ref(event)
        if step_id is None or result.get("status") == "failed":
            continue
        body = result.get("result")
        if not isinstance(body, dict):
            continue
        if step_id == PLAN_EXECUTOR:
            plan = body
        elif (
            step_id != AGENT_TURN_EXECUTOR and inp.get("executor_type") != SUPERVISE_EXECUTOR and not body.get("draft")
        ):
            outputs[step_id] = body
    return plan, outputs, own_base


def _origin_plan(job: JobInput, plan: dict[str, Any] | None, own_base: ForkBase | None) -> Plan:
    """The plan the origin ran: its planning result, or (a fork) its base's plan with its own edit applied."""
    if plan is None and own_base is not None:
        parsed = Plan.model_validate(own_base.plan)
        if job.fork is not None and job.fork.input:
            steps = [
                s.model_copy(update={"input": edited_input(s.input, job.fork.input)})
                if s.id == job.fork.from_step
                else s
                for s in parsed.steps
            ]
            parsed = parsed.model_copy(update={"steps": steps})
        return parsed
    if plan is None:
        raise ForkError("FORK_NOT_SUPPORTED", "the job has no plan to fork from (it stopped before planning)")
    return Plan.model_validate(plan)


def edited_input(old: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """A step input with a fork's edit: a new question without new SQL drops the old SQL, so it is drafted again."""
    merged = {**old, **edits}
    if "question" in edits and "sql" not in edits:
        merged.pop("sql", None)
    return merged


def fork_base(status: dict[str, Any], from_step: str, writes_answer: Callable[[str], bool] | None = None) -> ForkBase:
    """The base of a fork of the job whose Durable status (input, custom status, history) is ``status``.

    Raises ForkError when the job cannot be forked there: it still runs, the step is unknown, or a step before
    it did not end in a state that can be carried over. An agent job forks at a turn, a workflow run at a node.
    ``writes_answer`` (the registry's rule) rebuilds a hybrid job's replanned steps as the orchestrator made them.
    """
    runtime = status.get("runtimeStatus")
    if runtime not in ("Completed", "Failed", "Terminated", "Canceled"):
        raise ForkError("JOB_NOT_FINISHED", "only a finished, failed or cancelled job can be forked")
    try:
        job = JobInput.model_validate(decode(status.get("input")))
        custom = status.get("customStatus")
        state = JobState.model_validate(decode(custom) if custom else {})
    except ValidationError as exc:
        raise ForkError("FORK_NOT_SUPPORTED", f"the job state cannot be read: {exc.error_count()} errors") from exc
    if job.run is not None:
        return _workflow_base(status, job, state, from_step)
    if job.request.mode == "agent":
        return _agent_base(status, job, state, from_step)
    history = _history(status)
    plan_event, outputs, own_base = _recorded(history)
    replans = 0
    if job.request.mode == "hybrid":  # the Supervisor may have changed the plan (a replan, a switched tool)
        plan, replans = _replanned(history, job, state, from_step, own_base, writes_answer)
    else:
        plan = _origin_plan(job, plan_event, own_base)
    ids = [s.id for s in plan.steps]
    if from_step not in ids:
        raise ForkError("INVALID_FORK_POINT", f"the job has no step {from_step!r} (steps: {ids})", "from_step")
    index = ids.index(from_step)
    # The steps before the fork point must be the ones recorded (the fork point itself runs as the plan then had
    # it: a tool the Supervisor switched it to afterwards is no part of the plan in force when it started).
    shown = [(s.id, s.kind) for s in state.steps[:index]]
    if [(s.id, s.kind) for s in plan.steps[:index]] != shown or len(state.steps) <= index:
        raise ForkError(
            "FORK_NOT_SUPPORTED",
            f"the steps before {from_step!r} as recorded ({shown}) are not the plan rebuilt from the history",
        )
    carried_outputs = {c.step.id: c.output for c in own_base.carried} if own_base else {}
    extra = dict(own_base.outputs) if own_base else {}
    answers = carry.human_answers(history)
    kinds = _kinds(history)
    agents = [s.id for s in plan.steps[:index] if s.kind == AGENT_STEP]
    loops = carry.agent_loops(history, agents) if agents else {}
    carried: list[CarriedStep] = []
    for spec, step in zip(plan.steps[:index], state.steps[:index], strict=True):
        if step.state not in CARRIED_STATES:
            raise ForkError(
                "INVALID_FORK_POINT",
                f"step {spec.id!r} before the fork point {step.state}; fork at it or before",
                "from_step",
            )
        output = outputs.get(spec.id, carried_outputs.get(spec.id))
        if step.state == "succeeded" and not step.carried_from:
            if spec.kind == ASK_USER:
                # A person's answer, carried as the text the later steps are given: a result, never a permission.
                output = carry.ask_user_output(spec.id, spec.input, answers)
            elif spec.kind == AGENT_STEP:
                output, found = carry.agent_step_output(
                    spec.id, loops.get(spec.id, []), job.request.agent.max_tool_calls, outputs, kinds, answers
                )
                extra.update(found)
        if step.state == "succeeded" and output is None:
            raise ForkError("FORK_NOT_SUPPORTED", f"the result of step {spec.id!r} is no longer in the history")
        kept = step.model_copy(update={"carried_from": step.carried_from or str(status.get("instanceId") or "")})
        carried.append(CarriedStep(step=kept, output=output if step.state == "succeeded" else None))
    turn_usage = _turn_usage(loops, own_base, carried)
    told: dict[str, str] = {}
    if job.request.mode == "hybrid":
        told = dict(own_base.clarifications) if own_base else {}
        told.update(carry.supervisor_answers(history, job.request.wait.on_expiry == "default"))
        told = {step_id: text for step_id, text in told.items() if step_id in {c.step.id for c in carried}}
    return ForkBase(
        plan=plan.model_dump(mode="json"),
        index=index,
        carried=carried,
        outputs=extra,
        replans=replans,
        clarifications=told,
        turn_usage=turn_usage,
    )


def _turn_usage(
    loops: dict[str, list[dict[str, Any]]], own_base: ForkBase | None, carried: list[CarriedStep]
) -> dict[str, Usage]:
    """The turns' usage of each carried agent step or node (a fork of a fork: as its base had it)."""
    kept = {c.step.id for c in carried}
    used = {k: v for k, v in (own_base.turn_usage if own_base else {}).items() if k in kept}
    used.update({owner: carry.turns_usage({owner: turns}) for owner, turns in loops.items() if owner in kept})
    return used


def _kinds(history: list[dict[str, Any]]) -> dict[str, str]:
    """The executor each step's activities ran (by step id; the last one)."""
    kinds: dict[str, str] = {}
    for event in history:
        if event.get("EventType") == "TaskCompleted":
            step_id, inp = _task_ref(event)
            if step_id is not None and isinstance(inp.get("executor_type"), str):
                kinds[step_id] = inp["executor_type"]
    return kinds


def _no_registry(kind: str) -> bool:
    raise ForkError("FORK_NOT_SUPPORTED", "the Supervisor replanned this job and no registry was given")


def _replanned(
    history: list[dict[str, Any]],
    job: JobInput,
    state: JobState,
    from_step: str,
    own_base: ForkBase | None,
    writes_answer: Callable[[str], bool] | None,
) -> tuple[Plan, int]:
    """A hybrid job the Supervisor replanned: the plan in force when ``from_step`` started, and its replans."""
    if writes_answer is None:
        writes_answer = _no_registry
    ran = {s.id for s in state.steps if s.state == "succeeded"}
    try:
        # A fork of a fork: its plan started as its base's (with that fork's replans), then its own Supervisor's.
        initial = list(_origin_plan(job, None, own_base).steps) if own_base is not None else None
        start = own_base.replans if own_base is not None else 0
        plan, replans = carry.plan_at(history, from_step, ran, writes_answer, initial, start)
    except ValueError as exc:  # ValidationError: e.g. more steps than a plan may have
        raise ForkError("FORK_NOT_SUPPORTED", f"the plan in force at {from_step!r} is not a valid plan: {exc}") from exc
    if plan is None:
        raise ForkError("FORK_NOT_SUPPORTED", "the job's plan cannot be rebuilt from its history")
    return plan, replans


AGENT_ANSWER = "answer"  # orchestrators/agent.py ANSWER_STEP_ID: a fork there runs only the answer again


def _agent_turns(history: list[dict[str, Any]], max_turns: int) -> dict[int, tuple[list[Any], Usage]]:
    """Each Executor turn of an agent job: the transcript its first successful call was given, and the usage of
    all its calls (retries too). The turn is known from ``turns_left`` in its input."""
    turns: dict[int, tuple[list[Any], Usage]] = {}
    for event in history:
        if event.get("EventType") != "TaskCompleted" or event.get("FunctionName") != AGENT_TURN_EXECUTOR:
            continue
        _, inp = _task_ref(event)
        task = inp.get("task") if isinstance(inp.get("task"), dict) else {}
        left = task.get("turns_left") if isinstance(task, dict) else None
        result = decode(event.get("Result"))
        if not isinstance(left, int) or not isinstance(result, dict):
            continue
        turn = max_turns - left + 1
        usage = Usage.model_validate(result.get("usage") or {})
        transcript, used = turns.get(turn, (None, Usage()))
        if transcript is None and result.get("status") != "failed":
            given = task.get("transcript") if isinstance(task, dict) else None
            transcript = given if isinstance(given, list) else []
        turns[turn] = (transcript if transcript is not None else [], used + usage)
    return turns


def _agent_base(status: dict[str, Any], job: JobInput, state: JobState, from_step: str) -> ForkBase:
    """An agent job forked at a turn (``turn-<n>``: the Executor works again from that turn) or at its answer."""
    turns = _agent_turns(_history(status), job.request.agent.max_turns)
    if from_step == AGENT_ANSWER:
        if not any(s.id == AGENT_ANSWER for s in state.steps):
            raise ForkError("INVALID_FORK_POINT", "the job never reached its answer; fork at a turn", "from_step")
        turn = 0
    else:
        prefix, _, number = from_step.partition("-")
        if prefix != "turn" or not number.isdigit() or int(number) not in turns:
            raise ForkError(
                "INVALID_FORK_POINT",
                f"an agent job forks at a turn (turn-1 … turn-{max(turns, default=0)}) or at its answer",
                "from_step",
            )
        turn = int(number)
    before = [s for s in state.steps if s.turn is not None and (turn == 0 or s.turn < turn)]
    if any(s.state not in FINISHED_TOOL_STATES or not s.title for s in before):
        raise ForkError("FORK_NOT_SUPPORTED", "a tool call before the fork point is not recorded in full")
    _, outputs, own_base = _recorded(_history(status))
    carried_outputs = {c.step.id: c.output for c in own_base.carried} if own_base else {}
    origin = str(status.get("instanceId") or "")
    carried = [
        CarriedStep(
            step=s.model_copy(update={"carried_from": s.carried_from or origin}),
            output=outputs.get(s.id, carried_outputs.get(s.id)) if s.state == "succeeded" else None,
        )
        for s in before
    ]
    usage = Usage()
    for seen, (_, used) in turns.items():
        if turn == 0 or seen < turn:
            usage = usage + used
    if own_base is not None and own_base.agent is not None:
        usage = usage + own_base.agent.executor_usage  # turns the origin itself carried over
    transcript = turns[turn][0] if turn else []
    agent = AgentBase(turn=turn, turns_taken=state.turns, transcript=transcript, executor_usage=usage)
    return ForkBase(index=len(carried), carried=carried, agent=agent)


def _branch_parts(history: list[dict[str, Any]], job_id: str) -> dict[str, dict[str, Any]]:
    """The results of a run's parallel branches (sub-orchestrations ``<job>:<branch>``), by branch."""
    parts: dict[str, dict[str, Any]] = {}
    for event in history:
        if event.get("EventType") != "SubOrchestrationInstanceCompleted":
            continue
        child = decode(event.get("Input"))
        result = decode(event.get("Result"))
        if not isinstance(child, dict) or not isinstance(result, dict):
            continue
        part = (child.get("run") or {}).get("part") if isinstance(child.get("run"), dict) else None
        if isinstance(part, dict) and child.get("job_id") == f"{job_id}:{part.get('entry')}":
            parts[str(part.get("entry"))] = result
    return parts


def _workflow_base(status: dict[str, Any], job: JobInput, state: JobState, from_step: str) -> ForkBase:
    """A workflow run forked at a node of the run itself: the nodes that ended before it started are carried."""
    history = _history(status)
    job_id = str(status.get("instanceId") or "")
    parts = _branch_parts(history, job_id)
    at = next((s for s in state.steps if s.id == from_step), None)
    if at is None or at.started_at is None:
        ids = [s.id for s in state.steps if s.started_at]
        raise ForkError("INVALID_FORK_POINT", f"the run has no node {from_step!r} that ran (nodes: {ids})", "from_step")
    _, outputs, own_base = _recorded(history)
    answers = carry.human_answers(history)
    if own_base is not None:  # a fork of a fork: what the origin itself carried over
        outputs = {**{c.step.id: c.output for c in own_base.carried if c.output is not None}, **outputs}
        if own_base.workflow is not None:
            parts = {**own_base.workflow.parts, **parts}
            answers = {**own_base.workflow.answers, **answers}
    branch_of = {str(s.get("id")): b for b, p in parts.items() for s in p.get("steps") or [] if isinstance(s, dict)}
    in_branches = set(branch_of)
    loaded = carry.definitions(history)
    nodes = _root_nodes(loaded, job)
    try:
        window = branch_window(state, nodes, parts, branch_of, from_step) if from_step in in_branches else None
    except BranchRefused as exc:
        raise ForkError(exc.code, exc.message, exc.field) from exc
    before = [
        s
        for s in state.steps
        if s.id != from_step
        and s.ended_at is not None
        and s.state in FINISHED_TOOL_STATES
        and (s.ended_at <= at.started_at if window is None else window.carries(s, at.started_at))
    ]
    before.sort(key=lambda s: (s.ended_at or "", s.started_at or ""))
    # A supervisor team's steps are its rounds (``supervisor_<n>``, ``r<n>_<member>``), each an agent's loop and
    # answer: the rounds before the fork point are carried like agent nodes, and the fork replays the supervisor's
    # choices from their text (orchestrators/team.py), so no graph is needed.
    bodies = {
        str(m): str(n.get("id")) for n in nodes.values() if n.get("kind") == LOOP_NODE for m in n.get("body") or []
    }
    if from_step in bodies:
        raise ForkError(
            "INVALID_FORK_POINT", f"{from_step!r} runs in the body of loop {bodies[from_step]!r}: fork at the loop"
        )
    extra = dict(own_base.outputs) if own_base else {}
    schemas = dict(own_base.workflow.schemas) if own_base and own_base.workflow else {}
    own = [s for s in before if s.state == "succeeded" and not s.carried_from and s.id not in in_branches]
    agents = [s for s in own if s.kind == AGENT_NODE]
    loops = carry.agent_loops(history, [s.id for s in agents]) if agents else {}
    subs = carry.sub_workflow_results(history, job_id) if any(s.kind == WORKFLOW_NODE for s in own) else {}
    kinds = _kinds(history)
    part_usage: dict[str, Usage] = {}
    for step in own:
        if step.kind == AGENT_NODE:
            agent = _agent_definition(loaded, step.tool_input)
            limit = int((agent.get("limits") or {}).get("max_tool_calls") or 0) if agent else 0
            output, found = carry.agent_node_output(step.id, loops.get(step.id, []), limit, outputs, kinds, answers)
            if output is None or agent is None:
                raise ForkError("FORK_NOT_SUPPORTED", f"agent node {step.id!r}: its answer is not in the history")
            outputs[step.id] = output
            extra.update(found)
            if isinstance(agent.get("output_schema"), dict):
                schemas[step.id] = agent["output_schema"]
        elif step.kind == WORKFLOW_NODE:
            part = subs.get(step.id)
            if part is None:
                raise ForkError(
                    "FORK_NOT_SUPPORTED", f"sub-workflow node {step.id!r}: its result is not in the history"
                )
            result = part.get("result")
            outputs[step.id] = result if isinstance(result, dict) else {}
            try:
                part_usage[step.id] = Usage.model_validate(part.get("usage") or {})
            except ValidationError:
                pass
        elif step.kind == LOOP_NODE:
            iterations = carry.loop_iterations(step.tool_output)
            if iterations is None:
                raise ForkError("FORK_NOT_SUPPORTED", f"loop node {step.id!r}: its iterations are not recorded")
            outputs[step.id] = {"iterations": iterations}
    if window is not None:  # the forked branch's nodes before the fork point: their outputs as its part kept them
        kept_there = parts[window.branch].get("outputs") or {}
        outputs.update({s.id: kept_there.get(s.id) or {} for s in before if branch_of.get(s.id) == window.branch})
    carried = [
        CarriedStep(
            step=s.model_copy(update={"carried_from": s.carried_from or job_id}),
            output=outputs.get(s.id) if s.state == "succeeded" else None,
        )
        for s in before
    ]
    kept = {s.id for s in before}
    base = WorkflowBase(
        parts={b: p for b, p in parts.items() if b in kept},
        answers={n: a for n, a in answers.items() if n in kept},
        node=nodes.get(from_step),
        schemas={n: v for n, v in schemas.items() if n in kept},
        parallel=window.parallel if window else None,
        branch=window.branch if window else None,
    )
    turn_usage = _turn_usage(loops, own_base, carried) | part_usage
    return ForkBase(index=len(carried), carried=carried, workflow=base, outputs=extra, turn_usage=turn_usage)


def _root_nodes(loaded: list[tuple[dict[str, Any], dict[str, Any]]], job: JobInput) -> dict[str, dict[str, Any]]:
    """The run's own workflow's nodes by id, as it loaded them (none for a team: it is compiled, not loaded)."""
    run = job.run
    for inp, definition in loaded:
        if run is not None and (inp.get("kind"), inp.get("id")) == ("workflow", run.id) and run.kind == "workflow":
            found = definition.get("nodes")
            return {str(n.get("id")): n for n in found if isinstance(n, dict)} if isinstance(found, list) else {}
    return {}


def _agent_definition(loaded: list[tuple[dict[str, Any], dict[str, Any]]], ran: str | None) -> dict[str, Any] | None:
    """The agent an agent node ran (its step says ``<agent> v<version>``), as the run loaded it."""
    agent_id, _, version = (ran or "").rpartition(" v")
    for inp, definition in loaded:
        if (inp.get("kind"), inp.get("id"), str(inp.get("version"))) == ("agent", agent_id, version):
            return definition
    return None


def carried_base(history: list[dict[str, Any]]) -> ForkBase | None:
    """A fork's base (what it carried over), from its own history (the ``load_fork_base`` result)."""
    return _recorded(history)[2]


def carried_outputs(history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A fork's carried-over results by step id, from its own history (the ``load_fork_base`` result)."""
    own_base = carried_base(history)
    if own_base is None:
        return {}
    return {c.step.id: c.output for c in own_base.carried if c.output is not None}
