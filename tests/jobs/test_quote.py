"""The quote (shared/jobs/quote.py): a pure range from work items, bounds and prices; unknown meters never 0."""

from __future__ import annotations

import pytest

from shared.jobs.costs import CallPrices
from shared.jobs.quote import (
    MAX_QUOTE_STEPS,
    Item,
    QuoteBounds,
    QuotePrices,
    TokenPrice,
    agent_items,
    plan_items,
    quote,
)

CALLS = CallPrices(table="t1", per_call={"flex.executions": 0.001}, per_second={"flex.gb_seconds": 0.0001})
PRICES = QuotePrices(
    version="t1",
    calls=CALLS,
    unknown_per_call={"storage.transactions": 9},
    per_job={"flex.executions": 0.0005},
    unknown_per_job={"storage.transactions": 7},
    models={"m1": TokenPrice(input=1e-6, output=2e-6)},
)
BOUNDS = QuoteBounds(models=["m1"], attempts_per_model=3, max_tokens=100, timeout_s=10, input_tokens=1000)


def llm(kind: str) -> bool:
    return kind in ("generate_response", "execute_azure_sql")


def test_one_model_step_low_and_high_by_hand() -> None:
    made = quote([Item("s1", "generate_response", (1, 1), (1, 1))], BOUNDS, PRICES, spent=0.01)
    job, step = made.by_step
    assert (job.step_id, job.low, job.high) == ("(job)", pytest.approx(0.0105), pytest.approx(0.0105))
    # Low: one call's per-call meters. High: 3 attempts, each its whole timeout and its worst tokens.
    assert step.low == pytest.approx(0.001)
    worst_call = 0.001 + 0.0001 * 10 + 1000 * 1e-6 + 100 * 2e-6
    assert step.high == pytest.approx(3 * worst_call)
    assert made.low == pytest.approx(0.0105 + 0.001) and made.high == pytest.approx(0.0105 + 3 * worst_call)
    assert (made.currency, made.price_table_version) == ("USD", "t1")
    # The Storage transactions have no price: listed with their quantities (job 7, a call 9 to 3 × 9), not 0.
    assert [(u.meter, u.unit, u.low, u.high, u.price) for u in made.unknown] == [
        ("storage.transactions", "transaction", 7 + 9, 7 + 27, "unknown")
    ]


def test_more_models_more_attempts_and_the_dearest_model_prices_the_high_end() -> None:
    prices = PRICES.model_copy(update={"models": {"m1": TokenPrice(input=1e-6, output=2e-6)}})
    bounds = BOUNDS.model_copy(update={"models": ["m1", "m2"]})
    made = quote([Item("s1", "generate_response", (1, 1), (1, 1))], bounds, prices)
    step = made.by_step[-1]
    assert step.high == pytest.approx(6 * (0.001 + 0.001) + 6 * (1000 * 1e-6 + 100 * 2e-6))
    # m2 has no price: its tokens are unknown, bounded by 6 calls × (input + max_tokens).
    tokens = {u.meter: (u.low, u.high) for u in made.unknown}
    assert tokens["llm.tokens:m2"] == (0, 6 * 1100)


def test_tools_priced_and_unpriced_and_the_function_family_inside_flex() -> None:
    prices = PRICES.model_copy(update={"tools": {"http": 0.01}, "unknown_per_call": {}, "unknown_per_job": {}})
    items = [
        Item("t1", "call_tool", (1, 1), tool="http.weather"),
        Item("t2", "call_tool", (1, 1), tool="mcp.search"),
        Item("t3", "call_tool", (1, 1), tool="function.add"),
    ]
    made = quote(items, BOUNDS, prices)
    by = {s.step_id: s for s in made.by_step}
    assert by["t1"].low == pytest.approx(0.001 + 0.01) and by["t1"].high == pytest.approx(3 * (0.002 + 0.01))
    assert [(u.meter, u.low, u.high) for u in made.unknown] == [("tools.calls:mcp.search", 1, 3)]


def test_search_sql_and_a_remote_sandbox_without_price_are_unknown_with_their_bounds() -> None:
    prices = PRICES.model_copy(
        update={"search_unknown": True, "sql_unknown": True, "sandbox_per_second": None, "unknown_per_call": {}}
    )
    items = [
        Item("r", "consult_rag", (1, 1), search=True),
        Item("q", "execute_azure_sql", (1, 2), (1, 2), sql=True),
        Item("p", "run_python", (1, 1), sandbox=True),
    ]
    unknown = {u.meter: (u.low, u.high) for u in quote(items, BOUNDS, prices).unknown}
    assert unknown["search.queries"] == (1, 3)
    assert unknown["sql.seconds"] == (0, 6 * 10)
    assert unknown["sandbox.azure_sessions.seconds"] == (0, 3 * 10)
    priced = prices.model_copy(update={"sandbox_per_second": 0.5})
    run = quote([items[2]], BOUNDS, priced).by_step[-1]
    assert run.high == pytest.approx(3 * (0.002 + 10 * 0.5))


