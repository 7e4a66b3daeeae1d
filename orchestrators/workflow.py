"""Workflow and team runs inside the job orchestration: the graph replaces the plan, nothing else changes.

``JobRun.run`` hands a run (``JobInput.run``) to ``WorkflowWalk``. Every node is a step of the same job
state (node id as step id), run by the same machinery as a planned job: step nodes through
``JobRun.run_step`` (typed input, approvals, policy, retries, budgets), agent nodes through ``AgentLoop``
with the pinned agent's instructions, tools, bounds and models, tool nodes through ``call_tool``, human
nodes through ``JobRun.ask`` (the same waiting_for_user and feedback API). Conditions are evaluated here
(pure). A parallel node starts one sub-orchestration per branch (``workflow_part``) and waits for all
of them; a sub-workflow node is a sub-orchestration pinned to a version; a loop node repeats its body at
most ``max_iterations`` times. A question asked inside a part is shown and answered at the root run
(orchestrators/part_questions.py).

Definitions come from the ``load_definition`` activity, by kind, id and the version the API pinned when
the run started: Durable records the result, so a replay sees the same definition and the input stays
small. Everything read from a definition or produced by a model is data: it never widens the tools
(``RunSpec.tools``, checked by the API) or the models (the job's ``allowed_models``) of the run.

Join rule: a branch fails when one of its nodes fails (the branch stops there). A join with ``wait: all``
fails when any branch it waits for failed, ``wait: any`` when all of them failed; ``on_failure:
continue`` never fails and hands ``failed`` (the branch ids) on. Every branch runs to its end either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from orchestrators.agent import AgentLoop, AgentProfile
from orchestrators.job import Gen, JobRun, _as_dict
from orchestrators.outcomes import JobStop, structured
from orchestrators.part_questions import PartQuestions
from shared.definitions.models import (
    INPUT,
    MODELS,
    Agent,
    AgentNode,
    Condition,
    ConditionNode,
    FanOut,
    HumanNode,
    InputSpec,
    JoinNode,
    LoopNode,
    ParallelNode,
    Ref,
    StepNode,
    Supervisor,
    Team,
    Template,
    ToolNode,
    Value,
    Workflow,
    WorkflowNode,
)
from shared.executors import CALL_TOOL, input_for_text, kinds_where, lookup_kinds
from shared.jobs.contracts import Constraints, ErrorCode
from shared.jobs.costs import CallPrices
from shared.jobs.models import Budget, StepState
from shared.jobs.plan import PlanStep
from shared.jobs.runs import (
    LOAD_DEFINITION,
    PART_ORCHESTRATOR,
    RUN_LIMIT_EXCEEDED,
    PartResult,
    RunLimits,
    RunPart,
    RunReport,
    RunSpec,
)
from shared.jobs.runs import TEAM_INPUTS as TEAM_SPEC

TEMPLATE_REF = re.compile(r"\{([^{}]*)\}")
# What a template shows of one value, and what a node's output summary shows in the view.
MAX_TEMPLATE_VALUE = 4000
MAX_PROMPT = 2000  # the Executor's question (AgentTurnTask.question)
FINISH = "finish"
APPROVE, REJECT = "approve", "reject"
TEAM_INPUTS = {name: InputSpec.model_validate(spec) for name, spec in TEAM_SPEC.items()}


class WorkflowWalk:
    """One run of a workflow (or a compiled team) on a ``JobRun``: the root run, a branch or a sub-workflow."""

    def __init__(self, run: JobRun) -> None:
        assert run.job.run is not None
        self.run = run
        self.spec: RunSpec = run.job.run
        self.wf: Workflow | None = None
        self.nodes: dict[str, Any] = {}
        self.ended: dict[str, str] = {}  # node id → succeeded | failed | skipped
        self.chosen: set[str] = set()
        self.controlled: dict[str, set[str]] = {}  # node id → the condition/parallel/loop nodes that start it
        self.region: dict[str, str] = {}  # node id → the parallel branch (entry node) it runs in
        self.scope: set[str] | None = None  # a branch: only its region runs here
        self.failed_branches: set[str] = set()
        self.subs = 0
        self.questions = PartQuestions(run)  # the root's view of its parts' questions
        # The run's total-work budget (a part: its share); None for a run started before runs had limits.
        self.limits: RunLimits | None = self.spec.limits
        self.node_runs = 0  # node executions here and in the parts this walk started

    # --- entry points ---------------------------------------------------------------------------

    def work(self) -> Gen:
        """The root run: the workflow's outputs as the job's answer ({answer, citations, outputs})."""
        workflow = yield from self.root()
        if workflow is None:  # a supervisor team runs its own rounds
            return (yield from self.supervise_team())
        self.open(workflow)
        yield from self.walk()
        return self.finish()

    def work_part(self) -> Gen:
        """A sub-orchestration: one parallel branch, or a whole sub-workflow; a ``PartResult`` either way."""
        self.run.part_of_run = True
        try:
            workflow = yield from self.root()
            if workflow is None:
                raise JobStop("INVALID_RUN", "a supervisor team cannot run as a part of a workflow")
            part = self.spec.part
            self.open(workflow, part)
            yield from self.walk()
            outputs = self.finish()["outputs"] if part is None else None
        except JobStop as stop:
            self.run.finish_failed(stop.info)
            return self.part_result("failed", error=stop.info.model_dump(mode="json"))
        return self.part_result("completed", result=outputs)

    def part_result(self, status: str, **extra: Any) -> dict[str, Any]:
        """What this part hands its parent: outputs and steps of the nodes it ran."""
        own = self.scope if self.scope is not None else set(self.nodes)
        steps = [s.model_dump(mode="json") for s in self.run.state.steps if s.id in own and s.id in self.ended]
        outputs = {k: v for k, v in self.run.outputs.items() if k in own}
        used = {"node_runs": self.node_runs, "tool_calls": self.run.tool_calls, "sandbox_ms": self.run.sandbox_ms}
        return PartResult.model_validate(
            {"status": status, "outputs": outputs, "steps": steps, "ended": self.ended, "usage": self.run.state.usage}
            | used
            | extra
        ).model_dump(mode="json")

    def root(self) -> Gen:
        """The run's own definition as a workflow (a team compiled); None for a supervisor team."""
        definition = yield from self.load(self.spec.kind, self.spec.id, self.spec.version)
        if isinstance(definition, Team):
            if isinstance(definition.strategy, Supervisor):
                self.team = definition
                return None
            return compile_team(definition)
        assert isinstance(definition, Workflow)
        return definition

    def load(self, kind: str, def_id: str, version: int) -> Gen:
        """A pinned definition, through the load_definition activity (recorded: replays see the same one)."""
        try:
            raw = yield self.run.ctx.call_activity(LOAD_DEFINITION, {"kind": kind, "id": def_id, "version": version})
            return MODELS[kind].model_validate(_as_dict(raw))
        except ValidationError as exc:
            raise JobStop("INVALID_DEFINITION", f"{kind} {def_id!r} v{version} is not valid: {exc}"[:600]) from exc
        except Exception as exc:  # the activity failed: the store is gone or the version does not exist
            raise JobStop("DEFINITION_NOT_FOUND", f"{kind} {def_id!r} v{version} could not be loaded: {exc}") from exc

    def pinned(self, kind: str, def_id: str, version: int | None) -> int:
        """The version a reference runs: its own, else the one the API pinned when the run started."""
        if version is not None:
            return version
        pin = self.spec.pins.get(f"{kind}/{def_id}")
        if pin is None:
            raise JobStop("DEFINITION_NOT_PINNED", f"{kind} {def_id!r} was not pinned when the run started")
        return pin

    # --- the graph ------------------------------------------------------------------------------

    def open(self, workflow: Workflow, part: RunPart | None = None) -> None:
        """Show every node as a pending step; work out who starts which node and the parallel regions."""
        self.wf = workflow
        self.nodes = {node.id: node for node in workflow.nodes}
        for node in workflow.nodes:
            for target in _started_by(node):
                self.controlled.setdefault(target, set()).add(node.id)
            if isinstance(node, ParallelNode):
                for branch in node.branches:
                    for member in self.branch_region(branch):
                        self.region.setdefault(member, branch)
        if part is not None:
            self.scope = {n for n, b in self.region.items() if b == part.entry}
            self.run.outputs.update(part.seed)
            self.chosen.add(part.entry)
        else:
            self.chosen.add(workflow.start or workflow.nodes[0].id)
            self.fill_defaults(workflow)
        state = self.run.state
        state.steps = [
            StepState(id=node.id, kind=_kind_of(node), title=(node.title or f"{node.kind} {node.id}")[:200])
            for node in workflow.nodes
            if self.scope is None or node.id in self.scope
        ]
        state.plan_status = "planned"
        state.status = "running"
        self.run.publish()

    def fill_defaults(self, workflow: Workflow) -> None:
        """A sub-workflow's inputs the parent did not map take their defaults (the API did it for the root)."""
        for name, spec in workflow.inputs.items():
            if name not in self.spec.inputs and spec.default is not None:
                self.spec.inputs[name] = spec.default

    def branch_region(self, entry: str) -> set[str]:
        """The nodes a branch runs: reachable from its entry without passing a join."""
        seen, stack = {entry}, [entry]
        followers: dict[str, list[str]] = {}
        for node in self.nodes.values():
            for before in node.after:
                followers.setdefault(before, []).append(node.id)
            for target in _started_by(node):
                followers.setdefault(node.id, []).append(target)
        while stack:
            for nxt in followers.get(stack.pop(), []):
                if nxt not in seen and not isinstance(self.nodes[nxt], JoinNode):
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def walk(self) -> Gen:
        """Run ready nodes in definition order until none is left; the rest did not lie on the path taken."""
        while (node := self.next_ready()) is not None:
            yield from self.run_node(node)
        for node_id in self.nodes:
            if node_id not in self.ended and (self.scope is None or node_id in self.scope):
                self.skip(node_id, "not on the path this run took")
        self.run.publish()

    def next_ready(self) -> Any:
        """The first node that may run now (skipping, on the way, those that never will)."""
        progress = True
        while progress:
            progress = False
            for node in self.nodes.values():
                if node.id in self.ended or not self.in_scope(node.id):
                    continue
                verdict = self.verdict(node)
                if verdict == "ready":
                    return node
                if verdict:
                    self.skip(node.id, verdict)
                    progress = True
        return None

    def in_scope(self, node_id: str) -> bool:
        """A branch runs its region; the root runs everything but the regions (its branches run them)."""
        if self.scope is not None:
            return node_id in self.scope
        return node_id not in self.region

    def verdict(self, node: Any) -> str | None:
        """ "ready", None (not yet), or why the node will never run."""
        starters = self.controlled.get(node.id, set())
        if starters and node.id not in self.chosen:
            if all(s in self.ended for s in starters):
                return "its condition chose the other way"
            return None
        if any(a not in self.ended for a in node.after):
            return None
        if isinstance(node, JoinNode) or node.id in self.chosen:
            return "ready"
        if not node.after:
            return None  # started by nothing: only the start node runs without an ``after``
        # A node skipped (by a condition, or by a person) counts as done for the nodes after it.
        if any(self.ended[a] == "failed" for a in node.after):
            return "a node it runs after failed"
        return "ready"

    def skip(self, node_id: str, reason: str) -> None:
        """Mark a node that will not run as skipped, with why."""
        self.ended[node_id] = "skipped"
        step = self.step_of(node_id)
        if step is not None and step.state == "pending":
            step.state = "skipped"
            step.note = reason[:300]

    def step_of(self, node_id: str) -> StepState | None:
        """The step that shows a node."""
        return next((s for s in self.run.state.steps if s.id == node_id), None)

    def run_node(self, node: Any) -> Gen:
        """Run one node as a step; a JobStop names the node it happened at."""
        run = self.run
        step = self.step_of(node.id)
        assert step is not None
        run.state.step_index = run.state.steps.index(step)
        step.state, step.started_at, step.ended_at, step.note = "running", run.now_iso(), None, None
        run.skip_reason = None
        run.publish()
        try:
            self.count_node(node.id)
            output = yield from self.dispatch(node, step)
        except JobStop as stop:
            stop.info.step_id = stop.info.step_id or node.id
            self.ended[node.id] = "failed"
            raise
        step.ended_at = run.now_iso()
        if output is None:
            step.state, step.note = "skipped", (run.skip_reason or "it was skipped")[:300]
            self.ended[node.id] = "skipped"
        else:
            step.state = "succeeded"
            run.outputs[node.id] = output
            self.ended[node.id] = "succeeded"
            step.tool_output = step.tool_output or _short(output)
        run.publish()

    def dispatch(self, node: Any, step: StepState) -> Gen:
        """Run a node by its kind; its output, or None when it was skipped."""
        if isinstance(node, AgentNode):
            prompt = self.render(node.input.get("prompt"))
            return (yield from self.run_agent(step, node.agent, node.version, prompt))
        if isinstance(node, StepNode):
            return (yield from self.run_step(node.step, node.input, step))
        if isinstance(node, ToolNode):
            return (yield from self.run_tool(node, step))
        if isinstance(node, HumanNode):
            return (yield from self.ask(node, step))
        if isinstance(node, ConditionNode):
            return self.decide(node)
        if isinstance(node, ParallelNode):
            return (yield from self.fan_out(node, step))
        if isinstance(node, JoinNode):
            return self.join(node)
        if isinstance(node, WorkflowNode):
            return (yield from self.sub_workflow(node, step))
        return (yield from self.repeat(node, step))

    # --- run limits (RunLimits: counted here, shares passed down to parts, their use added back) -------------

    def count_node(self, node_id: str) -> None:
        """Count one node execution; stop the run before one that would exceed ``max_node_runs``."""
        if self.limits is None:
            return
        if self.node_runs >= self.limits.max_node_runs:
            why = f"{self.node_runs} nodes ran, {self.limits.max_node_runs} allowed; {node_id!r} would be one more"
            raise self.run.limit_reached("max_node_runs", node_id, why)
        self.node_runs += 1

    def shares(self, node_id: str, parts: int) -> RunLimits | None:
        """What each of ``parts`` sub-orchestrations started together may use: an equal share of what is left.

        Each part may use at most its share of the node executions and tool calls left, and of the parts that
        may be alive below this one; it is one level deeper. A parallel node wider than the limit, or parts the
        limits cannot hold at all, stop the run here.
        """
        limits = self.limits
        if limits is None:
            return None
        if parts > limits.max_parallel_width:
            why = f"{node_id!r} starts {parts} branches, {limits.max_parallel_width} allowed"
            raise self.run.limit_reached("max_parallel_width", node_id, why)
        if limits.max_depth < 1:
            raise self.run.limit_reached("max_depth", node_id, f"{node_id!r} would start a part one level too deep")
        if parts > limits.max_parts_alive:
            why = f"{node_id!r} would start {parts} more, {limits.max_parts_alive} may be alive below here"
            raise self.run.limit_reached("max_parts_alive", node_id, why)
        nodes_left = limits.max_node_runs - self.node_runs
        if nodes_left < parts:
            why = f"{self.node_runs} nodes ran, {limits.max_node_runs} allowed; {node_id!r} starts {parts} parts"
            raise self.run.limit_reached("max_node_runs", node_id, why)
        tools_left = max(0, limits.max_tool_calls - self.run.tool_calls)
        return RunLimits(
            max_node_runs=nodes_left // parts,
            max_parts_alive=(limits.max_parts_alive - parts) // parts,
            max_parallel_width=limits.max_parallel_width,
            max_depth=limits.max_depth - 1,
            max_tool_calls=tools_left // parts,
        )

    def budget_share(self, node_id: str, parts: int) -> Budget | None:
        """Each part's equal share of what is left of the job's token, cost and sandbox budget (runs with limits).

        A part counts its own use from zero, so without a share parts started together could each spend the
        whole budget. None: a run started before runs had limits (its parts keep the job's budget, as they began).
        """
        if self.limits is None:
            return None
        run, budget = self.run, self.run.job.request.constraints.budget
        usage = run.state.usage
        share: dict[str, Any] = {}
        if budget.max_total_tokens is not None:
            left = budget.max_total_tokens - usage.total_tokens
            if left < parts:
                raise JobStop(
                    ErrorCode.BUDGET_EXCEEDED,
                    f"stopped before {node_id}: the job used {usage.total_tokens} of its {budget.max_total_tokens} "
                    f"tokens, too few left for {parts} part(s)",
                    node_id,
                )
            share["max_total_tokens"] = left // parts
        if budget.max_estimated_cost is not None:
            share["max_estimated_cost"] = max(0.0, round((budget.max_estimated_cost - usage.estimated_cost) / parts, 8))
        if budget.max_cost is not None:  # every priced meter (shared/jobs/costs.py), shared as the rest
            prices = run.job.policy.call_prices or CallPrices(table="")
            spent = usage.estimated_cost + sum(run.spend.by_meter(prices).values())
            share["max_cost"] = max(0.0, round((budget.max_cost - spent) / parts, 8))
        if budget.max_sandbox_seconds is not None:
            run.sandbox_left(node_id)  # BUDGET_EXCEEDED when none is left
            left_s = budget.max_sandbox_seconds - run.sandbox_ms / 1000
            share["max_sandbox_seconds"] = max(0.001, round(left_s / parts, 3))
        return Budget.model_validate(share)

    def used_by(self, node_id: str, results: list[PartResult]) -> None:
        """Add what finished parts used to this walk's counts; a part that reached a limit stops the whole run."""
        for part in results:
            self.node_runs += part.node_runs
            self.run.tool_calls += part.tool_calls
            self.run.sandbox_ms += part.sandbox_ms
        for part in results:
            error = part.error or {}
            if error.get("code") == RUN_LIMIT_EXCEEDED:
                at = error.get("step_id")
                step_id = at if isinstance(at, str) and at in self.nodes else node_id
                raise JobStop(RUN_LIMIT_EXCEEDED, str(error.get("message", "")), step_id, limit=error.get("limit"))

    # --- node kinds -----------------------------------------------------------------------------

    def run_step(self, kind: str, mappings: dict[str, Any], step: StepState) -> Gen:
        """A built-in step: the same typed input, approvals and policy as a planned step."""
        task = {name: self.resolve(mapping) for name, mapping in mappings.items()}
        spec = PlanStep(id=step.id, kind=kind, title=step.title or kind, input=task)
        return (yield from self.run.run_step(spec, step))

    def run_tool(self, node: ToolNode, step: StepState) -> Gen:
        """One family tool call through call_tool; the tool must be one the run was allowed at start."""
        if node.tool in lookup_kinds():
            return (yield from self.run_step(node.tool, node.input, step))
        if node.tool not in self.spec.tools:
            raise JobStop("TOOL_NOT_ALLOWED", f"tool {node.tool!r} is not one this app configures", node.id)
        arguments = {name: self.resolve(mapping) for name, mapping in node.input.items()}
        out = yield from self.run.execute(
            step, CALL_TOOL, {"tool": node.tool, "arguments": arguments}, {"allowed_tools": [node.tool]}
        )
        if out is None:
            return None
        envelope = out.result if isinstance(out.result, dict) else {}
        return {"success": bool(envelope.get("success", True)), "data": envelope.get("data"), "error": None}

    def ask(self, node: HumanNode, step: StepState) -> Gen:
        """Ask a person and wait: the job's own waiting_for_user, answered through the job API."""
        question = str(self.resolve(node.question) or node.title or node.id)
        approval = {APPROVE, REJECT} <= set(node.options)
        reply = yield from self.run.ask(
            step,
            "approval" if approval else "clarify",
            question[:1000],
            list(node.options),
            default=node.on_timeout,
            free_text=node.free_text or not node.options,
            timeout_seconds=node.timeout_seconds,
            # A node that declares its on_timeout answer goes on with it; one that does not fails at the deadline.
            expiry_falls_back=node.on_timeout is not None,
        )
        said = reply.action() if isinstance(reply.answer, str) else json.dumps(reply.answer)
        if approval and said == REJECT:
            raise JobStop("REJECTED_BY_USER", f"the user rejected: {question[:300]}", node.id)
        return {"answer": said}

    def decide(self, node: ConditionNode) -> dict[str, Any]:
        """A condition, evaluated here (pure); it starts its ``then`` or its ``else`` nodes."""
        result = self.holds(node.if_)
        self.chosen.update(node.then if result else node.else_)
        return {"result": result}

    def holds(self, cond: Condition) -> bool:
        """Whether ``left op right`` holds on the values the run has."""
        return evaluate(cond, self.value(cond.left))

    def fan_out(self, node: ParallelNode, step: StepState) -> Gen:
        """One sub-orchestration per branch, all at once; their steps and outputs come back into this run."""
        job = self.run.job
        seed = {k: v for k, v in self.run.outputs.items() if k in self.nodes}
        report = self.report_for(None)  # a branch's nodes are this workflow's: its questions show at them
        share = self.shares(node.id, len(node.branches))
        budget = self.budget_share(node.id, len(node.branches))
        parts = []
        for branch in node.branches:
            update = {"part": RunPart(entry=branch, seed=seed), "report_to": report}
            spec = self.spec.model_copy(update=update | ({"limits": share} if share is not None else {}))
            instance = f"{job.job_id}:{branch}"
            parts.append((instance, self.call_part(spec, instance, budget)))
        step.tool_output = f"{len(parts)} branches"
        self.run.publish()
        try:
            results = yield from self.await_parts(parts, report)
        except Exception as exc:  # a part crashed (it reports its own failures): the run cannot go on
            raise JobStop("BRANCH_FAILED", f"a branch of {node.id!r} crashed: {exc}", node.id) from exc
        finished = [PartResult.model_validate(_as_dict(raw)) for raw in results]
        for branch, part in zip(node.branches, finished, strict=True):
            self.merge(branch, part)
        self.used_by(node.id, finished)
        return {}

    def report_for(self, anchor: str | None) -> RunReport | None:
        """Where the parts this walk starts report their questions: the root run (see part_questions).

        ``anchor`` is this workflow's node the parts run for, when their steps are not this workflow's own
        (a sub-workflow); parts inside a sub-workflow keep the anchor their root gave it.
        """
        if not self.run.part_of_run:
            return self.questions.report_to(anchor)
        mine = self.spec.report_to
        if mine is None or mine.anchor is not None:
            return mine  # None: a part started before parts could ask; its own parts cannot either
        return mine.model_copy(update={"anchor": anchor})

    def await_parts(self, parts: list[tuple[str, Any]], report: RunReport | None) -> Gen:
        """The parts' results in order; the root shows their questions while it waits (a part just waits)."""
        if self.run.part_of_run or report is None:
            return (yield self.run.ctx.task_all([task for _, task in parts]))
        return (yield from self.questions.wait(parts, report))

    def call_part(self, spec: RunSpec, instance_id: str, budget: Budget | None = None) -> Any:
        """Start a sub-orchestration of this run (a branch or a sub-workflow) with a deterministic id.

        ``budget``: the part's share of what is left of the job's budget (runs with limits; else the job's own).
        """
        update: dict[str, Any] = {"job_id": instance_id, "run": spec}
        if budget is not None:
            request = self.run.job.request
            constraints = request.constraints.model_copy(update={"budget": budget})
            update["request"] = request.model_copy(update={"constraints": constraints})
        child = self.run.job.model_copy(update=update)
        return self.run.ctx.call_sub_orchestrator(PART_ORCHESTRATOR, child.model_dump(mode="json"), instance_id)

    def merge(self, branch: str, part: PartResult) -> None:
        """A finished branch: its steps replace the pending ones, its outputs join the run's."""
        self.run.state.usage = self.run.state.usage + part.usage
        if part.status == "failed":
            self.failed_branches.add(branch)
        by_id = {s["id"]: s for s in part.steps}
        for index, step in enumerate(self.run.state.steps):
            if step.id in by_id:
                self.run.state.steps[index] = StepState.model_validate(by_id[step.id])
        self.run.outputs.update(part.outputs)
        self.ended.update(part.ended)
        for node_id, owner in self.region.items():
            if owner == branch and node_id not in self.ended:
                self.skip(node_id, "its branch stopped before it")

    def join(self, node: JoinNode) -> dict[str, Any]:
        """Fan in: the outputs of the nodes it waits for, and which branches failed (see the module's rule)."""
        branches = {self.region.get(a, a) for a in node.after}
        failed = sorted(b for b in branches if b in self.failed_branches or self.ended.get(b) == "failed")
        results = {a: self.run.outputs[a] for a in node.after if self.ended.get(a) == "succeeded"}
        broken = bool(failed) if node.wait == "all" else len(failed) == len(branches)
        if broken and node.on_failure == "fail":
            raise JobStop("BRANCH_FAILED", f"join {node.id!r}: branch(es) {', '.join(failed)} failed", node.id)
        return {"results": results, "failed": failed}

    def sub_workflow(self, node: WorkflowNode, step: StepState) -> Gen:
        """Another workflow as a sub-orchestration, pinned to a version, with its inputs mapped from here."""
        self.subs += 1
        inputs = {name: self.resolve(mapping) for name, mapping in node.input.items()}
        version = self.pinned("workflow", node.workflow, node.version)
        report = self.report_for(node.id)
        # A whole workflow, never a branch: a sub-workflow started inside a branch must not inherit its ``part``.
        update = {"kind": "workflow", "id": node.workflow, "version": version, "inputs": inputs, "report_to": report}
        update["part"] = None
        share = self.shares(node.id, 1)
        spec = self.spec.model_copy(update=update | ({"limits": share} if share is not None else {}))
        instance = f"{self.run.job.job_id}:{node.id}:{self.subs}"
        budget = self.budget_share(node.id, 1)
        (raw,) = yield from self.await_parts([(instance, self.call_part(spec, instance, budget))], report)
        part = PartResult.model_validate(_as_dict(raw))
        self.run.state.usage = self.run.state.usage + part.usage
        self.used_by(node.id, [part])
        step.tool_output = f"{node.workflow} v{version}: {len(part.steps)} nodes"
        if part.status == "failed":
            why = (part.error or {}).get("message", "it failed")
            raise JobStop("SUB_WORKFLOW_FAILED", f"workflow {node.workflow!r} v{version} failed: {why}", node.id)
        return part.result if isinstance(part.result, dict) else {}

    def repeat(self, node: LoopNode, step: StepState) -> Gen:
        """Run the body in order, at most ``max_iterations`` times, until ``until`` holds."""
        iterations = 0
        while iterations < node.max_iterations:
            iterations += 1
            for member in node.body:
                self.ended.pop(member, None)
                yield from self.run_node(self.nodes[member])
            if node.until is not None and self.holds(node.until):
                break
        # The body's steps ended; the loop's own step runs again in the view until it returns.
        own = self.step_of(node.id)
        if own is not None:
            self.run.state.step_index = self.run.state.steps.index(own)
        step.tool_output = f"{iterations} iterations"
        return {"iterations": iterations}

    # --- agents and teams -----------------------------------------------------------------------

    def run_agent(self, step: StepState, agent_id: str, version: int | None, prompt: str) -> Gen:
        """An agent: its Executor loop (its instructions, tools, bounds, models), then its answer over what it found."""
        pinned = self.pinned("agent", agent_id, version)
        agent = yield from self.load("agent", agent_id, pinned)
        assert isinstance(agent, Agent)
        step.tool_input = f"{agent_id} v{pinned}"  # which agent ran: the view and /api/logs show it
        profile = self.profile(agent, step.id)
        limits = agent.constraints
        # The agent's per-call limits; which models may run stays the job's (checked again by every executor).
        self.run.step_constraints = Constraints(
            max_tokens=limits.max_tokens,
            temperature=limits.temperature,
            timeout_ms=limits.timeout_ms,
            allowed_models=list(self.run.job.request.constraints.allowed_models),
        )
        # The agent's own budget counts what this node uses, on top of the run's budget (checked too).
        usage = self.run.state.usage
        self.run.scoped_budget = (f"agent {agent_id!r}", limits.budget, usage.total_tokens, usage.estimated_cost)
        try:
            return (yield from self.agent_work(agent, step, prompt, profile))
        finally:
            self.run.step_constraints = None
            self.run.scoped_budget = None

    def agent_work(self, agent: Agent, step: StepState, prompt: str, profile: AgentProfile) -> Gen:
        """The agent's loop and its answer, under its limits."""
        found = yield from AgentLoop(self.run, prompt[:MAX_PROMPT] or agent.name, step, profile).work_step()
        kind = sorted(kinds_where(lambda spec: spec.writes_answer))[0]
        self.run.outputs[step.id] = found  # the sources of its answer are its own lookups
        spec = PlanStep(
            id=step.id, kind=kind, title=step.title or kind, input=input_for_text(kind, prompt or agent.name)
        )
        spec.depends_on = [step.id]
        extra: dict[str, Any] = {"sources": self.run.sources_for(spec), "step_notes": []}
        if agent.output_schema is not None:
            extra["output_schema"] = agent.output_schema  # the answer writer is asked for an object of this shape
        out = yield from self.run.execute(step, kind, dict(spec.input), extra, models=profile.models)
        answer = (out.result or {}) if out is not None else {}
        text = str(answer.get("answer") or "")
        output = {"text": text, "citations": answer.get("citations", []), "tool_calls": found["tool_calls"]}
        if agent.output_schema is not None:
            # The model's text is untrusted: only a JSON object that passes the agent's schema becomes its output.
            output = {**output, **structured(text, agent.output_schema, step.id)}
        return output

    def profile(self, agent: Agent, node_id: str) -> AgentProfile:
        """What the agent may use in this run: its tools cut to the run's, its models cut to the job's."""
        tools = [t for t in agent.tools if t in self.spec.tools]
        wanted = [m for m in [agent.model.model, *agent.model.fallbacks] if m]
        allowed = self.run.job.request.constraints.allowed_models
        models: list[str | None] = [m for m in wanted if not allowed or m in allowed]
        if wanted and not models:
            raise JobStop("MODEL_NOT_ALLOWED", f"agent {agent.id!r}: none of {wanted} is in {allowed}", node_id)
        lookups = [t for t in agent.tools if t in lookup_kinds()]
        return AgentProfile(
            instructions=agent.instructions, tools=tools, limits=agent.limits, models=models or None, lookups=lookups
        )

    def supervise_team(self) -> Gen:
        """A supervisor agent routes the task to one member at a time, for at most ``max_rounds`` rounds.

        Its choice is untrusted text: only a member id (or "finish") is taken from it; anything else ends.
        """
        team: Team = self.team
        strategy = team.strategy
        assert isinstance(strategy, Supervisor)
        task = str(self.spec.inputs.get("task", ""))
        self.run.state.plan_status = "planned"
        self.run.state.status = "running"
        done: list[tuple[str, str]] = []
        last = ""
        for round_ in range(1, strategy.max_rounds + 1):
            prompt = _supervisor_prompt(task, team.agents, done)
            said = yield from self.team_step(f"supervisor_{round_}", "supervisor", strategy.supervisor, prompt)
            choice = route(said, team.agents)
            if choice is None:
                last = last or said
                break
            member_prompt = f"{task}\n\nThe supervisor asks: {said[:MAX_TEMPLATE_VALUE]}"
            last = yield from self.team_step(f"r{round_}_{_node_id(choice)}"[:32], "agent", choice, member_prompt)
            done.append((choice, last))
        return {"answer": last, "citations": [], "outputs": {"answer": last, "rounds": len(done)}}

    def team_step(self, step_id: str, role: str, agent_id: str, prompt: str) -> Gen:
        """One agent's turn in a supervisor team, as its own step; its text."""
        run = self.run
        self.count_node(step_id)
        step = StepState(id=step_id, kind="agent", title=f"{role}: {agent_id}"[:200], state="running")
        step.started_at = run.now_iso()
        run.state.steps.append(step)
        run.state.step_index = len(run.state.steps) - 1
        run.publish()
        try:
            out = yield from self.run_agent(step, agent_id, None, prompt)
        except JobStop as stop:
            stop.info.step_id = stop.info.step_id or step_id
            raise
        step.state, step.ended_at = "succeeded", run.now_iso()
        run.outputs[step_id] = out
        step.tool_output = _short(out["text"])
        run.publish()
        return str(out["text"])

    # --- values ---------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """The workflow's outputs (its mappings; without any, the last node's output) and the answer text."""
        assert self.wf is not None
        if self.wf.outputs:
            outputs = {name: self.resolve(mapping) for name, mapping in self.wf.outputs.items()}
        else:
            last = [n for n in self.nodes if self.ended.get(n) == "succeeded"]
            outputs = {"result": self.run.outputs.get(last[-1]) if last else None}
        answer = next((v for v in outputs.values() if isinstance(v, str)), None)
        if answer is None:
            answer = json.dumps(outputs, default=str)[:MAX_TEMPLATE_VALUE]
        return {"answer": answer, "citations": [], "outputs": outputs}

    def resolve(self, mapping: Any) -> Any:
        """A mapping's value: a reference, a literal, or a template filled in."""
        if isinstance(mapping, Ref):
            return self.value(mapping.from_)
        if isinstance(mapping, Value):
            return mapping.value
        if isinstance(mapping, Template):
            return TEMPLATE_REF.sub(lambda m: _as_text(self.value(m.group(1).strip())), mapping.template)
        return mapping

    def render(self, mapping: Any) -> str:
        """A mapping as text (an agent's prompt)."""
        value = self.resolve(mapping)
        return value if isinstance(value, str) else ("" if value is None else _as_text(value))

    def value(self, ref: str) -> Any:
        """What ``input.<name>...`` or ``<node>.<field>...`` holds now (None when it is not there)."""
        head, *rest = ref.split(".")
        current: Any = self.spec.inputs if head == INPUT else self.run.outputs.get(head)
        for part in rest:
            if isinstance(current, dict):
                current = current.get(part)
            elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
                current = current[int(part)]
            else:
                return None
        return current


