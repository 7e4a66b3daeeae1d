"""A run's total-work budget (RunLimits), inline: each limit on its own stops the run with RUN_LIMIT_EXCEEDED at the
node that reached it, naming the limit; shares passed to parts hold across the whole tree; tool calls and their price
count; a run started before runs had limits runs as it began."""

from __future__ import annotations

from typing import Any

from api.jobs import resolve_policy
from shared.jobs.models import JobRequest
from shared.providers.clients import Clients, set_clients
from shared.runtime.pricing import tool_price
from shared.runtime.settings import Settings
from tests.jobs.test_policy_inline import ok
from tests.runs.runkit import Activities, defs, start, steps
from tests.runs.shapes import AGENT, TOOL, change, thinking

DEFAULTS = {
    "max_node_runs": 1000,
    "max_parts_alive": 64,
    "max_parallel_width": 16,
    "max_depth": 8,
    "max_tool_calls": 500,
}


def limits(**lowered: int) -> dict[str, int]:
    return DEFAULTS | lowered


def looping(iterations: int = 5, wf_id: str = "w") -> dict[str, Any]:
    """A loop of ``iterations`` over one tool node."""
    return {
        "id": wf_id,
        "name": "Loop",
        "nodes": [
            {"id": "again", "kind": "loop", "body": ["calc"], "max_iterations": iterations},
            change("calc", {"value": 80}),
        ],
    }


def fan(*branches: dict[str, Any], on_failure: str = "fail") -> dict[str, Any]:
    ids = [b["id"] for b in branches]
    return {
        "id": "fan",
        "name": "Fan",
        "nodes": [
            {"id": "split", "kind": "parallel", "branches": ids},
            *branches,
            {"id": "merge", "kind": "join", "after": ids, "on_failure": on_failure},
        ],
    }


def stopped(result: dict[str, Any], limit: str, at: str) -> str:
    """The run failed with RUN_LIMIT_EXCEEDED naming ``limit``, at node ``at``; its message."""
    assert result["status"] == "failed", result
    error = result["error"]
    assert (error["code"], error["limit"], error["step_id"]) == ("RUN_LIMIT_EXCEEDED", limit, at), error
    assert limit in error["message"]
    return str(error["message"])


def test_a_loop_stops_at_the_node_executions_allowed() -> None:
    acts = Activities(defs(looping(5)))
    result, ctx = start(acts, "workflow", "w", tools=[TOOL], limits=limits(max_node_runs=4))
    message = stopped(result, "max_node_runs", "calc")
    assert "4 nodes ran, 4 allowed" in message
    assert len(acts.named("call_tool")) == 3  # the loop node itself is one of the four
    assert steps(ctx)["calc"]["state"] == "failed"


def test_tool_calls_are_counted_and_stop_before_the_one_over() -> None:
    acts = Activities(defs(looping(5)))
    result, _ = start(acts, "workflow", "w", tools=[TOOL], limits=limits(max_tool_calls=2))
    stopped(result, "max_tool_calls", "calc")
    assert len(acts.named("call_tool")) == 2


def test_a_parallel_node_wider_than_allowed_starts_nothing() -> None:
    acts = Activities(defs(fan(change("a", {"value": 1}), change("b", {"value": 2}))))
    result, ctx = start(acts, "workflow", "fan", tools=[TOOL], limits=limits(max_parallel_width=1))
    assert "starts 2 branches, 1 allowed" in stopped(result, "max_parallel_width", "split")
    assert ctx.children == {} and acts.named("call_tool") == []


def test_parts_alive_at_once_are_bounded() -> None:
    acts = Activities(defs(fan(change("a", {"value": 1}), change("b", {"value": 2}))))
    result, ctx = start(acts, "workflow", "fan", tools=[TOOL], limits=limits(max_parts_alive=1))
    stopped(result, "max_parts_alive", "split")
    assert ctx.children == {} and acts.named("call_tool") == []


