"""What each executor call costs beyond its tokens, fixed at submit: the job's ``budget.max_cost`` check.

The API resolves these prices once from the price table in force (shared/runtime/ledger.py) and puts them in
the job's input, so a job keeps the prices it started with and the orchestrator reads no file or setting.
Only priced meters count: a meter whose price is unknown cannot be budgeted (docs/costs.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CallPrices(BaseModel):
    """USD per executor call and per second of a call, by meter, from one price table version."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(max_length=40)
    # Meter -> USD per activity call (the backend's actions or transactions, the Flex executions).
    per_call: dict[str, float] = Field(default_factory=dict, max_length=16)
    # Meter -> USD per second of activity time (Flex GB-seconds at the instance memory).
    per_second: dict[str, float] = Field(default_factory=dict, max_length=16)


class Spend(BaseModel):
    """The calls a job made and their seconds (orchestration time, replay-safe), for its priced meters."""

    calls: int = 0
    seconds: float = 0.0

    def by_meter(self, prices: CallPrices) -> dict[str, float]:
        """USD so far per priced meter."""
        spent = {meter: self.calls * price for meter, price in prices.per_call.items()}
        for meter, price in prices.per_second.items():
            spent[meter] = spent.get(meter, 0.0) + self.seconds * price
        return spent


def next_call(prices: CallPrices, worst_seconds: float) -> dict[str, float]:
    """USD the next call may cost per priced meter, at most (its timeout as its time)."""
    cost = dict(prices.per_call)
    for meter, price in prices.per_second.items():
        cost[meter] = cost.get(meter, 0.0) + worst_seconds * price
    return cost


def over_max_cost(
    max_cost: float, spent: dict[str, float], upcoming: dict[str, float], who: str, where: str
) -> tuple[str, str] | None:
    """``(meter, message)`` when what was spent plus the next call's worst case exceeds ``max_cost``; else None.

    The meter named is the one the next call would spend most on.
    """
    total, more = sum(spent.values()), sum(upcoming.values())
    if total + more <= max_cost:
        return None
    meter = max(upcoming, key=lambda name: (upcoming[name], name)) if upcoming else "cost"
    parts = ", ".join(f"{name} {value:.6f}" for name, value in sorted(upcoming.items()) if value > 0)
    message = (
        f"stopped before {where}: {who} spent {total:.6f} USD, the next call may cost up to {more:.6f} USD "
        f"({parts}); {who}'s budget max_cost is {max_cost:g} USD; the meter that crosses it: {meter}"
    )
    return meter, message
