"""The cost ledger counted from recorded histories, checked against counts written here by hand and by event type.

Each recorded history (tests/replay/histories) is counted twice: as recorded (DTFx events with integer types)
and as the status API shows it (devhost's presentation, which the job view reads); both must agree with an
independent count made here from the raw event types, and with the numbers written out for each job.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.history import present
from shared.runtime.history_counts import count
from shared.runtime.ledger import Ledger, job_ledger, view_cost
from shared.runtime.price_tables import (
    PRICES_DIR,
    STORAGE_PER_EPISODE,
    STORAGE_PER_JOB,
    STORAGE_PER_MESSAGE,
    CostConfig,
    PriceTable,
    load_price_table,
    table_for,
)
from shared.runtime.settings import DEFAULT_MODEL_PRICES, ModelPrice, Settings

HISTORIES = Path(__file__).resolve().parents[1] / "replay" / "histories"
TABLE = load_price_table(PRICES_DIR / "2026-11.json")
GB_SECOND = 0.000026  # the table's Flex On Demand price, written again here
EXECUTION = 0.40 / 1_000_000

# Per recorded job, counted by reading its history: activity attempts, orchestrator episodes, DTS actions.
# completed: plan, s1 (SQL), s2 (RAG), s3 (answer) → 1 start + 4 × 2 = 9 actions, 5 episodes.
# agent_completed: 5 activities (turns and tool calls) → 1 + 10 = 11 actions, 6 episodes.
# python_approved_then_completed: 5 activities, 1 approval timer (created, never fired), 1 answer event
#   → 1 + 10 + 1 = 12 actions, 7 episodes.
# retried_after_rate_limit: 4 activities, a backoff timer that fired → 1 + 8 + 1 = 10 actions, 6 episodes.
# workflow_waiting_at_human (a parallel node: two workflow_part sub-orchestrations, both back; waiting at a
#   human node): 1 activity, 2 sub-orchestrations → 1 + 2 + 4 = 7 actions, 4 episodes.
EXPECTED = {
    "completed": (4, 5, 9),
    "agent_completed": (5, 6, 11),
    "python_approved_then_completed": (5, 7, 12),
    "retried_after_rate_limit": (4, 6, 10),
    "workflow_waiting_at_human": (1, 4, 7),
}


def recorded(name: str) -> list[dict[str, Any]]:
    return list(json.loads((HISTORIES / f"{name}.json").read_text())["history"])


def shown(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as GET /api/jobs/{id} receives it from the status API."""
    return present(history, show_history_output=True, show_input=True)


def config(**changes: Any) -> CostConfig:
    base: dict[str, Any] = {"hosting": "flex_on_demand", "model_prices": DEFAULT_MODEL_PRICES}
    return CostConfig(**(base | changes))


def meter(ledger: Ledger, name: str) -> Any:
    return next(m for m in ledger.by_meter if m.meter == name)


def by_types(history: list[dict[str, Any]]) -> Counter[int]:
    return Counter(int(e["EventType"]) for e in history)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_durable_meters_match_the_hand_count_in_both_history_forms(name: str) -> None:
    history = recorded(name)
    activities, episodes, actions = EXPECTED[name]
    types = by_types(history)
    # Independent count from the raw event types: 0 start, 5/6 task results, 8/9 sub-orchestration results,
    # 11 timers fired, 15 events raised, 12 episodes.
    assert types[5] + types[6] == activities
    assert types[12] == episodes
    assert types[0] + 2 * (types[5] + types[6]) + 2 * (types[8] + types[9]) + types[11] + types[15] == actions
    for form in (history, shown(history)):
        counts = count(form)
        assert (len(counts.calls), counts.episodes, counts.actions) == (activities, episodes, actions)
        dts = job_ledger(form, config(backend="dts_consumption"), TABLE)
        assert meter(dts, "durable.actions").quantity == actions
        storage = job_ledger(form, config(backend="azure_storage"), TABLE)
        transactions = STORAGE_PER_MESSAGE * actions + STORAGE_PER_EPISODE * episodes + STORAGE_PER_JOB
        assert meter(storage, "storage.transactions").quantity == transactions
        assert meter(storage, "flex.executions").quantity == activities + episodes


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_flex_seconds_are_the_activity_times_times_the_memory(name: str) -> None:
    history = recorded(name)
    scheduled = {e["EventId"]: e["Timestamp"] for e in history if e["EventType"] == 4}
    from datetime import datetime

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    seconds = sum(
        (at(e["Timestamp"]) - at(scheduled[e["TaskScheduledId"]])).total_seconds()
        for e in history
        if e["EventType"] in (5, 6)
    )
    ledger = job_ledger(history, config(memory_mb=4096), TABLE)
    gb_s = meter(ledger, "flex.gb_seconds")
    assert gb_s.quantity == pytest.approx(seconds * 4, abs=1e-5)
    assert gb_s.cost == pytest.approx(seconds * 4 * GB_SECOND, abs=1e-9)
    assert meter(ledger, "flex.executions").cost == pytest.approx(sum(EXPECTED[name][:2]) * EXECUTION)


