"""Print the README's table: the main job's ledger (a recorded history) on each Durable backend and Flex mode.

Usage: ``.venv/bin/python -m scripts.cost_table [history.json]`` (default: tests/replay/histories/completed.json,
the mixed SQL + documents question on the offline model). tests/runtime/test_ledger.py checks that README.md
holds exactly this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from shared.runtime.ledger import Ledger, job_ledger
from shared.runtime.price_tables import Backend, CostConfig, Hosting, table_for
from shared.runtime.settings import DEFAULT_MODEL_PRICES

REPO = Path(__file__).resolve().parents[1]
MAIN_JOB = REPO / "tests" / "replay" / "histories" / "completed.json"
BACKENDS: tuple[tuple[Backend, str], ...] = (
    ("azure_storage", "Azure Storage"),
    ("dts_consumption", "Durable Task Scheduler, Consumption"),
    ("dts_dedicated", "Durable Task Scheduler, Dedicated"),
)
HOSTING: tuple[tuple[Hosting, str], ...] = (
    ("flex_on_demand", "Flex On Demand"),
    ("flex_always_ready", "Flex Always Ready"),
)


def _cell(ledger: Ledger, meter: str) -> str:
    found = next((m for m in ledger.by_meter if m.meter == meter), None)
    if found is None:
        return "—"
    quantity = f"{found.quantity:g}"
    return f"{quantity} (${found.cost:.7f})" if found.cost is not None else f"{quantity} (price unknown)"


def table(path: Path = MAIN_JOB) -> str:
    """The markdown table of one recorded history's ledger on every backend × Flex mode."""
    recorded = json.loads(path.read_text(encoding="utf-8"))
    history = recorded["history"]
    started = next((e.get("Timestamp") for e in history if e.get("EventType") == 0), None)
    prices = table_for(started)
    lines = [
        "| backend | hosting | Durable meter | Flex GB-s (2048 MB) | Flex executions | tokens (offline model) "
        "| priced part | price unknown |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend, backend_name in BACKENDS:
        for hosting, hosting_name in HOSTING:
            ledger = job_ledger(
                history, CostConfig(backend=backend, hosting=hosting, model_prices=DEFAULT_MODEL_PRICES), prices
            )
            durable = "storage.transactions" if backend == "azure_storage" else "durable.actions"
            unknown = ", ".join(u["meter"] for u in ledger.unknown) or "none"
            lines.append(
                f"| {backend_name} | {hosting_name} | {durable} {_cell(ledger, durable)} "
                f"| {_cell(ledger, 'flex.gb_seconds')} | {_cell(ledger, 'flex.executions')} "
                f"| {_cell(ledger, 'llm.tokens:offline')} | ${ledger.total:.7f} | {unknown} |"
            )
    tokens = next(m for m in ledger.by_meter if m.meter == "llm.tokens:offline").detail
    mini = DEFAULT_MODEL_PRICES["gpt-4.1-mini"]
    on_mini = (
        tokens["tokens_input"] * mini.input_per_million + tokens["tokens_output"] * mini.output_per_million
    ) / 1e6
    return "\n".join(lines) + (
        f"\n\nPrices: `shared/runtime/prices/{prices.version}.json` ({prices.date}). The same "
        f"{tokens['tokens_input']:.0f} input and {tokens['tokens_output']:.0f} output tokens on gpt-4.1-mini "
        f"(MODEL_PRICES list price) would cost ${on_mini:.6f}.\n"
    )


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else MAIN_JOB), end="")
