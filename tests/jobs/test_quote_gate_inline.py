"""The quote after planning and approval.cost_over, driven inline (orchestrators/quote_gate.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from tests.jobs.test_policy_inline import ANSWER_OK, PLAN, RAG_OK, Script, ok

CALLS = {"table": "t1", "per_call": {"flex.executions": 0.001}, "per_second": {"flex.gb_seconds": 0.0}}
QUOTE_PRICES = {
    "version": "t1",
    "calls": CALLS,
    "unknown_per_call": {"storage.transactions": 9},
    "models": {"m1": {"input": 1e-6, "output": 2e-6}},
}


def job(approval: dict[str, Any] | None = None, quote_prices: dict[str, Any] | None = QUOTE_PRICES) -> dict[str, Any]:
    policy: dict[str, Any] = {"max_attempts_per_model": 2, "first_retry_ms": 1, "output_price": {"m1": 2e-6}}
    policy["call_prices"] = CALLS
    if quote_prices is not None:
        policy["quote_prices"] = quote_prices
    request: dict[str, Any] = {"question": "What about refunds?", "constraints": {"max_tokens": 100}}
    if approval is not None:
        request["approval"] = approval
    return {"job_id": "j1", "request": request, "policy": policy}


def script() -> Script:
    return Script(plan=[ok(PLAN, 0)], consult_rag=[ok(RAG_OK, 0)], generate_response=[ok(ANSWER_OK, 0)])


def test_the_quote_is_in_the_state_after_planning_with_its_price_version() -> None:
    ctx = InlineContext(job(), script())
    result = run_inline(job_orchestrator_body, ctx)
    assert result["status"] == "completed"
    made = ctx.custom_status["quote"]
    assert made["price_table_version"] == "t1" and made["currency"] == "USD"
    assert [s["step_id"] for s in made["by_step"]] == ["(job)", "s1", "s2"]
    # Planning spent its one call (0.001): both ends include it; s1 and s2 at least one call each.
    assert made["low"] == pytest.approx(0.001 + 2 * 0.001)
    # High: 2 attempts × 1 model, 60 s timeout at 0 per s, the answer's tokens at m1's prices.
    assert made["high"] == pytest.approx(0.001 + 2 * 0.001 + 2 * (0.001 + 8000 * 1e-6 + 100 * 2e-6))
    assert made["unknown"] == [
        {"meter": "storage.transactions", "unit": "transaction", "low": 18, "high": 36, "price": "unknown"}
    ]


def test_a_job_without_quote_prices_has_no_quote_and_never_asks() -> None:
    ctx = InlineContext(job({"cost_over": 0.0}, quote_prices=None), script())
    assert run_inline(job_orchestrator_body, ctx)["status"] == "completed"
    assert "quote" not in ctx.custom_status


def test_under_cost_over_the_job_does_not_ask() -> None:
    asked: list[str] = []
    ctx = InlineContext(job({"cost_over": 1.0}), script(), lambda name: asked.append(name))
    assert run_inline(job_orchestrator_body, ctx)["status"] == "completed"
    assert asked == []


def test_over_cost_over_a_person_is_asked_with_the_quote_and_reject_stops_before_any_step() -> None:
    seen: list[dict[str, Any]] = []
    calls = script()
    ctx = InlineContext(job({"cost_over": 0.005}), calls, None)

    def answer(name: str) -> Any:
        waiting = ctx.custom_status["waiting"]
        seen.append(waiting)
        return json.dumps({"answer": "reject", "question_id": waiting["question_id"]})

    ctx._answer = answer
    result = run_inline(job_orchestrator_body, ctx)
    assert result["status"] == "failed" and result["error"]["code"] == "QUOTE_REJECTED"
    assert "approval.cost_over 0.005 USD, and a person rejected it" in result["error"]["message"]
    assert [name for name, _ in calls.calls] == ["plan"]  # nothing past planning ran
    (waiting,) = seen
    assert waiting["kind"] == "cost" and waiting["options"] == ["approve", "reject"]
    assert waiting["details"]["high"] == ctx.custom_status["quote"]["high"] > 0.005
    assert waiting["details"]["cost_over"] == 0.005
    assert (
        "may cost 0.003000 to" in waiting["question"]
        and "meters without a price: storage.transactions" in (waiting["question"])
    )
    assert ctx.custom_status["steps"][0]["state"] == "pending"


def approve(ctx: InlineContext) -> str:
    return json.dumps({"answer": "approve", "question_id": ctx.custom_status["waiting"]["question_id"]})


def test_approve_lets_the_job_run() -> None:
    ctx = InlineContext(job({"cost_over": 0.005}), script(), None)
    ctx._answer = lambda name: approve(ctx)
    assert run_inline(job_orchestrator_body, ctx)["status"] == "completed"


def test_an_expired_wait_stops_the_job_unless_on_timeout_approves() -> None:
    stopped = run_inline(job_orchestrator_body, InlineContext(job({"cost_over": 0.0, "timeout_seconds": 1}), script()))
    assert stopped["error"]["code"] == "WAIT_EXPIRED"  # as an SQL approval with on_timeout=fail
    assert stopped["error"]["message"].startswith("the quote of this job (up to")
    approving = {"cost_over": 0.0, "timeout_seconds": 1, "on_timeout": "approve"}
    assert run_inline(job_orchestrator_body, InlineContext(job(approving), script()))["status"] == "completed"
    rejecting = {"cost_over": 0.0, "timeout_seconds": 1, "on_timeout": "reject"}
    rejected = run_inline(job_orchestrator_body, InlineContext(job(rejecting), script()))
    assert rejected["error"]["code"] == "QUOTE_REJECTED"
    assert "no one approved it in time" in rejected["error"]["message"]


def test_an_agent_job_is_quoted_before_its_first_turn() -> None:
    agent = job({"cost_over": 0.0, "timeout_seconds": 1})
    agent["request"] |= {"mode": "agent", "agent": {"max_turns": 2, "max_tool_calls": 3}}
    calls = Script()
    result = run_inline(job_orchestrator_body, InlineContext(agent, calls))
    assert result["error"]["code"] == "WAIT_EXPIRED" and calls.calls == []


def test_max_cost_covers_the_next_calls_input_tokens_through_the_executors_prompt_check() -> None:
    # budget.max_cost's share is sent to each call: max_cost - spent so far - the call's own infrastructure worst case.
    prices = {"table": "t", "per_call": {"durable.actions": 0.001}, "per_second": {}}
    body = job()
    body["policy"]["call_prices"] = prices
    body["request"]["constraints"]["budget"] = {"max_cost": 0.0034}
    calls = script()
    assert run_inline(job_orchestrator_body, InlineContext(body, calls))["status"] == "completed"
    left = [payload["execution_context"]["budget_cost_left"] for _, payload in calls.calls]
    assert left == pytest.approx([0.0024, 0.0014, 0.0004])


def test_the_executor_refuses_a_prompt_that_would_cross_max_cost_naming_the_token_meter() -> None:
    from shared.executors.common import check_budget
    from shared.jobs.contracts import ExecutorInput, ProviderError
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings

    inp = ExecutorInput(
        task_id="j:s1:1",
        executor_type="generate_response",
        execution_context={"budget_cost_left": 0.0001},  # type: ignore[arg-type]
    )
    clients = Clients(Settings(_env_file=None))  # type: ignore[call-arg]
    with pytest.raises(ProviderError) as raised:
        check_budget(inp, clients, "gpt-4.1", {"sources": "x" * 4000})
    assert raised.value.code == "BUDGET_EXCEEDED"
    assert str(raised.value).endswith("the meter that crosses it: llm.tokens:gpt-4.1")


def _run_of(state: Any) -> Any:
    """A run with only a state, and the record's own ``set_quote`` over it (what ``fitted`` uses)."""
    from types import SimpleNamespace

    from orchestrators.run.record import RunRecord

    record = SimpleNamespace(state=state)
    record.set_quote = lambda quote: RunRecord.set_quote(record, quote)  # type: ignore[arg-type]
    return SimpleNamespace(state=state, record=record)