def test_the_executors_usage_is_counted_from_their_results() -> None:
    history = recorded("python_approved_then_completed")
    results = [json.loads(e["Result"]) for e in history if e["EventType"] == 5]
    tokens = sum(r["usage"]["tokens_input"] + r["usage"]["tokens_output"] for r in results)
    sandbox_ms = sum((r["result"] or {}).get("sandbox", {}).get("wall_ms", 0) for r in results)
    ledger = job_ledger(history, config(), TABLE)
    assert meter(ledger, "llm.tokens:offline").quantity == tokens > 0
    assert meter(ledger, "llm.tokens:offline").cost == 0.0  # the offline model's price is 0, and known
    assert meter(ledger, "sandbox.local.seconds").quantity == pytest.approx(sandbox_ms / 1000) and sandbox_ms > 0
    assert meter(ledger, "sandbox.local.seconds").included_in == "flex.gb_seconds"
    rows = [r["result"]["row_count"] for r in results if r["result"] and "rows" in r["result"]]
    assert meter(ledger, "sql.statements").quantity == len(rows) == 1
    assert meter(ledger, "sql.statements").detail["rows_read"] == sum(rows)


def test_a_meter_without_a_price_is_unknown_never_zero() -> None:
    history = recorded("completed")
    ledger = job_ledger(history, config(backend="azure_storage", model_prices={}), TABLE)
    unknown = {u["meter"]: u for u in ledger.unknown}
    # The answer's streamed text was stored too (storage.blob.gb_month has no price in the repo table).
    assert set(unknown) == {"storage.transactions", "llm.tokens:offline", "storage.stored_bytes"}
    assert unknown["storage.transactions"]["quantity"] == 43 and unknown["storage.transactions"]["price"] == "unknown"
    assert meter(ledger, "storage.transactions").cost is None
    assert meter(ledger, "llm.tokens:offline").cost is None
    assert not ledger.complete
    # The total is the sum of what is priced: the Flex meters only.
    flex = meter(ledger, "flex.gb_seconds").cost + meter(ledger, "flex.executions").cost
    assert ledger.total == pytest.approx(flex)
    # Always-ready rates are not in the table: that plan's Flex meters are unknown too.
    ready = job_ledger(history, config(hosting="flex_always_ready"), TABLE)
    assert {"flex.gb_seconds", "flex.executions"} <= {u["meter"] for u in ready.unknown}


def test_each_step_carries_its_own_meters_and_the_orchestration_the_rest() -> None:
    ledger = job_ledger(recorded("completed"), config(backend="dts_consumption"), TABLE)
    steps = {s.step_id: s for s in ledger.by_step}
    assert set(steps) == {"plan", "s1", "s2", "s3", "(orchestration)"}
    assert steps["s1"].meters["durable.actions"] == 2 and steps["(orchestration)"].meters["durable.actions"] == 1
    assert steps["s2"].meters["search.queries"] == 1
    assert all(s.unknown == ["durable.actions"] for k, s in steps.items() if k != "s3")
    assert steps["s3"].unknown == ["durable.actions", "storage.stored_bytes"]  # the streamed answer was stored
    assert sum(s.cost for s in steps.values()) == pytest.approx(ledger.total)


