"""budget.max_cost: every priced meter (tokens, tools, the Durable backend, Flex) checked before each call."""

from __future__ import annotations

from typing import Any

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.jobs.contracts import ExecutorOutput, Usage
from shared.jobs.costs import CallPrices, Spend, next_call, over_max_cost
from tests.jobs.test_policy_inline import ANSWER_OK, PLAN, RAG_OK, Script, ok

# One activity call: 2 DTS actions at 0.0005 USD each (made-up prices: the test sets its own table).
PRICES = {"table": "test", "per_call": {"durable.actions": 0.001}, "per_second": {"flex.gb_seconds": 0.0}}


def run(script: Script, budget: dict[str, Any], prices: dict[str, Any] | None = PRICES) -> dict[str, Any]:
    policy: dict[str, Any] = {"max_attempts_per_model": 3, "first_retry_ms": 1, "output_price": {"m1": 1e-6}}
    if prices is not None:
        policy["call_prices"] = prices
    job = {
        "job_id": "j1",
        "request": {"question": "What about refunds?", "constraints": {"max_tokens": 1, "budget": budget}},
        "policy": policy,
    }
    return dict(run_inline(job_orchestrator_body, InlineContext(job, script)))


def script() -> Script:
    return Script(plan=[ok(PLAN, 0)], consult_rag=[ok(RAG_OK, 0)], generate_response=[ok(ANSWER_OK, 0)])


def test_the_call_that_would_cross_max_cost_never_runs_and_the_meter_is_named() -> None:
    # plan: 0 + 0.001 (+ 1e-6 tokens) fits; s1: 0.001 + 0.001 fits; s2: 0.002 + 0.001 (+ 1e-6) > 0.0025.
    calls = script()
    result = run(calls, {"max_cost": 0.0025})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    assert result["error"]["step_id"] == "s2"
    assert "the meter that crosses it: durable.actions" in result["error"]["message"]
    assert [name for name, _ in calls.calls] == ["plan", "consult_rag"]


def test_a_budget_that_fits_every_call_lets_the_job_finish() -> None:
    assert run(script(), {"max_cost": 0.0031})["status"] == "completed"


def test_without_infrastructure_prices_only_tokens_and_tools_count() -> None:
    # A job started before call prices existed (or with every infrastructure price unknown).
    assert run(script(), {"max_cost": 0.0025}, prices=None)["status"] == "completed"
    # The plan spent 1e-6 USD of tokens; the answer may spend 1e-6 more (1 token at 1e-6): over 1.5e-6.
    spent = ExecutorOutput(status="success", result=PLAN, usage=Usage(estimated_cost=1e-6), model_used="m1")
    calls = Script(plan=[spent.model_dump(mode="json")], consult_rag=[ok(RAG_OK, 0)], generate_response=[])
    result = run(calls, {"max_cost": 0.0000015}, prices=None)
    assert result["error"]["code"] == "BUDGET_EXCEEDED" and result["error"]["step_id"] == "s2"
    assert result["error"]["message"].endswith("the meter that crosses it: llm.tokens")


def test_the_check_names_the_meter_the_next_call_spends_most_on() -> None:
    prices = CallPrices(table="t", per_call={"durable.actions": 0.001}, per_second={"flex.gb_seconds": 0.0001})
    spent = Spend(calls=3, seconds=20.0).by_meter(prices)
    assert spent == {"durable.actions": 0.003, "flex.gb_seconds": 0.002}
    upcoming = next_call(prices, 60.0)  # worst case: the call's timeout
    assert upcoming == {"durable.actions": 0.001, "flex.gb_seconds": 0.006}
    assert over_max_cost(0.012, spent, upcoming, "the job", "s1") is None
    crossed = over_max_cost(0.0119, spent, upcoming, "the job", "s1")
    assert crossed is not None and crossed[0] == "flex.gb_seconds"