def test_the_largest_plans_quote_and_its_question_fit_the_custom_status() -> None:
    from orchestrators.quote_gate import fitted
    from shared.jobs.models import STATUS_BUDGET_BYTES, JobState, StepState, Waiting, custom_status
    from shared.jobs.quote import QuoteBounds, QuotePrices, plan_items, quote

    kinds = ["agent", "execute_azure_sql", "run_python", "consult_rag"] * 3
    steps = [(f"s{i}", kind) for i, kind in enumerate(kinds, 1)]
    items = plan_items(steps, lambda k: True, agent_kinds=["agent"], supervised=True)
    made = quote(items, QuoteBounds(models=["m1"]), QuotePrices.model_validate(QUOTE_PRICES), assumptions=["x" * 200])
    # The worst state before quotes: 12 steps with 200-character titles (10.4 KB); then a 1000-character question.
    run = _run_of(JobState(steps=[StepState(id=i, kind=k, title="t" * 200) for i, k in steps]))
    kept = fitted(run, made)
    assert (kept.low, kept.high) == (made.low, made.high) and len(kept.by_step) < len(made.by_step)
    assert kept.by_step[-1].step_id.startswith("(+") and sum(s.high for s in kept.by_step) == pytest.approx(made.high)
    run.state.waiting = Waiting(
        question_id="job-q1",
        kind="cost",
        question="q" * 1000,
        options=["approve", "reject"],
        details={"low": made.low, "high": made.high, "currency": "USD", "cost_over": 0.1},
        asked_at="2026-11-28T00:00:00.000000+00:00",
        expires_at="2026-12-01T00:00:00.000000+00:00",
    )
    size = len(json.dumps(custom_status(run.state), separators=(",", ":"), ensure_ascii=False).encode("utf-16-le"))
    assert size <= STATUS_BUDGET_BYTES, size
    # A plan of short titles keeps its whole quote.
    short = _run_of(JobState(steps=[StepState(id=i, kind=k, title="t") for i, k in steps]))
    assert fitted(short, made).by_step == made.by_step


