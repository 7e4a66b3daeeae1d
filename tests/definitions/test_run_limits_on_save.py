"""A design whose static worst case exceeds the app's run limits is refused on save, naming the node (path) that
makes it too big; the worst case is counted the way runs share their limits out (shared/definitions/limits.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.definitions.catalog import Catalog, app_catalog
from shared.definitions.issues import DefinitionInvalid, Issue
from shared.definitions.limits import workflow_cost
from shared.definitions.models import Workflow
from shared.definitions.validate import check
from shared.runtime.settings import Settings
from tests.definitions.test_validate import Saved

CATALOG = app_catalog(Settings())
TOOL = "function.growth_rate"


def tool(node_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "kind": "tool",
        "tool": TOOL,
        "input": {"values": {"value": [1, 2]}},
        **extra,
    }


def nested_loops(depth: int, iterations: int = 20) -> dict[str, Any]:
    """Loops of ``iterations`` nested ``depth`` deep in one workflow, around one tool node."""
    nodes: list[dict[str, Any]] = []
    for level in range(depth):
        inner = f"l{level + 1}" if level + 1 < depth else "work"
        nodes.append({"id": f"l{level}", "kind": "loop", "body": [inner], "max_iterations": iterations})
    nodes.append(tool("work"))
    return {"id": "deep", "name": "Deep", "nodes": nodes}


def refused(data: dict[str, Any], resolver: Saved | None = None, catalog: Catalog = CATALOG) -> list[Issue]:
    with pytest.raises(DefinitionInvalid) as caught:
        check("workflow", data, resolver or Saved(), catalog)
    return [i for i in caught.value.issues if i.code == "RUN_LIMIT_EXCEEDED"]


def test_loops_nested_in_one_workflow_multiply_and_are_refused_at_the_outer_loop() -> None:
    check("workflow", nested_loops(2), Saved(), CATALOG)  # 20 × 20 tool calls: 400 + 21 loop runs, within 1000
    (nodes, tools) = refused(nested_loops(3))
    # The path names the node that weighs most, and the message the loops that multiply it.
    assert (nodes.path, nodes.node) == ("nodes.3", "work")
    assert "8421 node executions" in nodes.message and "1000 (RUN_MAX_NODE_RUNS)" in nodes.message
    assert "loop 'l0' (20×) × loop 'l1' (20×) × loop 'l2' (20×) × node 'work'" in nodes.message
    assert "8000 tool calls" in tools.message and "500 (RUN_MAX_TOOL_CALLS)" in tools.message


def test_loops_of_sub_workflows_nested_eight_deep_are_refused_where_they_pass_the_limit() -> None:
    saved = Saved(("workflow", {"id": "w0", "name": "W0", "nodes": [tool("work")]}))
    worst = [1]
    refusal: list[Issue] = []
    for level in range(1, 9):
        data = {
            "id": f"w{level}",
            "name": f"W{level}",
            "nodes": [
                {"id": "again", "kind": "loop", "body": ["sub"], "max_iterations": 20},
                {"id": "sub", "kind": "workflow", "workflow": f"w{level - 1}"},
            ],
        }
        try:
            check("workflow", data, saved, CATALOG)
        except DefinitionInvalid as exc:
            refusal = [i for i in exc.issues if i.code == "RUN_LIMIT_EXCEEDED"]
            break
        saved.add("workflow", data)
        worst.append(workflow_cost(Workflow.model_validate(data), saved).node_runs)
    # w1: 1 + 20 × (1 + 1) = 41, w2: 1 + 20 × (1 + 41) = 841, w3 would need 1 + 20 × 842: refused at its sub node.
    assert worst == [1, 41, 841]
    (issue, *_) = refusal
    assert (issue.path, issue.node) == ("nodes.1", "sub") and "16841 node executions" in issue.message
    assert "loop 'again' (20×) × workflow 'w2' (842 node executions)" in issue.message


def test_width_depth_and_parts_alive_are_counted_as_runs_share_them() -> None:
    fan = {
        "id": "fan",
        "name": "Fan",
        "nodes": [
            {"id": "split", "kind": "parallel", "branches": ["a", "b", "c"]},
            tool("a"),
            tool("b"),
            tool("c"),
            {"id": "merge", "kind": "join", "after": ["a", "b", "c"]},
        ],
    }
    cost = workflow_cost(Workflow.model_validate(fan), Saved())
    assert (cost.node_runs, cost.tool_calls, cost.depth, cost.parts_alive, cost.width) == (5, 3, 1, 3, 3)
    small = app_catalog(Settings(run_max_parallel_width=2, run_max_parts_alive=2, run_max_depth=0))
    found = refused(fan, catalog=small)
    assert [(i.path, i.node) for i in found] == [("nodes.0", "split")] * 3
    messages = " | ".join(i.message for i in found)
    assert "RUN_MAX_PARALLEL_WIDTH" in messages and "RUN_MAX_PARTS_ALIVE" in messages and "RUN_MAX_DEPTH" in messages


def test_a_wide_parallel_team_is_refused_by_the_width_limit() -> None:
    saved = Saved(*[("agent", {"id": f"a{i}", "name": "A", "instructions": "Work."}) for i in range(4)])
    saved.add("agent", {"id": "agg", "name": "Agg", "instructions": "Combine."})
    fan_out = {"type": "parallel", "aggregator": "agg"}
    team = {"id": "t", "name": "T", "agents": ["a0", "a1", "a2", "a3"], "strategy": fan_out}
    check("team", team, saved, CATALOG)
    with pytest.raises(DefinitionInvalid) as caught:
        check("team", team, saved, app_catalog(Settings(run_max_parallel_width=3)))
    (issue,) = [i for i in caught.value.issues if "RUN_MAX_PARALLEL_WIDTH" in i.message]
    assert issue.path == "agents" and issue.code == "RUN_LIMIT_EXCEEDED"
