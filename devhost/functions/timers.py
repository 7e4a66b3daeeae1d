"""Timer triggers: run ``@app.timer_trigger`` functions on their schedule, as the Functions host does.

Schedules are NCRONTAB expressions with seconds (``{second} {minute} {hour} {day} {month}
{day-of-week}``; day of month and day of week must both match, as in NCrontab) or, as on App Service
plans, a TimeSpan ``[d.]hh:mm:ss`` interval. A ``%NAME%`` schedule reads the app setting NAME. Times
are UTC unless ``WEBSITE_TIME_ZONE`` names an IANA zone. ``runOnStartup`` runs the function once
when the host starts; ``useMonitor`` is ignored (nothing is persisted between runs of the host: an
occurrence missed while the host was down is not made up). Runs of one function never overlap: the
next occurrence after a run's start fires when that run ends, past due if it ended too late.

The function receives a ``func.TimerRequest`` decoded by the library's converter from the JSON the
host sends (``Schedule``, ``ScheduleStatus``, ``IsPastDue``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from devhost.functions.model import FunctionInfo, LoadedApp
from devhost.functions.triggers import Host, TriggerLoops

log = logging.getLogger("devhost.timers")

# An occurrence that starts this much after its scheduled time is past due.
PAST_DUE_AFTER_S = 1.0
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2})$")
_SETTING = re.compile(r"^%([^%]+)%$")
_MIN_TIME = "0001-01-01T00:00:00"


class ScheduleError(ValueError):
    """A timer schedule the host cannot run; the message names the function and the expression."""


@dataclass(frozen=True)
class Schedule:
    """A parsed timer schedule: the next occurrence after a moment."""

    expression: str
    zone: tzinfo
    interval: timedelta | None = None

    @classmethod
    def parse(cls, expression: str, zone: tzinfo = UTC) -> Schedule:
        """Parse an NCRONTAB (6 fields) or TimeSpan schedule; ScheduleError when it is neither."""
        text = expression.strip()
        span = _TIMESPAN.fullmatch(text)
        if span:
            days, hours, minutes, seconds = (int(g or 0) for g in span.groups())
            interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
            if interval <= timedelta(0):
                raise ScheduleError(f"the TimeSpan schedule '{expression}' must be longer than zero")
            return cls(text, zone, interval)
        fields = text.split()
        if len(fields) != 6:
            raise ScheduleError(
                f"'{expression}' is not an NCRONTAB expression with six fields "
                "({second} {minute} {hour} {day} {month} {day-of-week}) nor a TimeSpan like 00:05:00"
            )
        try:
            croniter(text, datetime.now(zone), second_at_beginning=True, day_or=False).get_next(datetime)
        except (ValueError, KeyError) as exc:  # croniter's errors are ValueErrors
            raise ScheduleError(f"'{expression}' is not a valid NCRONTAB expression: {exc}") from None
        return cls(text, zone)

    def next_after(self, moment: datetime) -> datetime:
        """The first occurrence strictly after ``moment`` (timezone-aware, in UTC)."""
        if self.interval is not None:
            return moment + self.interval
        found: datetime = croniter(
            self.expression, moment.astimezone(self.zone), second_at_beginning=True, day_or=False
        ).get_next(datetime)
        return found.astimezone(UTC)


def timer_functions(app: LoadedApp) -> list[FunctionInfo]:
    """The app's timer-triggered functions."""
    return app.by_kind("timer")


def host_zone() -> tzinfo:
    """The zone schedules run in: WEBSITE_TIME_ZONE (an IANA name) or UTC."""
    name = os.environ.get("WEBSITE_TIME_ZONE", "").strip()
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("WEBSITE_TIME_ZONE '%s' is not a known IANA time zone; timer schedules run in UTC.", name)
        return UTC


