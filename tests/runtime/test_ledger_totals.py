"""The ledger's money totals against a count written differently: straight from the raw recorded events.

For a planned job, an agent job, a workflow with a parallel node and a job with a Python step (each a recorded
history in tests/replay/histories), every meter gets a price here, so the ledger's ``total`` must be exactly
what this test adds up by walking the raw DTFx events once (integer event types, JSON payloads), without the
ledger's own counting code. It also checks the stored bytes (the Python step's artifact, the answer's streamed
text) and that the by-step costs sum to the total.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shared.executors import executor_types, spec_of
from shared.runtime.ledger import STREAMED_TEXT, job_ledger
from shared.runtime.price_tables import PRICES_DIR, CostConfig, load_price_table
from shared.runtime.settings import ModelPrice

HISTORIES = Path(__file__).resolve().parents[1] / "replay" / "histories"
# Prices chosen here for every meter (not the repo's), so no meter is unknown and each one moves the total.
PRICES = {
    "dts.consumption.actions": 0.001,
    "storage.transactions": 0.0001,
    "flex.on_demand.gb_seconds": 0.00002,
    "flex.on_demand.executions": 0.0000005,
    "storage.blob.gb_month": 0.5,
}
TOKEN_IN, TOKEN_OUT = 3.0, 11.0  # per million, for the offline model
TABLE = load_price_table(PRICES_DIR / "2026-11.json").with_overrides(PRICES)
MEMORY_GB = 2.0
JOBS = {
    "completed": "planned",
    "agent_completed": "agent",
    "workflow_waiting_at_human": "workflow with a parallel node",
    "python_approved_then_completed": "a Python step",
}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def independent_total(history: list[dict[str, Any]], backend: str) -> tuple[float, dict[str, float]]:
    """Walk the raw events once and price each as it comes (no helper of the ledger)."""
    money = 0.0
    seen = {"actions": 0.0, "gb_s": 0.0, "executions": 0.0, "tokens": 0.0, "byte_months": 0.0}
    scheduled: dict[int, dict[str, Any]] = {}
    messages = 0
    episodes = 0
    for e in history:
        kind = e["EventType"]
        if kind == 0:  # ExecutionStarted: 1 action, 1 message
            messages += 1
        elif kind == 12:  # OrchestratorStarted: one episode (an execution)
            episodes += 1
        elif kind == 4:  # TaskScheduled
            scheduled[e["EventId"]] = e
        elif kind in (5, 6):  # TaskCompleted / TaskFailed: the activity ran
            source = scheduled[e["TaskScheduledId"]]
            messages += 2
            seen["executions"] += 1
            seconds = (_at(e["Timestamp"]) - _at(source["Timestamp"])).total_seconds()
            seen["gb_s"] += seconds * MEMORY_GB
            result = _json(e.get("Result")) or {}
            usage = result.get("usage") or {}
            if result.get("model_used") == "offline":
                tin, tout = usage.get("tokens_input", 0), usage.get("tokens_output", 0)
                seen["tokens"] += tin + tout
                money += (tin * TOKEN_IN + tout * TOKEN_OUT) / 1e6
            body = result.get("result") or {}
            if source["Name"] == "run_python":
                seen["byte_months"] += sum(f["size"] for f in body.get("files") or [])
            if source["Name"] == "generate_response" and isinstance(body.get("answer"), str):
                seen["byte_months"] += len(body["answer"].encode()) * 600 / (30 * 86400)
        elif kind in (8, 9):  # a sub-orchestration came back: started + result in the parent
            messages += 2
        elif kind in (11, 15):  # TimerFired, EventRaised
            messages += 1
    seen["actions"] = messages
    seen["executions"] += episodes
    money += seen["gb_s"] * PRICES["flex.on_demand.gb_seconds"]
    money += seen["executions"] * PRICES["flex.on_demand.executions"]
    money += seen["byte_months"] / 2**30 * PRICES["storage.blob.gb_month"]
    if backend == "dts_consumption":
        money += messages * PRICES["dts.consumption.actions"]
    else:
        transactions = 3 * messages + 3 * episodes + 1
        money += transactions * PRICES["storage.transactions"]
    return money, seen


@pytest.mark.parametrize("backend", ["dts_consumption", "azure_storage"])
@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_total_equals_an_independent_count_from_the_raw_events(name: str, backend: str) -> None:
    history = list(json.loads((HISTORIES / f"{name}.json").read_text())["history"])
    expected, seen = independent_total(history, backend)
    config = CostConfig(
        backend=backend,  # type: ignore[arg-type]
        hosting="flex_on_demand",
        memory_mb=int(MEMORY_GB * 1024),
        model_prices={"offline": ModelPrice(input_per_million=TOKEN_IN, output_per_million=TOKEN_OUT)},
    )
    ledger = job_ledger(history, config, TABLE)
    assert ledger.unknown == [] and ledger.complete, JOBS[name]
    assert ledger.total == pytest.approx(expected, abs=1e-9), JOBS[name]
    assert sum(s.cost for s in ledger.by_step) == pytest.approx(ledger.total, abs=1e-9)
    meters = {m.meter: m for m in ledger.by_meter}
    assert meters["flex.gb_seconds"].quantity == pytest.approx(seen["gb_s"], abs=1e-5)
    assert meters["flex.executions"].quantity == seen["executions"]
    if seen["tokens"]:
        assert meters["llm.tokens:offline"].quantity == seen["tokens"]
    if seen["byte_months"]:
        assert meters["storage.stored_bytes"].quantity == pytest.approx(seen["byte_months"], abs=1e-5)
    else:
        assert "storage.stored_bytes" not in meters


def test_the_python_steps_artifact_bytes_are_stored_bytes() -> None:
    history = list(json.loads((HISTORIES / "python_approved_then_completed.json").read_text())["history"])
    ledger = job_ledger(history, CostConfig(hosting="flex_on_demand"), load_price_table(PRICES_DIR / "2026-11.json"))
    stored = next(m for m in ledger.by_meter if m.meter == "storage.stored_bytes")
    assert stored.detail["artifact_bytes"] == 33851 and stored.detail["artifacts"] == 1  # chart.png, as recorded
    assert stored.detail["streamed_text_bytes"] > 0  # the answer
    # The repo's table has no blob price: the quantity is shown, with "price unknown", never as 0.
    assert stored.cost is None
    assert {"meter": "storage.stored_bytes", "price": "unknown"}.items() <= next(
        u for u in ledger.unknown if u["meter"] == "storage.stored_bytes"
    ).items()


def test_the_streamed_text_activities_are_the_registrys_streaming_executors() -> None:
    streaming = {kind for kind in executor_types() if spec_of(kind).streams}
    assert streaming == set(STREAMED_TEXT)
