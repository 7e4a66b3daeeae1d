"""The graph of a workflow: its edges, what runs before what, and the structural checks (ids, unknown nodes,
cycles not bounded by a loop node, nodes the start does not reach)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from shared.definitions.issues import Issue
from shared.definitions.models import INPUT, ConditionNode, JoinNode, LoopNode, Node, ParallelNode, Workflow


def _issue(path: str, code: str, message: str, node: str | None = None) -> Issue:
    return Issue(path, code, message, node)


@dataclass
class Graph:
    """Edges ``a → b`` (b runs after a), and the loop each body node belongs to."""

    nodes: list[str]
    edges: dict[str, list[str]] = field(default_factory=dict)
    loop_of: dict[str, str] = field(default_factory=dict)
    _ancestors: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, workflow: Workflow) -> Graph:
        """The edges of a workflow (only between nodes that exist)."""
        ids = [node.id for node in workflow.nodes]
        known = set(ids)
        graph = cls(nodes=list(dict.fromkeys(ids)), edges={i: [] for i in ids})
        for node in workflow.nodes:
            for source, target in _node_edges(node):
                if source in known and target in known and target not in graph.edges[source]:
                    graph.edges[source].append(target)
            if isinstance(node, LoopNode):
                for member in node.body:
                    graph.loop_of.setdefault(member, node.id)
        return graph

    def reachable(self, start: str) -> set[str]:
        """Every node reachable from ``start`` (itself included)."""
        return {start} | _reach(start, self.edges)

    def runs_before(self, source: str, target: str) -> bool:
        """Whether ``source`` has finished (at least once) whenever ``target`` runs."""
        if source == target:
            return False
        if target not in self._ancestors:
            self._ancestors[target] = self._before(target)
        return source in self._ancestors[target]

    def _before(self, target: str) -> set[str]:
        parents: dict[str, set[str]] = {n: set() for n in self.nodes}
        for a, targets in self.edges.items():
            for b in targets:
                parents[b].add(a)
        seen: set[str] = set()
        stack = list(parents.get(target, ()))
        if target in self.loop_of.values():  # a loop's condition reads its body's last iteration
            stack.extend(member for member, loop in self.loop_of.items() if loop == target)
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            stack.extend(parents.get(current, ()))
            # A loop has finished once its body has: what runs after the loop reads its body's last outputs.
            stack.extend(member for member, loop in self.loop_of.items() if loop == current)
        if target in self.loop_of:  # in one loop, a body node reads the others (this or the last iteration)
            seen |= {member for member, loop in self.loop_of.items() if loop == self.loop_of[target]}
        seen.discard(target)
        return seen

    def cycles(self) -> list[list[str]]:
        """The strongly connected components that form a cycle (Tarjan, iterative)."""
        return [c for c in _components(self.nodes, self.edges) if len(c) > 1 or c[0] in self.edges.get(c[0], [])]


def _node_edges(node: Node) -> Iterator[tuple[str, str]]:
    """The edges a node declares: its ``after``, and the nodes it starts (branches, loop bodies)."""
    node_id = node.id
    for before in node.after:
        yield before, node_id
    if isinstance(node, ConditionNode):
        for target in [*node.then, *node.else_]:
            yield node_id, target
    elif isinstance(node, ParallelNode):
        for target in node.branches:
            yield node_id, target
    elif isinstance(node, LoopNode) and node.body:
        yield node_id, node.body[0]
        yield from zip(node.body, node.body[1:], strict=False)


def _components(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components, in node order: a and b share one when each reaches the other.

    A workflow has at most 64 nodes, so reachability from every node is cheap and plainer than Tarjan's.
    """
    reach = {node: _reach(node, edges) for node in nodes}
    found: list[list[str]] = []
    placed: set[str] = set()
    for node in nodes:
        if node in placed:
            continue
        component = [other for other in nodes if other == node or (other in reach[node] and node in reach[other])]
        placed.update(component)
        found.append(component)
    return found


def _reach(start: str, edges: dict[str, list[str]]) -> set[str]:
    """The nodes reachable from ``start`` by one edge or more."""
    seen: set[str] = set()
    stack = list(edges.get(start, []))
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(edges.get(current, []))
    return seen


# --- Structural checks ------------------------------------------------------------------------------------


def structure_issues(workflow: Workflow, graph: Graph) -> list[Issue]:
    """Duplicate or reserved ids, unknown node references, bad joins and loops, cycles, unreachable nodes."""
    issues = [*_id_issues(workflow), *_reference_issues(workflow), *_shape_issues(workflow)]
    if issues:
        return issues
    issues.extend(_cycle_issues(workflow, graph))
    if not issues:
        issues.extend(_reach_issues(workflow, graph))
        issues.extend(_loop_edge_issues(workflow, graph))
    return issues


