"""The static worst case of a workflow or team against the app's run limits (``RunLimits``), checked on save.

A run is bounded at run time (orchestrators/workflow.py counts and stops it with RUN_LIMIT_EXCEEDED); a design
that could never fit is refused before it is saved, naming the node that makes it too big. The worst case is
counted the way the orchestrator shares the limits out:

- node executions: every node once, a loop's body ``max_iterations`` times (nested loops multiply), a
  sub-workflow node once plus its workflow's worst case, a parallel node once plus, as its branches share
  what is left equally, its number of branches times the heaviest branch; a tool node is one tool call.
- depth: a parallel branch and a sub-workflow are each one level of sub-orchestrations.
- parts alive at once: a sub-workflow is one plus its own; a parallel node its branches, plus (equal
  shares again) its number of branches times the most any branch keeps alive.
- width: the branches of the widest parallel node (a parallel team: its members).

Pure: it reads saved definitions only through the ``Resolver`` it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.definitions.issues import Issue
from shared.definitions.models import (
    ConditionNode,
    FanOut,
    JoinNode,
    LoopNode,
    ParallelNode,
    Supervisor,
    Team,
    ToolNode,
    Workflow,
    WorkflowNode,
)
from shared.jobs.runs import LIMIT_TEXT, RunLimits

if TYPE_CHECKING:
    from shared.definitions.validate import Resolver

# Sub-workflows deeper than this are refused by validation anyway (MAX_NESTING); the walk stops here.
_MAX_WALK = 16


@dataclass
class Cost:
    """The worst case of a node, a region or a workflow, for each limit (``why``: what makes the node count)."""

    node_runs: int = 0
    tool_calls: int = 0
    depth: int = 0
    parts_alive: int = 0
    width: int = 0
    why: str = ""

    def measure(self, limit: str) -> int:
        """The worst case that a RunLimits field bounds."""
        return {
            "max_node_runs": self.node_runs,
            "max_tool_calls": self.tool_calls,
            "max_depth": self.depth,
            "max_parts_alive": self.parts_alive,
            "max_parallel_width": self.width,
        }[limit]


@dataclass
class _Walk:
    """The worst case of one workflow, node by node (sub-workflows through the resolver)."""

    wf: Workflow
    resolver: Resolver
    stack: tuple[str, ...] = ()
    # Sub-workflows already costed in this check, by reference: a design naming one many times, at many
    # levels, is costed once per reference (never exponentially).
    seen: dict[tuple[str, int | None], Cost] = field(default_factory=dict)
    nodes: dict[str, Any] = field(init=False)
    loop_of: dict[str, LoopNode] = field(init=False)
    regions: dict[str, dict[str, set[str]]] = field(init=False)  # parallel node → branch → its nodes

    def __post_init__(self) -> None:
        self.nodes = {node.id: node for node in self.wf.nodes}
        self.loop_of = {}
        for node in self.wf.nodes:
            if isinstance(node, LoopNode):
                for member in node.body:
                    self.loop_of.setdefault(member, node)
        self.regions = {
            node.id: {branch: self.region(branch) for branch in node.branches}
            for node in self.wf.nodes
            if isinstance(node, ParallelNode)
        }

    def region(self, entry: str) -> set[str]:
        """The nodes a branch runs: reachable from its entry without passing a join (as the orchestrator)."""
        followers: dict[str, list[str]] = {}
        for node in self.wf.nodes:
            for before in node.after:
                followers.setdefault(before, []).append(node.id)
            followers.setdefault(node.id, []).extend(_started_by(node))
        seen, todo = {entry}, [entry]
        while todo:
            for nxt in followers.get(todo.pop(), []):
                if nxt in self.nodes and nxt not in seen and not isinstance(self.nodes[nxt], JoinNode):
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def times(self, node_id: str) -> tuple[int, list[str]]:
        """How often a node runs at most (its loops' iterations multiplied) and which loops say so."""
        count, loops, seen = 1, [], {node_id}
        loop = self.loop_of.get(node_id)
        while loop is not None and loop.id not in seen:
            seen.add(loop.id)
            count *= loop.max_iterations
            loops.append(f"loop {loop.id!r} ({loop.max_iterations}×)")
            loop = self.loop_of.get(loop.id)
        return count, loops

    def total(self) -> Cost:
        """The whole workflow: the nodes its root runs (the branches' nodes run in their parts)."""
        inside = {member for branches in self.regions.values() for region in branches.values() for member in region}
        return self.combine([n for n in self.nodes if n not in inside])[0]

    def combine(self, node_ids: list[str]) -> tuple[Cost, dict[str, tuple[str, Cost]]]:
        """The worst case of nodes run one after another, and for each limit the node that weighs most in it."""
        total = Cost()
        heaviest: dict[str, tuple[str, Cost]] = {}
        for node_id in node_ids:
            if node_id not in self.nodes:
                continue  # an unknown node: refused by the structural checks
            times, loops = self.times(node_id)
            own = self.cost(self.nodes[node_id])
            weighed = Cost(
                node_runs=times * own.node_runs,
                tool_calls=times * own.tool_calls,
                depth=own.depth,
                parts_alive=own.parts_alive,
                width=own.width,
                why=" × ".join([*reversed(loops), own.why or f"node {node_id!r}"]),
            )
            total.node_runs += weighed.node_runs
            total.tool_calls += weighed.tool_calls
            total.depth = max(total.depth, weighed.depth)
            total.parts_alive = max(total.parts_alive, weighed.parts_alive)
            total.width = max(total.width, weighed.width)
            for limit in LIMIT_TEXT:
                if limit not in heaviest or weighed.measure(limit) > heaviest[limit][1].measure(limit):
                    heaviest[limit] = (node_id, weighed)
        return total, heaviest

    def cost(self, node: Any) -> Cost:
        """One run of one node, with what it starts."""
        if isinstance(node, WorkflowNode):
            key = (node.workflow, node.version)
            inner = self.seen.get(key)
            if inner is None:
                sub = self.resolver.find("workflow", node.workflow, node.version)
                if not isinstance(sub, Workflow) or sub.id in self.stack or len(self.stack) >= _MAX_WALK:
                    return Cost(node_runs=1, depth=1, parts_alive=1)  # unknown or a ring: refused by validation
                inner = self.seen[key] = _Walk(sub, self.resolver, (*self.stack, self.wf.id), self.seen).total()
            return Cost(
                node_runs=1 + inner.node_runs,
                tool_calls=inner.tool_calls,
                depth=1 + inner.depth,
                parts_alive=1 + inner.parts_alive,
                width=inner.width,
                why=f"workflow {node.workflow!r} ({1 + inner.node_runs} node executions)",
            )
        if isinstance(node, ParallelNode):
            branches = [self.combine(sorted(region))[0] for region in self.regions[node.id].values()]
            k = len(branches)
            return Cost(
                node_runs=1 + k * max(b.node_runs for b in branches),
                tool_calls=k * max(b.tool_calls for b in branches),
                depth=1 + max(b.depth for b in branches),
                parts_alive=k + k * max(b.parts_alive for b in branches),
                width=max(k, *(b.width for b in branches)),
                why=f"parallel {node.id!r} ({k} branches)",
            )
        return Cost(node_runs=1, tool_calls=1 if isinstance(node, ToolNode) else 0)


def _started_by(node: Any) -> list[str]:
    if isinstance(node, ConditionNode):
        return [*node.then, *node.else_]
    if isinstance(node, ParallelNode):
        return list(node.branches)
    if isinstance(node, LoopNode):
        return list(node.body)
    return []


def workflow_cost(workflow: Workflow, resolver: Resolver) -> Cost:
    """The static worst case of a run of ``workflow``."""
    return _Walk(workflow, resolver).total()


def workflow_limit_issues(workflow: Workflow, resolver: Resolver, limits: RunLimits) -> list[Issue]:
    """One issue per run limit the workflow's worst case exceeds, at the node that weighs most in it."""
    walk = _Walk(workflow, resolver)
    inside = {member for branches in walk.regions.values() for region in branches.values() for member in region}
    total, heaviest = walk.combine([n for n in walk.nodes if n not in inside])
    index = {node.id: i for i, node in reversed(list(enumerate(workflow.nodes)))}
    issues: list[Issue] = []
    for limit in LIMIT_TEXT:
        allowed = getattr(limits, limit)
        worst = total.measure(limit)
        if worst <= allowed:
            continue
        node_id, weighed = heaviest[limit]
        issues.append(
            Issue(
                f"nodes.{index[node_id]}",
                "RUN_LIMIT_EXCEEDED",
                f"a run of this workflow may need {worst} {LIMIT_TEXT[limit]}, more than this app's limit of "
                f"{allowed} (RUN_{limit.upper()}); node {node_id!r} alone: {weighed.measure(limit)} "
                f"({weighed.why})"[:1000],
                node_id,
            )
        )
    return issues


def team_limit_issues(team: Team, limits: RunLimits) -> list[Issue]:
    """A team's worst case against the run limits (it runs as a workflow, or as supervisor rounds)."""
    strategy = team.strategy
    members = len(team.agents)
    if isinstance(strategy, Supervisor):
        cost = Cost(node_runs=2 * strategy.max_rounds, why=f"{strategy.max_rounds} rounds of two agent turns")
    elif isinstance(strategy, FanOut) and members > 1:
        cost = Cost(node_runs=3 + members, depth=1, parts_alive=members, width=members, why=f"{members} members")
    else:
        cost = Cost(node_runs=members, why=f"{members} members")
    path = {"max_parallel_width": "agents", "max_parts_alive": "agents", "max_depth": "strategy"}
    issues = []
    for limit in LIMIT_TEXT:
        allowed, worst = getattr(limits, limit), cost.measure(limit)
        if worst > allowed:
            issues.append(
                Issue(
                    path.get(limit, "strategy.max_rounds" if isinstance(strategy, Supervisor) else "agents"),
                    "RUN_LIMIT_EXCEEDED",
                    f"a run of this team may need {worst} {LIMIT_TEXT[limit]} ({cost.why}), more than this app's "
                    f"limit of {allowed} (RUN_{limit.upper()})",
                )
            )
    return issues
