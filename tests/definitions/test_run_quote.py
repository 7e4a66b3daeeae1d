"""A workflow or team run's quote from its graph and bounds (shared/definitions/quote.py), with a dict resolver."""

from __future__ import annotations

from typing import Any

import pytest

from shared.definitions.models import MODELS, Definition, Team, Workflow
from shared.definitions.quote import run_quote
from shared.jobs.costs import CallPrices
from shared.jobs.models import JobRequest, RetryPolicy
from shared.jobs.quote import Quote, QuotePrices, TokenPrice

PRICES = QuotePrices(
    version="t1",
    calls=CallPrices(table="t1", per_call={"flex.executions": 0.001}),
    models={"m1": TokenPrice(input=0.0, output=1e-6)},
)
POLICY = RetryPolicy(max_attempts_per_model=1, quote_prices=PRICES)
AGENT = {"id": "a1", "name": "A", "instructions": "Work.", "limits": {"max_turns": 3, "max_tool_calls": 4}}
AGENT["constraints"] = {"max_tokens": 10, "timeout_ms": 1000}


class Resolver:
    def __init__(self, *bodies: dict[str, Any]) -> None:
        self.found = {(b.get("kind", "workflow"), b["id"]): b for b in bodies}

    def find(self, kind: str, def_id: str, version: int | None) -> Definition | None:
        body = self.found.get((kind, def_id))
        return MODELS[kind].model_validate({k: v for k, v in body.items() if k != "kind"}) if body else None


def request(**extra: Any) -> JobRequest:
    return JobRequest.model_validate(
        {"question": "run", "constraints": {"max_tokens": 100, "allowed_models": ["m1"]}, **extra}
    )


def test_a_loop_a_sub_workflow_and_an_agent_node() -> None:
    sub = {"kind": "workflow", "id": "sub", "name": "Sub", "nodes": [{"id": "t", "kind": "tool", "tool": "function.x"}]}
    wf = Workflow.model_validate(
        {
            "id": "w",
            "name": "W",
            "nodes": [
                {"id": "again", "kind": "loop", "body": ["docs"], "max_iterations": 3},
                {"id": "docs", "kind": "step", "step": "consult_rag", "input": {"query": {"value": "q"}}},
                {"id": "inner", "kind": "workflow", "workflow": "sub", "after": ["again"]},
                {"id": "think", "kind": "agent", "agent": "a1", "after": ["inner"]},
                {"id": "ok", "kind": "human", "question": {"value": "ok?"}, "options": ["yes"], "after": ["think"]},
            ],
        }
    )
    made = run_quote(Resolver(sub, {"kind": "agent", **AGENT}), wf, request(), POLICY)
    assert made is not None and made.price_table_version == "t1"
    by = {s.step_id: s for s in made.by_step}
    assert set(by) == {"docs", "inner/t", "think"}
    assert by["docs"].calls == (1, 3)  # once at the low end, max_iterations at the high end
    assert by["docs"].high == pytest.approx(3 * 0.001)  # consult_rag calls no model
    assert by["inner/t"].calls == (1, 1)
    # The agent's turns, tool calls and answer run under its own max_tokens (10), at 1e-6 per output token.
    assert by["think"].calls == (2, 3 + 4 + 1)
    assert by["think"].low == pytest.approx(2 * 0.001)
    assert by["think"].high == pytest.approx((3 + 4 + 1) * (0.001 + 10 * 1e-6))
    assert made.low == pytest.approx(0.001 * 4)  # docs, t, a turn, the answer
    assert any("condition" in a for a in made.assumptions)


def test_a_sql_step_under_approval_drafts_and_runs() -> None:
    wf = Workflow.model_validate(
        {"id": "w", "name": "W", "nodes": [{"id": "q", "kind": "step", "step": "execute_azure_sql", "input": {}}]}
    )
    plain = run_quote(Resolver(), wf, request(), POLICY)
    approved = run_quote(Resolver(), wf, request(approval={"sql": "always"}), POLICY)
    assert plain is not None and approved is not None
    assert plain.by_step[0].calls == (1, 1) and approved.by_step[0].calls == (1, 2)


def test_teams_by_strategy() -> None:
    agents = [{"kind": "agent", **AGENT, "id": name} for name in ("a1", "a2", "boss")]
    agents[1]["limits"] = {"max_turns": 8, "max_tool_calls": 12}
    resolver = Resolver(*agents)
    seq = Team.model_validate({"id": "t", "name": "T", "agents": ["a1", "a2"], "strategy": {"type": "sequential"}})
    fan = Team.model_validate(
        {"id": "t", "name": "T", "agents": ["a1", "a2"], "strategy": {"type": "parallel", "aggregator": "boss"}}
    )
    sup = Team.model_validate(
        {
            "id": "t",
            "name": "T",
            "agents": ["a1", "a2"],
            "strategy": {"type": "supervisor", "supervisor": "boss", "max_rounds": 2},
        }
    )
    ids = {
        name: [s.step_id for s in _made(run_quote(resolver, t, request(), POLICY)).by_step]
        for name, t in [
            ("seq", seq),
            ("fan", fan),
            ("sup", sup),
        ]
    }
    assert ids["seq"] == ["a1", "a2"]
    assert ids["fan"] == ["a1", "a2", "aggregator:boss"]
    rounds = run_quote(resolver, sup, request(), POLICY)
    assert rounds is not None
    by = {s.step_id: s for s in rounds.by_step}
    assert list(by) == ["supervisor:boss", "member:a2"]
    assert by["member:a2"].calls == (2, 2 * (8 + 12 + 1))  # the heaviest member, max_rounds times


def test_no_quote_prices_no_quote() -> None:
    wf = Workflow.model_validate({"id": "w", "name": "W", "nodes": [{"id": "t", "kind": "tool", "tool": "function.x"}]})
    assert run_quote(Resolver(), wf, request(), RetryPolicy()) is None


def test_an_agent_with_its_own_model_is_priced_at_it() -> None:
    prices = PRICES.model_copy(
        update={"models": {"m1": TokenPrice(input=0.0, output=1e-6), "big": TokenPrice(input=0.0, output=1e-3)}}
    )
    policy = RetryPolicy(max_attempts_per_model=1, quote_prices=prices)
    boss = {"kind": "agent", **AGENT, "model": {"model": "big"}}
    wf = Workflow.model_validate(
        {
            "id": "w",
            "name": "W",
            "nodes": [
                {"id": "ans", "kind": "step", "step": "generate_response", "input": {"question": {"value": "q"}}},
                {"id": "think", "kind": "agent", "agent": "a1", "after": ["ans"]},
            ],
        }
    )
    plain = JobRequest.model_validate(
        {"question": "run", "constraints": {"max_tokens": 100}}
    )  # no allowed_models: the default (m1)
    made = run_quote(Resolver(boss), wf, plain, policy)
    assert made is not None
    by = {s.step_id: s for s in made.by_step}
    assert by["ans"].high == pytest.approx(0.001 + 100 * 1e-6)  # one try on the default model
    assert by["think"].high == pytest.approx((3 + 4 + 1) * (0.001 + 10 * 1e-3))  # the agent's own model


def _made(made: Quote | None) -> Quote:
    assert made is not None
    return made
