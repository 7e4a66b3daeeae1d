"""devhost runs timer triggers: NCRONTAB schedules with seconds, runOnStartup, %SETTING% schedules, TimerRequest."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

from devhost.functions.timers import Schedule, ScheduleError, schedule_of, timer_payload, timer_request
from tests.devhost.hostproc import APPS_DIR, DevHostProcess

T0 = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)  # a Thursday


def nexts(expression: str, start: datetime = T0, count: int = 3) -> list[datetime]:
    sched = Schedule.parse(expression)
    out, moment = [], start
    for _ in range(count):
        moment = sched.next_after(moment)
        out.append(moment)
    return out


def test_six_field_ncrontab_has_seconds_first() -> None:
    assert nexts("*/5 * * * * *") == [T0 + timedelta(seconds=s) for s in (5, 10, 15)]
    assert nexts("0 30 3 * * *", count=2) == [T0 + timedelta(hours=3, minutes=30), T0 + timedelta(days=1, hours=3.5)]
    assert nexts("0 0 9 * * Mon-Fri", count=2) == [T0 + timedelta(hours=9), T0 + timedelta(days=1, hours=9)]
    assert nexts("0 0 0 1 Jan,Jul *", count=2) == [datetime(2026, 7, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)]


def test_day_of_month_and_day_of_week_must_both_match() -> None:
    # NCrontab ANDs the two day fields: the 13th only when it is a Friday (February and March 2026).
    assert nexts("0 0 0 13 * Fri", count=2) == [datetime(2026, 2, 13, tzinfo=UTC), datetime(2026, 3, 13, tzinfo=UTC)]


def test_timespan_schedules_are_intervals() -> None:
    assert nexts("00:00:30", count=2) == [T0 + timedelta(seconds=30), T0 + timedelta(seconds=60)]
    assert nexts("1.00:00:00", count=1) == [T0 + timedelta(days=1)]


@pytest.mark.parametrize("bad", ["* * * * *", "0 0 0 * * * *", "61 * * * * *", "banana", "00:00:00", ""])
def test_bad_schedules_are_refused_with_the_expression(bad: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        Schedule.parse(bad)
    assert repr(bad)[1:-1] in str(exc.value) or "longer than zero" in str(exc.value)


def test_setting_references_resolve_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from devhost.functions.model import FunctionInfo

    fn = FunctionInfo(
        name="tick",
        kind="timer",
        trigger={"type": "timerTrigger", "schedule": "%MY_SCHED%"},
        bindings=[],
        user_function=print,
    )
    monkeypatch.setenv("MY_SCHED", "0 */10 * * * *")
    assert schedule_of(fn).next_after(T0) == T0 + timedelta(minutes=10)
    monkeypatch.delenv("MY_SCHED")
    with pytest.raises(ScheduleError, match="tick.*MY_SCHED"):
        schedule_of(fn)


def test_the_payload_decodes_to_a_timer_request() -> None:
    request = timer_request(timer_payload(past_due=True, last=None, next_run=T0, updated=T0))
    assert isinstance(request, TimerRequest)  # the worker's concrete func.TimerRequest
    assert request.past_due is True
    assert request.schedule_status["Last"].startswith("0001-01-01")
    assert request.schedule_status["Next"].startswith("2026-01-01T00:00:00")
    assert request.schedule == {"AdjustForDST": True}


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_a_timer_runs_on_startup_then_on_its_schedule_with_a_durable_client(tmp_path: Path) -> None:
    out = tmp_path / "ticks.jsonl"
    env = {"TICK_SCHEDULE": "*/1 * * * * *", "TIMER_OUT": str(out)}
    host = DevHostProcess(APPS_DIR / "timer_basic", tmp_path / "data", env=env).start()
    try:
        deadline = time.monotonic() + 60
        while len(_lines(out)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        ticks = _lines(out)
        assert len(ticks) >= 3, host.output()
        assert all(t["type"] == "TimerRequest" for t in ticks)
        # The startup run has no previous occurrence; scheduled runs name the one before.
        assert ticks[0]["last"].startswith("0001-01-01")
        assert not ticks[2]["last"].startswith("0001-01-01")
        assert "tick: timerTrigger" in host.output()
        # Each tick started an orchestration through the client binding; they all complete.
        for tick in ticks[:3]:
            deadline = time.monotonic() + 30
            while True:
                status = host.client.get(
                    f"/runtime/webhooks/durabletask/instances/{tick['instance_id']}",
                    headers={"x-functions-key": host.keys.system} if host.keys else {},
                )
                if status.status_code == 200 and status.json()["runtimeStatus"] == "Completed":
                    break
                assert time.monotonic() < deadline, status.text
                time.sleep(0.05)
            assert status.json()["output"] == {"past_due": tick["past_due"]}
    finally:
        host.stop()


def test_a_bad_schedule_stops_the_start_naming_the_function(tmp_path: Path) -> None:
    env = {"TICK_SCHEDULE": "every minute", "TIMER_OUT": str(tmp_path / "never.jsonl")}
    code, output = DevHostProcess(APPS_DIR / "timer_basic", tmp_path / "data", env=env).run_to_exit()
    assert code == 1
    assert "tick" in output and "every minute" in output
