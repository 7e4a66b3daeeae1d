"""An ended job's cost kept once (api/job_costs.py): the cost timer sums a terminated job no one looked at, logs
its ``job.cost`` event once, and leaves completed jobs (the orchestrator logged theirs) and parts alone.

The Durable client is a fake over a recorded history (tests/replay/histories/completed.json, shown as the status
API shows it); the summaries go to a SQLite file in the test's directory.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from api.job_costs import record_ended_jobs, remember
from devhost.durable.history import present
from shared.jobs.models import ORCHESTRATOR_NAME
from shared.runtime import telemetry
from shared.runtime.cost_summaries import get_cost_summaries, reset_cost_summaries
from shared.runtime.ledger import view_cost
from shared.runtime.settings import get_settings, reset_settings

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "replay/histories/completed.json").read_text())


@dataclass
class Status:
    instance_id: str
    runtime: str
    name: str = ORCHESTRATOR_NAME
    historyEvents: list[dict[str, Any]] = field(default_factory=list)  # noqa: N815 - the SDK's attribute

    def to_json(self) -> dict[str, Any]:
        return {
            "instanceId": self.instance_id,
            "name": self.name,
            "runtimeStatus": self.runtime,
            "input": RECORDED["input"],
            "createdTime": "2026-11-24T01:10:53Z",
            "customStatus": None,
            "output": None,
        }


@dataclass
class FakeClient:
    statuses: dict[str, Status]
    reads: list[str] = field(default_factory=list)

    async def get_status_by(self, **_: Any) -> list[Status]:
        return [s for s in self.statuses.values() if s.runtime in ("Terminated", "Failed")]

    async def get_status(self, instance_id: str, **_: Any) -> Status | None:
        self.reads.append(instance_id)
        return self.statuses.get(instance_id)


@pytest.fixture(autouse=True)
def summaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ARTIFACT_PATH", str(tmp_path / "artifacts.sqlite3"))
    monkeypatch.setenv("ARTIFACT_STORE", "local")
    reset_settings()
    reset_cost_summaries()
    yield
    reset_cost_summaries()
    reset_settings()


def events(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "job.event", None) == telemetry.JOB_COST_EVENT]


@pytest.mark.parametrize(("runtime", "status"), [("Terminated", "cancelled"), ("Failed", "failed")])
def test_the_timer_sums_a_terminated_or_crashed_job_once_and_logs_its_cost_event(
    caplog: pytest.LogCaptureFixture, runtime: str, status: str
) -> None:
    shown = present(RECORDED["history"], show_history_output=True, show_input=True)
    client = FakeClient(
        {
            "gone": Status("gone", runtime, historyEvents=shown),
            "gone:b1": Status("gone:b1", runtime, historyEvents=shown),  # a part: summed in its run
        }
    )
    caplog.set_level(logging.INFO)
    now = datetime(2026, 11, 24, 2, tzinfo=UTC)
    summed = asyncio.run(record_ended_jobs(client, now=now, lookback=timedelta(days=1)))
    assert summed == 1 and client.reads == ["gone"]
    [event] = events(caplog)
    expected = view_cost(shown, "2026-11-24T01:10:53Z")
    assert event.__dict__["job.id"] == "gone" and event.__dict__["job.status"] == status
    assert event.__dict__["job.cost.total"] == pytest.approx(expected["total"])
    kept = get_cost_summaries(get_settings()).get_many(["gone"])["gone"]
    assert kept.total == pytest.approx(expected["total"]) and kept.unknown == len(expected["unknown"])
    # Seen again (the timer, the view, the list): nothing more is read or logged.
    assert asyncio.run(record_ended_jobs(client, now=now, lookback=timedelta(days=1))) == 0
    remember("gone", client.statuses["gone"].to_json(), expected)
    assert len(events(caplog)) == 1 and client.reads == ["gone"]


def test_a_completed_job_is_kept_without_a_second_event(caplog: pytest.LogCaptureFixture) -> None:
    shown = present(RECORDED["history"], show_history_output=True, show_input=True)
    done = Status("done", "Completed", historyEvents=shown).to_json()
    caplog.set_level(logging.INFO)
    summary = remember("done", done, view_cost(shown, done["createdTime"]))
    assert summary is not None and summary.status == "completed"
    assert events(caplog) == []  # the orchestrator logged it when it returned
    running = {**done, "runtimeStatus": "Running"}
    assert remember("live", running, view_cost(shown, done["createdTime"])) is None
    assert get_cost_summaries(get_settings()).get_many(["done", "live"]).keys() == {"done"}