def _loop_edge_issues(workflow: Workflow, graph: Graph) -> Iterator[Issue]:
    """A loop is entered and left through its loop node: no edge crosses into or out of its body otherwise."""
    for i, node in enumerate(workflow.nodes):
        inside = graph.loop_of.get(node.id)
        for j, before in enumerate(node.after):
            loop = graph.loop_of.get(before)
            if loop is not None and loop != inside:
                yield _issue(
                    f"nodes.{i}.after.{j}",
                    "INVALID_GRAPH",
                    f"node {node.id!r} waits for {before!r} inside loop {loop!r}: wait for the loop instead",
                    node.id,
                )
            elif inside is not None and loop is None and inside not in _reach(before, graph.edges):
                yield _issue(
                    f"nodes.{i}.after.{j}",
                    "INVALID_GRAPH",
                    f"node {node.id!r} in loop {inside!r} waits for {before!r}, which does not run before the loop",
                    node.id,
                )


def _id_issues(workflow: Workflow) -> Iterator[Issue]:
    seen: set[str] = set()
    for i, node in enumerate(workflow.nodes):
        if node.id == INPUT:
            yield _issue(
                f"nodes.{i}.id", "RESERVED_ID", "'input' names the workflow input; choose another node id", node.id
            )
        elif node.id in seen:
            yield _issue(f"nodes.{i}.id", "DUPLICATE_NODE", f"node id {node.id!r} is used twice", node.id)
        seen.add(node.id)


def _references(node: object) -> Iterator[tuple[str, str]]:
    """(field path, node id) of every node a node names."""
    for field_name, attr in (
        ("after", "after"),
        ("then", "then"),
        ("else", "else_"),
        ("branches", "branches"),
        ("body", "body"),
    ):
        for j, target in enumerate(getattr(node, attr, None) or []):
            yield f"{field_name}.{j}", target


def _reference_issues(workflow: Workflow) -> Iterator[Issue]:
    known = {node.id for node in workflow.nodes}
    if workflow.start is not None and workflow.start not in known:
        yield _issue("start", "UNKNOWN_NODE", f"start names no node: {workflow.start!r}")
    for i, node in enumerate(workflow.nodes):
        for where, target in _references(node):
            if target not in known:
                yield _issue(
                    f"nodes.{i}.{where}", "UNKNOWN_NODE", f"node {node.id!r} names no node {target!r}", node.id
                )


def _shape_issues(workflow: Workflow) -> Iterator[Issue]:
    owner: dict[str, str] = {}
    for i, node in enumerate(workflow.nodes):
        if isinstance(node, JoinNode) and len(set(node.after)) < 2:
            yield _issue(
                f"nodes.{i}.after", "INVALID_GRAPH", f"join {node.id!r} needs at least two nodes in after", node.id
            )
        if isinstance(node, LoopNode):
            for j, member in enumerate(node.body):
                if member == node.id:
                    yield _issue(
                        f"nodes.{i}.body.{j}", "INVALID_GRAPH", f"loop {node.id!r} cannot be its own body", node.id
                    )
                elif member in owner and owner[member] != node.id:
                    yield _issue(
                        f"nodes.{i}.body.{j}",
                        "INVALID_GRAPH",
                        f"node {member!r} is already in the body of loop {owner[member]!r}",
                        node.id,
                    )
                owner.setdefault(member, node.id)


def _cycle_issues(workflow: Workflow, graph: Graph) -> Iterator[Issue]:
    position = {node.id: i for i, node in reversed(list(enumerate(workflow.nodes)))}
    for component in graph.cycles():
        loops = {graph.loop_of.get(member) for member in component}
        if len(loops) == 1 and None not in loops:
            continue  # a back edge inside one loop's body: the loop bounds it
        first = min(component, key=lambda n: position[n])
        ring = " → ".join([*component, component[0]])
        yield _issue(
            f"nodes.{position[first]}.after",
            "CYCLE",
            f"nodes {ring} form a cycle; repeat nodes with a loop node (bounded by max_iterations)",
            first,
        )


def _reach_issues(workflow: Workflow, graph: Graph) -> Iterator[Issue]:
    start = workflow.start or workflow.nodes[0].id
    reached = graph.reachable(start)
    for i, node in enumerate(workflow.nodes):
        if node.id not in reached:
            yield _issue(
                f"nodes.{i}",
                "UNREACHABLE_NODE",
                f"node {node.id!r} is not reachable from the start {start!r} (give it an `after`, or make it a branch)",
                node.id,
            )
