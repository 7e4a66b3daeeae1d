"""Budgets and run limits: what a run may still spend, checked before every call and handed to the executors.

The job's budget (tokens, estimated cost, priced meters, sandbox seconds), an agent node's own budget on top of
it while the node runs (``scoped``), and a workflow run's limits on tool calls. Pure arithmetic over the run's
usage: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orchestrators.outcomes import JobStop
from orchestrators.run.record import RunRecord
from shared.executors import CALL_TOOL, get_executor
from shared.jobs.contracts import Constraints, ErrorCode, ExecutorOutput
from shared.jobs.costs import CallPrices, Spend, next_call, over_max_cost
from shared.jobs.models import Budget
from shared.jobs.runs import LIMIT_TEXT, RUN_LIMIT_EXCEEDED


def runs_code(kind: str) -> bool:
    """Whether a step kind runs model-written code."""
    spec = get_executor(kind)
    return spec is not None and spec.runs_code


def sandbox_ms(out: ExecutorOutput) -> int:
    """The sandbox time one run_python call reports (0 for any other output)."""
    result = out.result if isinstance(out.result, dict) else {}
    sandbox = result.get("sandbox")
    wall = sandbox.get("wall_ms") if isinstance(sandbox, dict) else None
    return wall if isinstance(wall, int) and wall > 0 else 0


class Budgets:
    """What the run used against its budgets and limits, and the checks before the next call."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        # Sandbox time the job's run_python calls used (their outputs say), for budget.max_sandbox_seconds.
        self._sandbox_ms = 0
        # Tool calls this run made (tool nodes, family tools, run_python), for its RunLimits.max_tool_calls.
        self._tool_calls = 0
        # A workflow's agent node runs under the agent's own per-call limits (the job's allowed models kept).
        self.step_constraints: Constraints | None = None
        # An agent node's own budget, with the run's usage when the node started: (who, budget, tokens, cost).
        self.scoped_budget: tuple[str, Budget, int, float] | None = None
        # The calls this job made and their seconds, for the priced infrastructure meters of budget.max_cost.
        self._spend = Spend()

    @property
    def sandbox_ms(self) -> int:
        """Sandbox milliseconds used (this run's and its finished parts')."""
        return self._sandbox_ms

    @property
    def tool_calls(self) -> int:
        """Tool calls made (this run's and its finished parts')."""
        return self._tool_calls

    @property
    def spend(self) -> Spend:
        """The calls made and their seconds (read-only use: ``count_call`` adds to it)."""
        return self._spend

    @property
    def constraints(self) -> Constraints:
        """The per-call limits in force: an agent node's while it runs, else the job's."""
        return self.step_constraints or Constraints.model_validate(
            self.record.job.request.constraints.model_dump(exclude={"budget"})
        )

    def count_call(self, seconds: float | None) -> None:
        """One call ended: count it, and its seconds when it was scheduled here (None: it was scheduled ahead)."""
        if seconds is not None:
            self._spend.seconds += max(0.0, seconds)
        self._spend.calls += 1

    def count_sandbox(self, out: ExecutorOutput) -> None:
        """Add the sandbox time a call reports."""
        self._sandbox_ms += sandbox_ms(out)

    def add_part_use(self, tool_calls: int, sandbox_ms: int) -> None:
        """Add what a finished part of the run used (its own counts came back in its result)."""
        self._tool_calls += tool_calls
        self._sandbox_ms += sandbox_ms

    @contextmanager
    def scoped(self, who: str, budget: Budget, constraints: Constraints) -> Iterator[None]:
        """An agent node's own limits and budget while it runs, counted from the run's usage now."""
        usage = self.record.state.usage
        self.step_constraints = constraints
        self.scoped_budget = (who, budget, usage.total_tokens, usage.estimated_cost)
        try:
            yield
        finally:
            self.step_constraints = None
            self.scoped_budget = None

    def count_tool_calls(self, executor_type: str, step_id: str | None, calls: int = 1) -> None:
        """Count tool calls against the run's ``max_tool_calls``; stop the run before one that would exceed it."""
        limits = self.record.job.run.limits if self.record.job.run is not None else None
        if limits is None or not (executor_type == CALL_TOOL or runs_code(executor_type)):
            return
        if self._tool_calls + calls > limits.max_tool_calls:
            raise self.limit_reached(
                "max_tool_calls", step_id, f"{self.tool_calls} made, {limits.max_tool_calls} allowed"
            )
        self._tool_calls += calls

    def limit_reached(self, limit: str, step_id: str | None, why: str) -> JobStop:
        """The stop of a run that reached one of its limits (the view names it: error.limit)."""
        share = " (this part's share of the run's limit)" if self.record.part_of_run else ""
        message = f"run limit {limit} reached ({LIMIT_TEXT[limit]}): {why}{share}"
        return JobStop(RUN_LIMIT_EXCEEDED, message, step_id, limit=limit)

    def sandbox_left(self, step_id: str | None) -> dict[str, Any]:
        """The sandbox seconds left of ``budget.max_sandbox_seconds`` for the next run; BUDGET_EXCEEDED when none."""
        budget = self.record.job.request.constraints.budget.max_sandbox_seconds
        if budget is None:
            return {}
        left = round(budget - self._sandbox_ms / 1000, 3)
        if left <= 0:
            raise JobStop(
                ErrorCode.BUDGET_EXCEEDED,
                f"stopped before {step_id or 'the next run'}: the job used {self._sandbox_ms / 1000:g} s of sandbox "
                f"time (failed and timed-out runs included), its budget is {budget:g} s",
                step_id,
            )
        return {"sandbox_seconds_left": left}

    def budgets(self) -> list[tuple[str, Budget, int, float]]:
        """Each budget in force with the tokens and cost used against it: the job's, and the agent node's."""
        usage = self.record.state.usage
        scopes = [("the job", self.record.job.request.constraints.budget, usage.total_tokens, usage.estimated_cost)]
        if self.scoped_budget is not None:
            who, budget, tokens0, cost0 = self.scoped_budget
            scopes.append((who, budget, usage.total_tokens - tokens0, usage.estimated_cost - cost0))
        return scopes

    def budget_left(self) -> dict[str, Any]:
        """What is left of the tightest budget in force, for the executor's own check of its prompt size."""
        left: dict[str, Any] = {}
        for _, budget, tokens, cost in self.budgets():
            if budget.max_total_tokens is not None:
                tokens_left = budget.max_total_tokens - tokens
                left["budget_tokens_left"] = min(tokens_left, left.get("budget_tokens_left", tokens_left))
            if budget.max_estimated_cost is not None:
                cost_left = round(budget.max_estimated_cost - cost, 8)
                left["budget_cost_left"] = min(cost_left, left.get("budget_cost_left", cost_left))
        return self.max_cost_left(left)

    def max_cost_left(self, left: dict[str, Any]) -> dict[str, Any]:
        """``budget.max_cost``'s share for the executor's own check of its prompt (its input tokens, which the
        orchestrator's check before the call cannot know): what is left after every priced meter so far and the
        next call's infrastructure worst case. The tighter of it and ``max_estimated_cost``'s is sent."""
        job = self.record.job
        prices = job.policy.call_prices or CallPrices(table="")
        infra = sum(self._spend.by_meter(prices).values())
        timeout_s = (self.step_constraints or job.request.constraints).timeout_ms / 1000
        upcoming = sum(next_call(prices, timeout_s).values())
        for _, budget, _, cost in self.budgets():
            if budget.max_cost is not None:
                cost_left = round(budget.max_cost - cost - infra - upcoming, 8)
                left["budget_cost_left"] = min(cost_left, left.get("budget_cost_left", cost_left))
        return left

    def check_budget(self, step_id: str | None, uses_llm: bool, model: str | None, call_price: float = 0.0) -> None:
        """Stop before a call whose worst case would exceed the job budget or the running agent's own.

        ``call_price``: what the call itself costs (a priced tool), on top of its tokens.
        """
        reserve = (self.step_constraints or self.record.job.request.constraints).max_tokens if uses_llm else 0
        price = self.record.job.policy.output_price.get(
            model or "", max(self.record.job.policy.output_price.values(), default=0)
        )
        where = step_id or "planning"
        for who, budget, tokens, cost in self.budgets():
            if budget.max_total_tokens is not None and tokens + reserve > budget.max_total_tokens:
                raise JobStop(
                    "BUDGET_EXCEEDED",
                    f"stopped before {where}: {who} used {tokens} tokens, the next call may use up to {reserve} "
                    f"more, {who}'s budget is {budget.max_total_tokens}",
                    step_id,
                )
            next_cost = reserve * price + call_price
            if budget.max_estimated_cost is not None and cost + next_cost > budget.max_estimated_cost:
                raise JobStop(
                    "BUDGET_EXCEEDED",
                    f"stopped before {where}: {who}'s estimated cost {cost:.6f} USD plus up to {next_cost:.6f} "
                    f"USD for the next call exceeds {who}'s budget {budget.max_estimated_cost} USD",
                    step_id,
                )
            if budget.max_cost is not None:
                self.check_max_cost(budget.max_cost, who, where, step_id, cost, model, reserve * price, call_price)

    def check_max_cost(
        self,
        max_cost: float,
        who: str,
        where: str,
        step_id: str | None,
        cost: float,
        model: str | None,
        tokens_cost: float,
        call_price: float,
    ) -> None:
        """budget.max_cost: every priced meter so far plus the next call's worst case (shared/jobs/costs.py)."""
        prices = self.record.job.policy.call_prices or CallPrices(table="")
        spent = {"tokens, tools and sandbox": cost, **self._spend.by_meter(prices)}
        timeout_s = (self.step_constraints or self.record.job.request.constraints).timeout_ms / 1000
        upcoming = next_call(prices, timeout_s)
        if tokens_cost:
            upcoming[f"llm.tokens:{model}" if model else "llm.tokens"] = tokens_cost
        if call_price:
            upcoming["tools.calls"] = call_price
        crossed = over_max_cost(max_cost, spent, upcoming, who, where)
        if crossed is not None:
            raise JobStop("BUDGET_EXCEEDED", crossed[1], step_id)