def test_a_priced_model_and_a_priced_tool_are_charged_from_their_settings() -> None:
    history: list[dict[str, Any]] = [
        {
            "EventType": "ExecutionStarted",
            "Timestamp": "2026-11-24T00:00:00Z",
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "call_tool",
            "ScheduledTime": "2026-11-24T00:00:00Z",
            "Timestamp": "2026-11-24T00:00:02Z",
            "Input": {"task_id": "j:a-t1:1", "executor_type": "call_tool", "task": {"tool": "http.weather"}},
            "Result": {"status": "success", "result": {"success": True}, "usage": {}},
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": "generate_response",
            "ScheduledTime": "2026-11-24T00:00:02Z",
            "Timestamp": "2026-11-24T00:00:03Z",
            "Input": {"task_id": "j:s2:1"},
            "Result": {"status": "success", "model_used": "m1", "usage": {"tokens_input": 1000, "tokens_output": 500}},
        },
    ]
    prices = {"m1": ModelPrice(input_per_million=2.0, output_per_million=8.0)}
    ledger = job_ledger(history, config(model_prices=prices, tool_prices={"http": 0.01}), TABLE)
    assert meter(ledger, "llm.tokens:m1").cost == pytest.approx(0.002 + 0.004)
    assert meter(ledger, "tools.calls:http.weather").cost == pytest.approx(0.01)
    unpriced = job_ledger(history, config(model_prices=prices), TABLE)
    assert {
        "meter": "tools.calls:http.weather",
        "quantity": 1,
        "unit": "call",
        "price_key": None,
        "price": "unknown",
    } in (unpriced.unknown)


def test_the_table_in_force_when_the_job_started_prices_it(tmp_path: Path) -> None:
    old = TABLE.model_copy(update={"version": "2026-01", "date": "2026-01-01"})
    new = TABLE.model_copy(update={"version": "2027-01", "date": "2027-01-01"})
    for table in (old, new):
        (tmp_path / f"{table.version}.json").write_text(table.model_dump_json())
    assert table_for("2026-11-24T01:00:00Z", tmp_path).version == "2026-01"
    assert table_for("2027-02-01T00:00:00Z", tmp_path).version == "2027-01"
    assert table_for("2025-01-01T00:00:00Z", tmp_path).version == "2026-01"  # before every table: the oldest
    assert table_for("2026-11-24", PRICES_DIR).version == "2026-11"


def test_every_known_price_in_the_repo_table_names_its_source_and_date() -> None:
    for path in PRICES_DIR.glob("*.json"):
        table = PriceTable.model_validate_json(path.read_text())
        assert table.version == path.stem
        for key, entry in table.prices.items():
            assert entry.source, key
            if entry.price is not None:
                assert entry.date, key


def test_settings_choose_the_backend_and_override_prices(tmp_path: Path) -> None:
    history = shown(recorded("completed"))
    settings = Settings(
        cost_durable_backend="azure_storage",
        cost_hosting="flex_on_demand",
        cost_price_overrides={"storage.transactions": 0.0000004, "storage.blob.gb_month": 0.02},
    )
    cost = view_cost(history, "2026-11-24T01:10:53Z", settings)
    storage = next(m for m in cost["by_meter"] if m["meter"] == "storage.transactions")
    assert storage["cost"] == pytest.approx(43 * 0.0000004)
    assert cost["unknown"] == [] and cost["complete"] is True
    assert cost["price_table"] == {"version": "2026-11", "date": "2026-11-28"}
    broken = Settings(cost_price_table=tmp_path / "missing.json")
    assert view_cost(history, None, broken)["error"].startswith("the price table cannot be read")


def test_the_readme_table_is_the_scripts_output() -> None:
    from scripts.cost_table import table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- cost-table -->\n", 1)[1].split("<!-- /cost-table -->", 1)[0]
    assert shown.strip() == table().strip()
