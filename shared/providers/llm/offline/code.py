"""The offline model's code writer: one fixed, deterministic analysis script for "growth rate" and "chart" asks.

It is a template, not generated code: over a table input ``rows`` it takes the last numeric column in the
rows' order (the SQL writer sorts time series by period), computes the growth from the first to the last
row, the average growth per period and each period's change, and draws the series as ``chart.png``.
"""

from __future__ import annotations

import re

# Questions that ask for computed numbers or a chart rather than a lookup.
WANTS_CODE = re.compile(r"\b(growth|grow|grew|chart|plot|graph|trend)\b", re.I)

ANALYSIS_CODE = """# Offline analysis template: growth of the last numeric column over the rows, and a chart of it.
records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
columns = list(records[0]) if records else []
numeric = [c for c in columns if all(isinstance(r[c], (int, float)) and not isinstance(r[c], bool) for r in records)]
if not numeric:
    raise ValueError("the rows have no numeric column to compute a growth rate from")
value = numeric[-1]
label = next((c for c in columns if c not in numeric), None)
values = [float(r[value]) for r in records]
labels = [str(r[label]) if label else str(i + 1) for i, r in enumerate(records)]
first, last, periods = values[0], values[-1], len(values) - 1
growth = None if first == 0 else round(last / first - 1, 6)
average = None if first <= 0 or last < 0 or periods == 0 else round((last / first) ** (1 / periods) - 1, 6)
changes = [None if a == 0 else round(b / a - 1, 6) for a, b in zip(values, values[1:])]
result = {
    "column": value,
    "from": labels[0],
    "to": labels[-1],
    "first": first,
    "last": last,
    "growth_rate": growth,
    "average_growth_per_period": average,
    "periods": periods,
    "period_changes": changes,
}
print(f"{value}: {first:g} ({labels[0]}) -> {last:g} ({labels[-1]}), growth {growth}")
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(labels, values, marker="o")
ax.set_title(f"{value} by {label or 'row'}")
ax.tick_params(axis="x", labelrotation=45)
fig.tight_layout()
fig.savefig("chart.png", dpi=100)
"""


def wants_code(question: str) -> bool:
    """Whether a question asks for a computation or a chart the analysis template makes."""
    return bool(WANTS_CODE.search(question))
