"""Estimated cost of an LLM call from the price table in settings (``MODEL_PRICES``).

A model name is looked up exactly (case-insensitive) first, then by its longest listed prefix that
ends at a ``-`` (so the dated snapshot ``gpt-4.1-mini-2025-04-14`` is priced as ``gpt-4.1-mini``).
A model that matches nothing costs 0.0 and logs one warning per name: the step still succeeds, and
the warning says which price to add.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.runtime.settings import ModelPrice

logger = logging.getLogger(__name__)

_warned: set[str] = set()


def find_price(model: str, prices: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The price entry that applies to ``model``, or None."""
    lowered = {name.lower(): price for name, price in prices.items()}
    name = model.strip().lower()
    if name in lowered:
        return lowered[name]
    best: str | None = None
    for candidate in lowered:
        if name.startswith(candidate + "-") and (best is None or len(candidate) > len(best)):
            best = candidate
    return lowered[best] if best is not None else None


def estimate_cost(model: str, tokens_in: int, tokens_out: int, prices: Mapping[str, ModelPrice]) -> float:
    """US dollars for ``tokens_in`` input and ``tokens_out`` output tokens of ``model`` (0.0 if unpriced)."""
    if tokens_in < 0 or tokens_out < 0:
        raise ValueError("token counts cannot be negative")
    price = find_price(model, prices)
    if price is None:
        if model not in _warned:
            _warned.add(model)
            logger.warning("no price for model %r in MODEL_PRICES; its cost is counted as 0", model)
        return 0.0
    cost = (tokens_in * price.input_per_million + tokens_out * price.output_per_million) / 1_000_000
    return round(cost, 8)


def tool_price(tool: str, prices: Mapping[str, float]) -> float | None:
    """USD per call of a family tool (TOOL_PRICES): its own name first, then its longest ``.``-prefix; else None."""
    if tool in prices:
        return prices[tool]
    parts = tool.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in prices:
            return prices[prefix]
    return None


def tool_prices(tools: list[str], prices: Mapping[str, float]) -> dict[str, float]:
    """USD per call of each priced tool among ``tools`` (what a job's policy carries for its budget check)."""
    return {tool: price for tool in tools if (price := tool_price(tool, prices))}