# --- teams compiled to workflows ---------------------------------------------------------------------


def _node_id(agent_id: str, index: int | None = None) -> str:
    base = agent_id.replace("-", "_")
    return (f"m{index}_{base}" if index is not None else base)[:32]


def compile_team(team: Team) -> Workflow:
    """A sequential or fan-out team as a workflow: each member an agent node, the task its one input."""
    task = "{input.task}"
    members = [_node_id(agent, i) for i, agent in enumerate(team.agents, 1)]
    nodes: list[Any] = []
    strategy = team.strategy
    if isinstance(strategy, FanOut) and len(members) > 1:
        nodes.append(ParallelNode(id="fan_out", kind="parallel", branches=members))
        for node_id, agent in zip(members, team.agents, strict=True):
            nodes.append(AgentNode(id=node_id, kind="agent", agent=agent, input={"prompt": Template(template=task)}))
        nodes.append(JoinNode(id="join", kind="join", after=members, wait="all", on_failure="continue"))
        aggregate = f"{task}\n\nWhat each member found:\n{{join.results}}"
        nodes.append(
            AgentNode(
                id="aggregate",
                kind="agent",
                agent=strategy.aggregator,
                after=["join"],
                input={"prompt": Template(template=aggregate)},
            )
        )
        last = "aggregate"
    else:
        previous: str | None = None
        for node_id, agent in zip(members, team.agents, strict=True):
            prompt = task if previous is None else f"{task}\n\nThe previous member's output:\n{{{previous}.text}}"
            nodes.append(
                AgentNode(
                    id=node_id,
                    kind="agent",
                    agent=agent,
                    after=[previous] if previous else [],
                    input={"prompt": Template(template=prompt)},
                )
            )
            previous = node_id
        last = previous or members[0]
    return Workflow.model_validate(
        {
            "id": team.id,
            "name": team.name,
            "inputs": TEAM_INPUTS,
            "nodes": nodes,
            "outputs": {"answer": Ref.model_validate({"from": f"{last}.text"})},
        }
    )