def schedule_of(fn: FunctionInfo, zone: tzinfo = UTC) -> Schedule:
    """The function's schedule, with ``%NAME%`` app-setting references resolved."""
    raw = fn.trigger.get("schedule")
    if not isinstance(raw, str) or not raw.strip():
        raise ScheduleError(f"Function '{fn.name}': the timer trigger has no schedule.")
    setting = _SETTING.fullmatch(raw.strip())
    text = raw
    if setting:
        value = os.environ.get(setting.group(1))
        if not value:
            raise ScheduleError(
                f"Function '{fn.name}': the schedule refers to app setting '{setting.group(1)}', which is not set."
            )
        text = value
    try:
        return Schedule.parse(text, zone)
    except ScheduleError as exc:
        raise ScheduleError(f"Function '{fn.name}': {exc}") from None


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"


def timer_payload(*, past_due: bool, last: datetime | None, next_run: datetime, updated: datetime) -> str:
    """The JSON the host hands the worker for a timer trigger (the library's TimerRequestConverter reads it)."""
    return json.dumps(
        {
            "Schedule": {"AdjustForDST": True},
            "ScheduleStatus": {
                "Last": _utc_text(last) if last else _MIN_TIME,
                "Next": _utc_text(next_run),
                "LastUpdated": _utc_text(updated),
            },
            "IsPastDue": past_due,
        }
    )


def timer_request(payload: str) -> Any:
    """Decode the payload into ``func.TimerRequest`` exactly as the worker does."""
    from azure.functions.meta import Datum  # noqa: PLC0415 - keep the devhost importable without side effects
    from azure.functions.timer import TimerRequestConverter  # noqa: PLC0415

    return TimerRequestConverter.decode(Datum(payload, "json"), trigger_metadata={})


class TimerTriggers(TriggerLoops):
    """Runs every timer-triggered function of the app on its schedule until stopped (a run in progress is
    cancelled: ``stop`` gives no grace by default)."""

    def __init__(self, host: Host, *, clock: Callable[[], datetime] | None = None) -> None:
        """Check every schedule now: a bad one is reported at start, not when it would fire."""
        super().__init__(host, log)
        self._clock = clock or (lambda: datetime.now(UTC))
        zone = host_zone()
        self.schedules: dict[str, tuple[FunctionInfo, Schedule]] = {}
        for fn in timer_functions(host.app):
            self.schedules[fn.name] = (fn, schedule_of(fn, zone))
        self.runs = dict.fromkeys(self.schedules, 0)

    def describe(self) -> list[str]:
        """One line per timer function: its schedule and next occurrence."""
        now = self._clock()
        return [
            f"{name}: timerTrigger '{sched.expression}', next {sched.next_after(now).isoformat()}"
            for name, (_, sched) in self.schedules.items()
        ]

    def start(self) -> None:
        """Start one loop per timer function (on the running event loop)."""
        for name, (fn, sched) in self.schedules.items():
            startup = bool(fn.trigger.get("runOnStartup"))
            self.spawn(self._loop(fn, sched, startup), f"devhost-timer-{name}")

    async def _loop(self, fn: FunctionInfo, sched: Schedule, startup: bool) -> None:
        last: datetime | None = None
        due = self._clock()
        if startup:
            await self.fire(fn, past_due=False, last=None, next_run=sched.next_after(due))
        due = sched.next_after(self._clock())
        while True:
            if await self.pause((due - self._clock()).total_seconds()):
                return
            fired = self._clock()
            if fired < due:  # woke early (clock adjustments): wait the rest
                continue
            following = sched.next_after(fired)
            late = (fired - due).total_seconds() > PAST_DUE_AFTER_S
            await self.fire(fn, past_due=late, last=last, next_run=following)
            last = due
            # Runs never overlap: an occurrence that passed while this one ran fires right after it, past due.
            due = following

    async def fire(self, fn: FunctionInfo, *, past_due: bool, last: datetime | None, next_run: datetime) -> bool:
        """Invoke the function once; returns whether it succeeded (failures are logged, never raised)."""
        now = self._clock()
        request = timer_request(timer_payload(past_due=past_due, last=last, next_run=next_run, updated=now))
        return await self.invoke(fn, request, f"Timer fired at {now.isoformat()}")