def test_nesting_is_bounded() -> None:
    outer = {"id": "outer", "name": "Outer", "nodes": [{"id": "inner", "kind": "workflow", "workflow": "w"}]}
    acts = Activities({**defs(outer), **defs(looping(2))})
    result, _ = start(acts, "workflow", "outer", tools=[TOOL], pins={"workflow/w": 1}, limits=limits(max_depth=0))
    stopped(result, "max_depth", "inner")
    assert acts.named("call_tool") == []
    # One level is enough for it, and the sub-workflow's nodes count in the run's node executions.
    acts = Activities({**defs(outer), **defs(looping(2))})
    result, _ = start(acts, "workflow", "outer", tools=[TOOL], pins={"workflow/w": 1}, limits=limits(max_node_runs=3))
    stopped(result, "max_node_runs", "inner")
    assert len(acts.named("call_tool")) == 1  # inner (1) + loop (1) + one calc: the second calc would be the 4th


def test_branches_share_what_is_left_and_a_branch_at_its_limit_fails_the_whole_run() -> None:
    # Each branch loops over a tool node; the join would carry on past a failed branch, but a run limit stops all.
    branch_a = {"id": "a", "kind": "loop", "body": ["ca"], "max_iterations": 5}
    branch_b = {"id": "b", "kind": "loop", "body": ["cb"], "max_iterations": 5}
    wf = fan(branch_a, branch_b, on_failure="continue")
    wf["nodes"][3:3] = [change("ca", {"value": 1}), change("cb", {"value": 2})]
    acts = Activities(defs(wf))
    # 1 (split) ran: 8 left, 4 per branch: its loop node and 3 calls each, then the 4th call stops each branch.
    result, _ = start(acts, "workflow", "fan", tools=[TOOL], limits=limits(max_node_runs=9))
    message = stopped(result, "max_node_runs", "ca")
    assert "share" in message
    assert len(acts.named("call_tool")) == 6


def test_a_parts_share_is_passed_down_and_what_it_used_comes_back() -> None:
    # A sub-workflow inside a branch runs as a whole workflow (it once inherited the branch's part and ran nothing).
    two = [change("c1", {"value": 1}), change("c2", {"value": 2}, after=["c1"])]
    inner = {"id": "two", "name": "Two", "nodes": two}
    outer = {
        "id": "outer",
        "name": "Outer",
        "nodes": [
            {"id": "split", "kind": "parallel", "branches": ["a", "b"]},
            {"id": "a", "kind": "workflow", "workflow": "two"},
            change("b", {"value": 3}),
            {"id": "merge", "kind": "join", "after": ["a", "b"]},
            change("last", {"value": 4}, after=["merge"]),
        ],
    }
    acts = Activities({**defs(outer), **defs(inner)})
    asked = limits(max_node_runs=21, max_tool_calls=10, max_parts_alive=6, max_depth=3)
    result, ctx = start(acts, "workflow", "outer", tools=[TOOL], pins={"workflow/two": 1}, limits=asked)
    assert result["status"] == "completed", result
    assert sorted(p["task"]["arguments"]["old"] for p in acts.named("call_tool")) == [1, 2, 3, 4]
    shares = {cid: child.get_input()["run"]["limits"] for cid, child in ctx.children.items()}
    # split ran (1 of 21): each branch gets 10 node executions, 5 tool calls, (6 - 2) / 2 parts and a level less.
    assert shares["r1:a"] == limits(max_node_runs=10, max_tool_calls=5, max_parts_alive=2, max_depth=2)
    sub = next(iter(ctx.children["r1:a"].children.values()))
    # Branch a ran its workflow node (1 of 10): the sub-workflow gets the 9 left, one part less, one level less.
    assert sub.get_input()["run"]["limits"] == limits(max_node_runs=9, max_tool_calls=5, max_parts_alive=1, max_depth=1)
    # Seven nodes ran in all (split, a, c1, c2, b, merge, last): seven is enough, six is not.
    for allowed, ends in ((7, "completed"), (6, "failed")):
        acts = Activities({**defs(outer), **defs(inner)})
        asked = asked | {"max_node_runs": allowed}
        result, _ = start(acts, "workflow", "outer", tools=[TOOL], pins={"workflow/two": 1}, limits=asked)
        assert result["status"] == ends, result
    # With six, split leaves 5: 2 per branch; branch a's workflow node leaves its sub-workflow 1, and c2 is one more.
    assert result["error"]["step_id"] == "a" and "'c2' would be one more" in stopped(result, "max_node_runs", "a")


