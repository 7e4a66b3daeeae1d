"""Built-in function tools for analytics: arithmetic a model should not do in its head.

Percentages are returned as percent numbers (12.5 means 12.5 %) and every number is rounded to 12
significant digits, so binary floating-point noise (0.30000000000000004) does not reach the answer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import Field

from shared.jobs.contracts import ErrorCode
from shared.tools.base import ToolFailure
from shared.tools.function import function_tool

# Finite numbers only: NaN or infinity from a model is a mistake, not a value.
Number = Annotated[float, Field(allow_inf_nan=False)]
MAX_VALUES = 10_000


def _round(value: float) -> float:
    """Twelve significant digits; a result too large for a float is the caller's bad input."""
    if not math.isfinite(value):
        raise ToolFailure(ErrorCode.INVALID_INPUT, "the result is too large to represent; check the inputs")
    return float(f"{value:.12g}")


def _guarded(compute: Callable[[], float]) -> float:
    try:
        return _round(compute())
    except (OverflowError, ZeroDivisionError) as exc:
        raise ToolFailure(ErrorCode.INVALID_INPUT, "the result is too large to represent; check the inputs") from exc


def _percent(old: float, new: float) -> float | None:
    # Relative to |old| so that a rise from -50 to -25 reads as +50 %, the usual business convention.
    return None if old == 0 else _guarded(lambda: (new - old) / abs(old) * 100)


@function_tool(name="percent_change", timeout_s=5.0)
def percent_change(
    old: Annotated[Number, Field(description="the earlier (reference) value")],
    new: Annotated[Number, Field(description="the later value")],
) -> dict[str, Any]:
    """Percent change from old to new (relative to |old|), and the absolute difference."""
    change = _percent(old, new)
    if change is None:
        raise ToolFailure(ErrorCode.INVALID_INPUT, "a percent change from 0 is undefined; report the absolute change")
    return {"old": old, "new": new, "absolute_change": _guarded(lambda: new - old), "percent_change": change}


@function_tool(name="growth_rate", timeout_s=5.0)
def growth_rate(
    values: Annotated[
        list[Number],
        Field(min_length=2, max_length=MAX_VALUES, description="the series in time order, oldest first"),
    ],
    periods: Annotated[
        int | None,
        Field(
            ge=1,
            le=100_000,
            description="periods between the first and the last value (default: one per step of the series),"
            " e.g. 5 for values of 2019 and 2024 given as a two-element series",
        ),
    ] = None,
) -> dict[str, Any]:
    """Compound growth rate per period (CAGR) of a series, its total change and each step's percent change."""
    first, last = values[0], values[-1]
    span = periods or len(values) - 1
    steps = [_percent(a, b) for a, b in zip(values, values[1:], strict=False)]
    result: dict[str, Any] = {
        "first": first,
        "last": last,
        "periods": span,
        "total_percent_change": _percent(first, last),
        "compound_growth_percent_per_period": None,
        "step_percent_changes": steps if len(steps) <= 1000 else None,
    }
    if first > 0 and last >= 0:
        result["compound_growth_percent_per_period"] = _guarded(lambda: ((last / first) ** (1 / span) - 1) * 100)
    else:
        result["note"] = "compound growth is undefined unless the first value is positive and the last is not negative"
    if first == 0:
        result["note"] = "percent changes from 0 are undefined (null)"
    return result


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    # "inclusive": the quartiles of the data as given (a population), as spreadsheets' QUARTILE.INC computes them.
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@function_tool(name="summary_statistics", timeout_s=5.0)
def summary_statistics(
    values: Annotated[list[Number], Field(min_length=1, max_length=MAX_VALUES, description="the numbers")],
) -> dict[str, Any]:
    """Count, sum, mean, median, quartiles, min, max and standard deviations of a list of numbers."""
    q1, median, q3 = _quartiles(values)
    many = len(values) > 1
    return {
        "count": len(values),
        "sum": _guarded(lambda: math.fsum(values)),
        "mean": _guarded(lambda: statistics.fmean(values)),
        "median": _round(median),
        "q1": _round(q1),
        "q3": _round(q3),
        "min": min(values),
        "max": max(values),
        # Sample standard deviation (n - 1), as most reports mean it; null for a single value.
        "stdev": _guarded(lambda: statistics.stdev(values)) if many else None,
        "population_stdev": _guarded(lambda: statistics.pstdev(values)),
    }
