"""A workflow walk's run limits: node executions counted here, shares passed down to parts, their use added back.

``RunLimits`` bound the total work of a run (node executions, tool calls, parts alive, depth, width); a part gets
an equal share of what is left, and of the job's budget, and reports what it used when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrators.outcomes import JobStop
from orchestrators.run.core import RunCore
from shared.jobs.contracts import ErrorCode
from shared.jobs.costs import CallPrices
from shared.jobs.models import Budget
from shared.jobs.runs import RUN_LIMIT_EXCEEDED, PartResult, RunLimits


class WalkLimits:
    """What a walk (and the parts it started) may still do under the run's limits."""

    def __init__(self, run: RunCore, limits: RunLimits | None) -> None:
        self.run = run
        # The run's total-work budget (a part: its share); None for a run started before runs had limits.
        self.limits = limits
        self.node_runs = 0  # node executions here and in the parts this walk started

    def count_node(self, node_id: str) -> None:
        """Count one node execution; stop the run before one that would exceed ``max_node_runs``."""
        if self.limits is None:
            return
        if self.node_runs >= self.limits.max_node_runs:
            why = f"{self.node_runs} nodes ran, {self.limits.max_node_runs} allowed; {node_id!r} would be one more"
            raise self.run.budgets.limit_reached("max_node_runs", node_id, why)
        self.node_runs += 1

    def shares(self, node_id: str, parts: int) -> RunLimits | None:
        """What each of ``parts`` sub-orchestrations started together may use: an equal share of what is left.

        Each part may use at most its share of the node executions and tool calls left, and of the parts that
        may be alive below this one; it is one level deeper. A parallel node wider than the limit, or parts the
        limits cannot hold at all, stop the run here.
        """
        limits = self.limits
        if limits is None:
            return None
        if parts > limits.max_parallel_width:
            why = f"{node_id!r} starts {parts} branches, {limits.max_parallel_width} allowed"
            raise self.run.budgets.limit_reached("max_parallel_width", node_id, why)
        if limits.max_depth < 1:
            raise self.run.budgets.limit_reached(
                "max_depth", node_id, f"{node_id!r} would start a part one level too deep"
            )
        if parts > limits.max_parts_alive:
            why = f"{node_id!r} would start {parts} more, {limits.max_parts_alive} may be alive below here"
            raise self.run.budgets.limit_reached("max_parts_alive", node_id, why)
        nodes_left = limits.max_node_runs - self.node_runs
        if nodes_left < parts:
            why = f"{self.node_runs} nodes ran, {limits.max_node_runs} allowed; {node_id!r} starts {parts} parts"
            raise self.run.budgets.limit_reached("max_node_runs", node_id, why)
        tools_left = max(0, limits.max_tool_calls - self.run.budgets.tool_calls)
        return RunLimits(
            max_node_runs=nodes_left // parts,
            max_parts_alive=(limits.max_parts_alive - parts) // parts,
            max_parallel_width=limits.max_parallel_width,
            max_depth=limits.max_depth - 1,
            max_tool_calls=tools_left // parts,
        )

    def budget_share(self, node_id: str, parts: int) -> Budget | None:
        """Each part's equal share of what is left of the job's token, cost and sandbox budget (runs with limits).

        A part counts its own use from zero, so without a share parts started together could each spend the
        whole budget. None: a run started before runs had limits (its parts keep the job's budget, as they began).
        """
        if self.limits is None:
            return None
        run, budget = self.run, self.run.job.request.constraints.budget
        usage = run.state.usage
        share: dict[str, Any] = {}
        if budget.max_total_tokens is not None:
            left = budget.max_total_tokens - usage.total_tokens
            if left < parts:
                raise JobStop(
                    ErrorCode.BUDGET_EXCEEDED,
                    f"stopped before {node_id}: the job used {usage.total_tokens} of its {budget.max_total_tokens} "
                    f"tokens, too few left for {parts} part(s)",
                    node_id,
                )
            share["max_total_tokens"] = left // parts
        if budget.max_estimated_cost is not None:
            share["max_estimated_cost"] = max(0.0, round((budget.max_estimated_cost - usage.estimated_cost) / parts, 8))
        if budget.max_cost is not None:  # every priced meter (shared/jobs/costs.py), shared as the rest
            prices = run.job.policy.call_prices or CallPrices(table="")
            spent = usage.estimated_cost + sum(run.budgets.spend.by_meter(prices).values())
            share["max_cost"] = max(0.0, round((budget.max_cost - spent) / parts, 8))
        if budget.max_sandbox_seconds is not None:
            run.budgets.sandbox_left(node_id)  # BUDGET_EXCEEDED when none is left
            left_s = budget.max_sandbox_seconds - run.budgets.sandbox_ms / 1000
            share["max_sandbox_seconds"] = max(0.001, round(left_s / parts, 3))
        return Budget.model_validate(share)

    def used_by(self, node_id: str, results: list[PartResult], nodes: Mapping[str, Any]) -> None:
        """Add what finished parts used to this walk's counts; a part that reached a limit stops the whole run."""
        for part in results:
            self.node_runs += part.node_runs
            self.run.budgets.add_part_use(part.tool_calls, part.sandbox_ms)
        for part in results:
            error = part.error or {}
            if error.get("code") == RUN_LIMIT_EXCEEDED:
                at = error.get("step_id")
                step_id = at if isinstance(at, str) and at in nodes else node_id
                raise JobStop(RUN_LIMIT_EXCEEDED, str(error.get("message", "")), step_id, limit=error.get("limit"))
