"""An agent's own budget (``constraints.budget``) counts what its node uses, on top of the run's budget."""

from __future__ import annotations

from typing import Any

from tests.jobs.test_policy_inline import ok
from tests.runs.runkit import Activities, answer, defs, start, steps
from tests.runs.shapes import AGENT, PROMPT

# Each call may use up to max_tokens=800; the agent may spend 1200 tokens per node.
BUDGETED = {**AGENT, "constraints": {**AGENT["constraints"], "budget": {"max_total_tokens": 1200}}}
TWICE = {
    "id": "twice",
    "name": "Twice",
    "nodes": [
        {"id": "first", "kind": "agent", "agent": "analyst", "version": 1, "input": PROMPT},
        {"id": "second", "kind": "agent", "agent": "analyst", "version": 1, "after": ["first"], "input": PROMPT},
    ],
}
RUN_BUDGET = {"budget": {"max_total_tokens": 100_000}}


def turn(tokens: int) -> dict[str, Any]:
    """A model turn that asks for nothing more and used ``2 * tokens`` tokens."""
    return ok({"reasoning": "done", "tool_calls": [{"id": "c1", "tool": "format_output"}]}, tokens=tokens)


def test_an_agent_over_its_own_budget_stops_at_its_node_while_the_runs_budget_is_fine() -> None:
    # first: turn 300 tokens, answer 20; second: turn 500, so its answer (500 + up to 800) would pass 1200.
    acts = Activities(
        {**defs(TWICE), **defs(BUDGETED)},
        agent_turn=[turn(150), turn(250)],
        generate_response=[answer("one"), answer("two")],
    )
    result, ctx = start(acts, "workflow", "twice", constraints=RUN_BUDGET)
    assert result["status"] == "failed", result
    assert result["error"]["code"] == "BUDGET_EXCEEDED" and result["error"]["step_id"] == "second"
    assert "agent 'analyst'" in result["error"]["message"] and "1200" in result["error"]["message"]
    shown = steps(ctx)
    assert shown["first"]["state"] == "succeeded" and shown["second"]["state"] == "failed"
    assert len(acts.named("generate_response")) == 1  # the over-budget answer was never asked for
    # The run's own budget was far from spent.
    assert result["usage"]["total_tokens"] == 820


def test_an_agents_budget_counts_only_its_own_node() -> None:
    # Each node uses 300 + 20 tokens: 640 for the run, more than 1200 - 800 left if counted across nodes.
    acts = Activities(
        {**defs(TWICE), **defs(BUDGETED)},
        agent_turn=[turn(150), turn(150)],
        generate_response=[answer("one"), answer("two")],
    )
    result, ctx = start(acts, "workflow", "twice", constraints=RUN_BUDGET)
    assert result["status"] == "completed", result
    # Each call is told what is left of the tightest budget: the agent's, counted from its node's start.
    second_answer = acts.named("generate_response")[1]["execution_context"]
    assert second_answer["budget_tokens_left"] == 1200 - 300


def test_the_runs_budget_still_holds_inside_an_agent_node() -> None:
    acts = Activities({**defs(TWICE), **defs(BUDGETED)}, agent_turn=[turn(150)], generate_response=[answer("one")])
    result, _ = start(acts, "workflow", "twice", constraints={"budget": {"max_total_tokens": 1000}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    assert result["error"]["step_id"] == "first" and "the job" in result["error"]["message"]