def test_a_priced_tool_counts_into_the_cost_budget() -> None:
    priced = {"status": "success", "result": {"success": True, "data": 1}, "usage": {"estimated_cost": 0.01}}
    acts = Activities(defs(looping(5)), call_tool=[priced] * 5)
    result, _ = start(
        acts,
        "workflow",
        "w",
        tools=[TOOL],
        limits=limits(),
        policy={"tool_price": {TOOL: 0.01}},
        constraints={"budget": {"max_estimated_cost": 0.025}},
    )
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED", result
    assert len(acts.named("call_tool")) == 2  # the third call's price would pass the budget
    assert "0.020000 USD plus up to 0.010000 USD" in result["error"]["message"]


def test_a_run_started_before_limits_runs_as_it_began() -> None:
    acts = Activities(defs(looping(5)))
    result, _ = start(acts, "workflow", "w", tools=[TOOL])  # no limits in its input
    assert result["status"] == "completed", result
    assert len(acts.named("call_tool")) == 5


def test_branches_share_what_is_left_of_the_cost_budget() -> None:
    # Each branch loops three priced calls (a cent each); the budget has four cents: each branch may spend two.
    priced = {"status": "success", "result": {"success": True, "data": 1}, "usage": {"estimated_cost": 0.01}}
    branch_a = {"id": "a", "kind": "loop", "body": ["ca"], "max_iterations": 3}
    branch_b = {"id": "b", "kind": "loop", "body": ["cb"], "max_iterations": 3}
    wf = fan(branch_a, branch_b, on_failure="continue")
    wf["nodes"][3:3] = [change("ca", {"value": 1}), change("cb", {"value": 2})]
    acts = Activities(defs(wf), call_tool=[priced] * 6)
    result, ctx = start(
        acts,
        "workflow",
        "fan",
        tools=[TOOL],
        limits=limits(),
        policy={"tool_price": {TOOL: 0.01}},
        constraints={"budget": {"max_estimated_cost": 0.04}},
    )
    budgets = [child.get_input()["request"]["constraints"]["budget"] for child in ctx.children.values()]
    assert [b["max_estimated_cost"] for b in budgets] == [0.02, 0.02]
    assert len(acts.named("call_tool")) == 4  # without shares each branch would make its three calls: 0.06
    assert result["usage"]["estimated_cost"] == 0.04
    assert result["status"] == "completed" and result["outputs"]["result"]["failed"] == ["a", "b"], result


def test_an_agents_tool_calls_count_too_those_of_one_turn_before_they_start_together() -> None:
    args = '{"old": 80, "new": 100}'
    calls = [{"id": f"c{i}", "tool": TOOL, "arguments_json": args} for i in (1, 2)]
    turn = ok({"reasoning": "two at once", "tool_calls": calls})
    acts = Activities({**defs(thinking()), **defs(AGENT)}, agent_turn=[turn, turn])
    result, _ = start(acts, "workflow", "ask", tools=[TOOL], limits=limits(max_tool_calls=1))
    stopped(result, "max_tool_calls", "think-t1")
    assert acts.named("call_tool") == []  # the turn's two calls would pass the limit: neither started


def test_tool_prices_by_name_or_prefix_reach_a_jobs_policy() -> None:
    prices = {"http": 0.002, "mcp.docs": 0.01, "mcp.docs.search": 0.03}
    assert [tool_price(t, prices) for t in ("http.weather", "mcp.docs.fetch", "mcp.docs.search", "mcp.x.y")] == [
        0.002,
        0.01,
        0.03,
        None,
    ]
    set_clients(Clients(Settings(tool_prices=prices)))
    try:
        request = JobRequest(question="q", mode="agent", tools=["http.weather", "function.percent_change"])
        assert resolve_policy(request).tool_price == {"http.weather": 0.002}
    finally:
        set_clients(None)
