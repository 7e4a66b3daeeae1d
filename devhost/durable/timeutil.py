"""Time helpers for history timestamps, status times and the SDK's timestamp parser.

History timestamps use ``yyyy-MM-ddTHH:mm:ss.ffffffZ`` (UTC); status times drop the fraction.
``install_fast_timestamp_parser`` is a host-level acceleration: the SDK parses every history
``Timestamp`` with ``dateutil.parser.parse`` (about 30 µs each, most of the replay cost). The
replacement parses the exact format the devhost writes with ``datetime.fromisoformat`` and
returns the same value dateutil would (same instant, ``tzutc()`` tzinfo); anything else falls back
to dateutil.
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_FAST_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{6})?Z")
_installed = False


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


# (whole second, its "%Y-%m-%dT%H:%M:%S" text): consecutive calls mostly fall in the same second.
_second_text: tuple[float, str] = (math.nan, "")


def _split_epoch(ts: float) -> tuple[float, int]:
    """(whole seconds, microseconds) exactly as ``datetime.fromtimestamp`` rounds (half to even)."""
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        return whole + 1.0, micros - 1_000_000
    if micros < 0:
        return whole - 1.0, micros + 1_000_000
    return whole, micros


def _second_prefix(whole: float) -> str:
    global _second_text
    cached = _second_text
    if cached[0] == whole:
        return cached[1]
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    _second_text = (whole, text)
    return text


def epoch_to_history(ts: float) -> str:
    """Format an epoch time as a history timestamp (microseconds, ``Z``).

    Same text as ``datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")``; the
    seconds part is formatted once per second.
    """
    whole, micros = _split_epoch(ts)
    return f"{_second_prefix(whole)}.{micros:06d}Z"


def epoch_to_status(ts: float) -> str:
    """Format an epoch time as a status time (``yyyy-MM-ddTHH:mm:ssZ``)."""
    return _second_prefix(_split_epoch(ts)[0]) + "Z"


def parse_history_time(text: str) -> float:
    """Parse an ISO-8601 UTC timestamp (as written by the SDK or the devhost) to epoch seconds."""
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    # fromisoformat accepts 3 or 6 fraction digits only; normalise to 6.
    match = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(.*)$", value)
    if match:
        head, frac, tail = match.groups()
        value = head + ("." + (frac + "000000")[:6] if frac else "") + tail
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def datetime_to_epoch(value: datetime) -> float:
    """Epoch seconds of a datetime; naive values are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def make_fast_parser(fallback: Callable[..., Any], cache_size: int = 65536) -> Callable[..., Any]:
    """Build a dateutil-compatible ``parse`` that short-cuts the devhost's own timestamp format.

    Replays parse the same history timestamps again every episode, so results of the fast path
    are memoised (datetimes are immutable); the cache is dropped whenever it reaches
    ``cache_size`` entries.
    """
    from dateutil.tz import tzutc  # noqa: PLC0415 - only needed when the patch is installed

    utc = tzutc()
    fullmatch = _FAST_FORMAT.fullmatch
    fromisoformat = datetime.fromisoformat
    cache: dict[str, datetime] = {}

    def fast_parse(timestr: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            hit = cache.get(timestr) if isinstance(timestr, str) else None
            if hit is not None:
                return hit
            # Cheap shape checks first; the regex confirms digits-only fields before fromisoformat.
            if isinstance(timestr, str) and len(timestr) in (20, 27) and timestr[-1] == "Z" and fullmatch(timestr):
                value = fromisoformat(timestr[:-1]).replace(tzinfo=utc)
                if len(cache) >= cache_size:
                    cache.clear()
                cache[timestr] = value
                return value
        return fallback(timestr, *args, **kwargs)

    fast_parse.devhost_fast = True  # type: ignore[attr-defined]
    return fast_parse


def install_fast_timestamp_parser() -> bool:
    """Swap the SDK's history-event timestamp parser for the fast one (idempotent); True if installed."""
    global _installed
    if _installed:
        return True
    # The package re-exports the HistoryEvent class under the submodule's name: go through importlib.
    history_module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    current = getattr(history_module, "dt_parse", None)
    if current is None:
        return False
    if not getattr(current, "devhost_fast", False):
        setattr(history_module, "dt_parse", make_fast_parser(current))  # noqa: B010 - module attribute patch
    _installed = True
    return True


def monotonic_delay(fire_at_epoch: float) -> float:
    """Seconds from now until ``fire_at_epoch`` (never negative)."""
    return max(0.0, fire_at_epoch - time.time())
