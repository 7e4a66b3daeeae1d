"""Workflow and team runs inside the job orchestration: the graph replaces the plan, nothing else changes.

``JobRun.run`` (orchestrators/job.py) hands a run (``JobInput.run``) to ``WorkflowWalk``. Every node is a step of
the same job state (node id as step id), run by the same machinery as a planned job: step nodes through
``Steps.run_step`` of the run's core (typed input, approvals, policy, retries, budgets), agent nodes through
``AgentLoop`` with the pinned agent's instructions, tools, bounds and models, tool nodes through ``call_tool``, human
nodes through ``Questions.ask`` (the same waiting_for_user and feedback API). Conditions are evaluated here
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
from typing import Any

from pydantic import ValidationError

from orchestrators.agent import agent_step
from orchestrators.agent_node import AgentNodes
from orchestrators.graph import (
    MAX_TEMPLATE_VALUE,
    TEMPLATE_REF,
    as_text,
    evaluate,
    kind_of,
    short,
    started_by,
)
from orchestrators.node_edit import edited_node
from orchestrators.outcomes import JobStop
from orchestrators.part_questions import PartQuestions
from orchestrators.run.core import RunCore
from orchestrators.run.record import Gen, as_dict
from orchestrators.team import TeamRounds, compile_team
from orchestrators.walk_limits import WalkLimits
from shared.definitions.models import (
    INPUT,
    MODELS,
    AgentNode,
    Condition,
    ConditionNode,
    HumanNode,
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
from shared.executors import CALL_TOOL, lookup_kinds
from shared.jobs.contracts import ExecutionContext
from shared.jobs.models import Budget, StepState
from shared.jobs.plan import PlanStep
from shared.jobs.runs import (
    LOAD_DEFINITION,
    PART_ORCHESTRATOR,
    BranchFork,
    PartResult,
    RunPart,
    RunReport,
    RunSpec,
)

APPROVE, REJECT = "approve", "reject"


class WorkflowWalk:
    """One run of a workflow (or a compiled team) on a run's core: the root run, a branch or a sub-workflow."""

    def __init__(self, run: RunCore) -> None:
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
        # The run's limits: node executions counted here, shares passed down to parts (orchestrators/walk_limits.py).
        self.limits = WalkLimits(run, self.spec.limits)
        self.agents = AgentNodes(self)  # agent nodes: the pinned agent's loop and answer (orchestrators/agent_node.py)
        # A fork at a node inside a parallel branch (orchestrators/fork.py sets these on the root walk): the other
        # branches' results carried over from the origin (merged, never started), and the forked branch's carry.
        self.carried_parts: dict[str, PartResult] = {}
        self.branch_forks: dict[str, BranchFork] = {}

    # --- entry points ---------------------------------------------------------------------------

    def work(self) -> Gen:
        """The root run: the workflow's outputs as the job's answer ({answer, citations, outputs})."""
        workflow = yield from self.root()
        if workflow is None:  # a supervisor team runs its own rounds
            return (yield from TeamRounds(self, self.team).work())
        self.open(workflow)
        yield from self.walk()
        return self.finish()

    def work_part(self) -> Gen:
        """A sub-orchestration: one parallel branch, or a whole sub-workflow; a ``PartResult`` either way."""
        try:
            workflow = yield from self.root()
            if workflow is None:
                raise JobStop("INVALID_RUN", "a supervisor team cannot run as a part of a workflow")
            part = self.spec.part
            self.open(workflow, part)
            yield from self.walk()
            outputs = self.finish()["outputs"] if part is None else None
        except JobStop as stop:
            self.run.record.finish_failed(stop.info)
            return self.part_result("failed", error=stop.info.model_dump(mode="json"))
        return self.part_result("completed", result=outputs)

    def part_result(self, status: str, **extra: Any) -> dict[str, Any]:
        """What this part hands its parent: outputs and steps of the nodes it ran."""
        own = self.scope if self.scope is not None else set(self.nodes)
        steps = [s.model_dump(mode="json") for s in self.run.state.steps if s.id in own and s.id in self.ended]
        outputs = {k: v for k, v in self.run.outputs.items() if k in own}
        used = {
            "node_runs": self.limits.node_runs,
            "tool_calls": self.run.budgets.tool_calls,
            "sandbox_ms": self.run.budgets.sandbox_ms,
        }
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
            return MODELS[kind].model_validate(as_dict(raw))
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
            for target in started_by(node):
                self.controlled.setdefault(target, set()).add(node.id)
            if isinstance(node, ParallelNode):
                for branch in node.branches:
                    for member in self.branch_region(branch):
                        self.region.setdefault(member, branch)
        if part is not None:
            self.scope = {n for n, b in self.region.items() if b == part.entry}
            self.run.record.keep_all(part.seed)
            self.chosen.add(part.entry)
        else:
            self.chosen.add(workflow.start or workflow.nodes[0].id)
            self.fill_defaults(workflow)
        self.run.record.show_steps(
            [
                StepState(id=node.id, kind=kind_of(node), title=(node.title or f"{node.kind} {node.id}")[:200])
                for node in workflow.nodes
                if self.scope is None or node.id in self.scope
            ]
        )
        if part is not None and part.fork is not None:
            self.carry_in(part.fork)
        self.run.record.start_running()
        self.run.publish()

    def carry_in(self, fork: BranchFork) -> None:
        """A branch forked at one of its nodes: the nodes before it are the origin's (results, nothing runs)."""
        at, entry = self.nodes.get(fork.at), self.spec.part.entry if self.spec.part else None
        nested = any(
            isinstance(n, ParallelNode)
            and entry not in n.branches
            and any(fork.at in self.branch_region(b) for b in n.branches)
            for n in self.nodes.values()
        )
        if at is None or fork.at not in (self.scope or set()) or nested:
            # A node of a branch inside this branch (or of a loop's body) runs in a walk of its own: fork at its parent.
            raise JobStop("FORK_NOT_SUPPORTED", f"{fork.at!r} is not a node of this branch's own walk", fork.at)
        if fork.edit:
            self.nodes[at.id] = edited_node(at, fork.edit)
        carried = {s.id: s for s in (StepState.model_validate(raw) for raw in fork.steps)}
        for step in list(self.run.state.steps):
            kept = carried.get(step.id)
            if kept is None or step.id == fork.at:
                continue
            self.run.record.put_step(kept)
            self.ended[step.id] = kept.state
            if kept.state == "succeeded":
                self.run.record.keep(step.id, fork.outputs.get(step.id) or {})

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
            for target in started_by(node):
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
        run.record.at_step(step)
        step.state, step.started_at, step.ended_at, step.note = "running", run.now_iso(), None, None
        run.record.begin_step()
        run.publish()
        try:
            self.limits.count_node(node.id)
            output = yield from self.dispatch(node, step)
        except JobStop as stop:
            stop.info.step_id = stop.info.step_id or node.id
            self.ended[node.id] = "failed"
            raise
        step.ended_at = run.now_iso()
        if output is None:
            step.state, step.note = "skipped", (run.record.skip_reason or "it was skipped")[:300]
            self.ended[node.id] = "skipped"
        else:
            step.state = "succeeded"
            run.record.keep(node.id, output)
            self.ended[node.id] = "succeeded"
            step.tool_output = step.tool_output or short(output)
        run.publish()

    def dispatch(self, node: Any, step: StepState) -> Gen:
        """Run a node by its kind; its output, or None when it was skipped."""
        if isinstance(node, AgentNode):
            prompt = self.render(node.input.get("prompt"))
            return (yield from self.agents.run_agent(step, node.agent, node.version, prompt))
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

    # --- node kinds -----------------------------------------------------------------------------

    def run_step(self, kind: str, mappings: dict[str, Any], step: StepState) -> Gen:
        """A built-in step: the same typed input, approvals and policy as a planned step."""
        task = {name: self.resolve(mapping) for name, mapping in mappings.items()}
        spec = PlanStep(id=step.id, kind=kind, title=step.title or kind, input=task)
        return (yield from self.run.steps.run_step(spec, step))

    def run_tool(self, node: ToolNode, step: StepState) -> Gen:
        """One family tool call through call_tool; the tool must be one the run was allowed at start."""
        if node.tool in lookup_kinds():
            return (yield from self.run_step(node.tool, node.input, step))
        if node.tool not in self.spec.tools:
            raise JobStop("TOOL_NOT_ALLOWED", f"tool {node.tool!r} is not one this app configures", node.id)
        arguments = {name: self.resolve(mapping) for name, mapping in node.input.items()}
        out = yield from self.run.attempts.execute(
            step, CALL_TOOL, {"tool": node.tool, "arguments": arguments}, ExecutionContext(allowed_tools=[node.tool])
        )
        if out is None:
            return None
        envelope = out.result if isinstance(out.result, dict) else {}
        return {"success": bool(envelope.get("success", True)), "data": envelope.get("data"), "error": None}

    def ask(self, node: HumanNode, step: StepState) -> Gen:
        """Ask a person and wait: the job's own waiting_for_user, answered through the job API."""
        question = str(self.resolve(node.question) or node.title or node.id)
        approval = {APPROVE, REJECT} <= set(node.options)
        reply = yield from self.run.questions.ask(
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
        share = self.limits.shares(node.id, len(node.branches))
        budget = self.limits.budget_share(node.id, len(node.branches))
        parts = []
        started = [b for b in node.branches if b not in self.carried_parts]  # a fork's carried branches run not
        for branch in started:
            part = RunPart(entry=branch, seed=seed, fork=self.branch_forks.get(branch))
            update = {"part": part, "report_to": report}
            spec = self.spec.model_copy(update=update | ({"limits": share} if share is not None else {}))
            instance = f"{job.job_id}:{branch}"
            parts.append((instance, self.call_part(spec, instance, budget)))
        step.tool_output = f"{len(node.branches)} branches"
        self.run.publish()
        try:
            results = (yield from self.await_parts(parts, report)) if parts else []
        except Exception as exc:  # a part crashed (it reports its own failures): the run cannot go on
            raise JobStop("BRANCH_FAILED", f"a branch of {node.id!r} crashed: {exc}", node.id) from exc
        finished = dict(zip(started, [PartResult.model_validate(as_dict(raw)) for raw in results], strict=True))
        for branch in node.branches:
            self.merge(branch, finished.get(branch) or self.carried_parts[branch])
        self.limits.used_by(node.id, list(finished.values()), self.nodes)
        return {}

    def report_for(self, anchor: str | None) -> RunReport | None:
        """Where the parts this walk starts report their questions: the root run (see part_questions).

        ``anchor`` is this workflow's node the parts run for, when their steps are not this workflow's own
        (a sub-workflow); parts inside a sub-workflow keep the anchor their root gave it.
        """
        if not self.run.record.part_of_run:
            return self.questions.report_to(anchor)
        mine = self.spec.report_to
        if mine is None or mine.anchor is not None:
            return mine  # None: a part started before parts could ask; its own parts cannot either
        return mine.model_copy(update={"anchor": anchor})

    def await_parts(self, parts: list[tuple[str, Any]], report: RunReport | None) -> Gen:
        """The parts' results in order; the root shows their questions while it waits (a part just waits)."""
        if self.run.record.part_of_run or report is None:
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
        self.run.record.add_part_usage(part.usage)
        if part.status == "failed":
            self.failed_branches.add(branch)
        by_id = {s["id"]: s for s in part.steps}
        for step in list(self.run.state.steps):
            if step.id in by_id:
                self.run.record.put_step(StepState.model_validate(by_id[step.id]))
        self.run.record.keep_all(part.outputs)
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
        share = self.limits.shares(node.id, 1)
        spec = self.spec.model_copy(update=update | ({"limits": share} if share is not None else {}))
        instance = f"{self.run.job.job_id}:{node.id}:{self.subs}"
        budget = self.limits.budget_share(node.id, 1)
        (raw,) = yield from self.await_parts([(instance, self.call_part(spec, instance, budget))], report)
        part = PartResult.model_validate(as_dict(raw))
        self.run.record.add_part_usage(part.usage)
        self.limits.used_by(node.id, [part], self.nodes)
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
            self.run.record.at_step(own)
        step.tool_output = f"{iterations} iterations"
        return {"iterations": iterations}

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
            return TEMPLATE_REF.sub(lambda m: as_text(self.value(m.group(1).strip())), mapping.template)
        return mapping

    def render(self, mapping: Any) -> str:
        """A mapping as text (an agent's prompt)."""
        value = self.resolve(mapping)
        return value if isinstance(value, str) else ("" if value is None else as_text(value))

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


def workflow_part_body(context: Any) -> Gen:
    """The body of a part of a run (a parallel branch, a sub-workflow): a ``PartResult``."""
    return (yield from WorkflowWalk(RunCore(context, agent_step=agent_step, part_of_run=True)).work_part())
