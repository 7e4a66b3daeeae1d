"""The ``job.cost`` event: a finished job's ledger from the orchestration's own history (the SDK's objects)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from azure.durable_functions.models.history import HistoryEvent

from shared.runtime import telemetry
from shared.runtime.settings import reset_settings

HISTORY = Path(__file__).resolve().parents[2] / "replay" / "histories" / "completed.json"


def test_the_cost_event_carries_the_ledger_of_the_orchestrations_history(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COST_DURABLE_BACKEND", "dts_consumption")
    monkeypatch.setenv("COST_HOSTING", "flex_on_demand")
    reset_settings()
    try:
        # What the orchestrator sees in context.histories: the SDK's HistoryEvent objects.
        events = [HistoryEvent(**e) for e in json.loads(HISTORY.read_text())["history"]]
        caplog.set_level(logging.INFO, logger="shared.runtime.telemetry")
        cost = telemetry.log_job_cost(job_id="j1", status="completed", events=events, owner="user-1", workflow=None)
    finally:
        reset_settings()
    assert cost is not None
    record = next(r for r in caplog.records if getattr(r, "job.event", None) == telemetry.JOB_COST_EVENT)
    dims = record.__dict__
    assert dims["job.id"] == "j1" and dims["job.owner"] == "user-1" and dims["job.workflow"] == "ask"
    assert dims["job.cost.backend"] == "dts_consumption"
    assert dims["job.cost.unknown"] == "durable.actions,storage.stored_bytes"
    meters = json.loads(dims["job.cost.meters"])
    assert meters["durable.actions"] == {"quantity": 9, "unit": "action", "cost": None}
    assert meters["flex.executions"]["quantity"] == 9  # 4 activities + 5 episodes
    assert dims["job.cost.models"] == "offline"
    assert dims["job.cost.total"] == pytest.approx(cost["total"]) and cost["total"] > 0
    assert dims["job.cost.price_table"] == "2026-11"


def test_no_event_when_the_price_table_cannot_be_read(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COST_PRICE_TABLE", str(tmp_path / "missing.json"))
    reset_settings()
    try:
        caplog.set_level(logging.INFO, logger="shared.runtime.telemetry")
        assert telemetry.log_job_cost(job_id="j2", status="failed", events=None) is None
    finally:
        reset_settings()
    assert not [r for r in caplog.records if getattr(r, "job.event", None) == telemetry.JOB_COST_EVENT]