def test_the_quote_is_logged_once_as_the_job_quote_event(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="orchestrators.quote_gate")
    ctx = InlineContext(job(), script())
    run_inline(job_orchestrator_body, ctx)
    (record,) = [r for r in caplog.records if getattr(r, "job.event", None) == "job.quote"]
    made = ctx.custom_status["quote"]
    assert getattr(record, "job.quote.high") == made["high"] and getattr(record, "job.quote.low") == made["low"]
    assert getattr(record, "job.quote.price_table") == "t1"
    assert getattr(record, "job.quote.unknown") == "storage.transactions"


def test_a_money_budget_bounds_a_priced_sandbox_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.executors.run_python as module
    from shared.jobs.contracts import ExecutorInput
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings
    from shared.sandbox.base import SandboxResult

    seen: list[float] = []

    class Sandbox:
        def run(self, request: Any, limits: Any) -> SandboxResult:
            seen.append(limits.wall_seconds)
            return SandboxResult(status="ok", result=1, wall_ms=10)

    settings = Settings(_env_file=None, sandbox_price_per_hour=3.6)  # type: ignore[call-arg]
    clients = Clients(settings)

    def call(cost_left: float) -> Any:
        inp = ExecutorInput(
            task_id="j:s1:1",
            executor_type="run_python",
            task={"question": "one", "code": "result = 1"},
            execution_context={"budget_cost_left": cost_left, "allowed_tools": ["python.run"]},  # type: ignore[arg-type]
        )
        return module.run_python(inp, clients)

    monkeypatch.setattr(module, "build_sandbox", lambda clients, job_id: Sandbox())
    refused = call(0.0)
    assert refused.status == "failed" and refused.error.code == "BUDGET_EXCEEDED" and seen == []
    assert refused.error.message.endswith("the meter that crosses it: sandbox.local.seconds")
    assert call(0.002).status == "success"
    assert seen == [pytest.approx(2.0)]  # 0.002 USD at 3.6 USD an hour: 2 s of sandbox time at most