def test_plan_items_count_drafts_approvals_questions_agents_and_supervision() -> None:
    steps = [("s1", "consult_rag"), ("s2", "execute_azure_sql"), ("s3", "ask_user"), ("s4", "agent")]
    steps += [("s5", "run_python"), ("s6", "generate_response")]
    items = plan_items(
        steps,
        llm,
        sql_kinds=["execute_azure_sql"],
        code_kinds=["run_python"],
        no_call_kinds=["ask_user"],
        agent_kinds=["agent"],
        search_kinds=["consult_rag"],
        sql_approval=True,
        python_approval="writes_files",
        supervised=True,
        agent_turns=4,
        agent_tool_calls=5,
    )
    got = [(i.step_id, i.kind, i.calls, i.model_calls) for i in items]
    assert got == [
        ("s1", "consult_rag", (1, 1), (0, 0)),
        ("s1", "supervise", (1, 1), (1, 1)),  # a hybrid step's Supervisor call, in its step's entry
        ("s2", "execute_azure_sql", (1, 2), (1, 2)),  # drafted, then run once approved
        ("s2", "supervise", (1, 1), (1, 1)),
        ("s3", "ask_user", (0, 0), (0, 0)),  # a question to a person: no call
        ("s4", "agent_turn", (1, 4), (1, 4)),
        ("s4", "call_tool", (0, 5), (0, 5)),
        ("s5", "run_python", (1, 2), (0, 0)),  # writes_files: may run twice
        ("s5", "supervise", (1, 1), (1, 1)),
        ("s6", "generate_response", (1, 1), (1, 1)),
        ("s6", "supervise", (1, 1), (1, 1)),
    ]
    made = quote(items, BOUNDS, PRICES)
    assert [(s.step_id, s.kind, s.calls) for s in made.by_step] == [
        ("(job)", "(job)", (0, 0)),
        ("s1", "consult_rag", (2, 2)),
        ("s2", "execute_azure_sql", (2, 3)),
        ("s3", "ask_user", (0, 0)),
        ("s4", "agent_turn", (1, 9)),
        ("s5", "run_python", (2, 3)),
        ("s6", "generate_response", (2, 2)),
    ]
    assert plan_items([("s2", "execute_azure_sql")], llm, sql_kinds=["execute_azure_sql"])[0].calls == (1, 1)


def test_agent_items_bound_turns_and_tool_calls() -> None:
    items = agent_items(8, 12)
    made = quote(items, BOUNDS, PRICES.model_copy(update={"unknown_per_call": {}, "unknown_per_job": {}}))
    agent = made.by_step[-1]
    assert agent.step_id == "agent" and agent.calls == (1, 20) and agent.low == pytest.approx(0.001)
    assert agent.high == pytest.approx((8 + 12) * 3 * (0.002 + 1000 * 1e-6 + 100 * 2e-6))


def test_the_range_holds_low_le_high_and_by_step_sums_to_it_and_is_bounded() -> None:
    items = [Item(f"s{i}", "generate_response", (1, 1), (1, 1)) for i in range(60)]
    made = quote(items, BOUNDS, PRICES)
    assert 0 < made.low <= made.high
    assert len(made.by_step) == MAX_QUOTE_STEPS + 1 and made.by_step[-1].step_id == "(+37 more)"
    assert sum(s.low for s in made.by_step) == pytest.approx(made.low)
    assert sum(s.high for s in made.by_step) == pytest.approx(made.high)


def test_no_price_at_all_gives_zero_money_and_every_meter_unknown() -> None:
    bare = QuotePrices(
        version="t0",
        calls=CallPrices(table="t0"),
        unknown_per_call={"durable.actions": 2, "flex.executions": 2},
        unknown_per_second={"flex.gb_seconds": 2.0},
    )
    made = quote([Item("s1", "generate_response", (1, 1), (1, 1))], BOUNDS, bare)
    assert (made.low, made.high) == (0, 0)
    unknown = {u.meter: (u.low, u.high) for u in made.unknown}
    assert unknown == {
        "durable.actions": (2, 6),
        "flex.executions": (2, 6),
        "flex.gb_seconds": (0, 3 * 10 * 2.0),
        "llm.tokens:m1": (0, 3 * 1100),
    }