def route(said: str, members: list[str]) -> str | None:
    """The member a supervisor chose: the first member id (or "finish") among its words; None ends the rounds."""
    words: list[str] = re.findall(r"[a-z][a-z0-9-]*", said.lower())
    for word in words:
        if word == FINISH:
            return None
        if word in members:
            return word
    return None


def _supervisor_prompt(task: str, members: list[str], done: list[tuple[str, str]]) -> str:
    worked = "\n".join(f"- {member}: {text[:300]}" for member, text in done[-6:]) or "(nobody yet)"
    return (
        f"Task: {task}\nMembers: {', '.join(members)}\nDone so far:\n{worked}\n"
        "Reply with the id of the member who works next, or FINISH when the task is done."
    )


# --- pure helpers ---------------------------------------------------------------------------------------


def _started_by(node: Any) -> Iterator[str]:
    """The nodes a node starts itself: a condition's then/else, a parallel node's branches, a loop's body."""
    if isinstance(node, ConditionNode):
        yield from [*node.then, *node.else_]
    elif isinstance(node, ParallelNode):
        yield from node.branches
    elif isinstance(node, LoopNode):
        yield from node.body


def _kind_of(node: Any) -> str:
    """A node's step kind in the view: a step node shows its executor kind (approvals and edits use it)."""
    if isinstance(node, StepNode):
        return node.step
    return str(node.kind)


def evaluate(cond: Condition, left: Any) -> bool:
    """``left op right`` (a comparison of mismatched types is false, never an error)."""
    right = cond.right
    try:
        if cond.op == "exists":
            return left is not None
        if cond.op == "truthy":
            return bool(left)
        if cond.op == "eq":
            return bool(left == right)
        if cond.op == "ne":
            return bool(left != right)
        if cond.op == "contains":
            return right in left if isinstance(left, str | list | dict) else False
        ops = {"gt": left > right, "ge": left >= right, "lt": left < right, "le": left <= right}
        return bool(ops[cond.op])
    except TypeError:
        return False


def _as_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_TEMPLATE_VALUE]


def _short(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = str(text)
    return text if len(text) <= 200 else text[:199] + "…"


def workflow_part_body(context: Any) -> Gen:
    """The body of a part of a run (a parallel branch, a sub-workflow): a ``PartResult``."""
    return (yield from WorkflowWalk(JobRun(context)).work_part())
