"""Follow a job's event stream (``GET /api/jobs/{id}/events``, docs/events.md) and resume it after a break.

``EventStream`` yields the events in order; when the connection breaks (or the server ends a stream at its
maximum duration with ``reconnect``) it connects again with ``Last-Event-ID`` and goes on with exactly the
events after the last one it yielded. A host that offers no stream (an error answer, not ``text/event-stream``)
raises ``StreamUnavailable`` before any event, and callers poll the job view instead. The rest of the module
turns events into what the CLI shows: one line per step change, the answer as it is written, the steps' states.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, SSEError

# Keep-alives come every 15 s: this long without a byte means the connection is gone.
READ_TIMEOUT_S = 45.0
# Waits before reconnecting after the 1st, 2nd, … break in a row (a break resets once an event arrives).
BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0)
Ending = Literal["end", "reconnect", "closed"]


@dataclass(frozen=True)
class JobEvent:
    """One event of the stream: its id, its type and its data JSON."""

    id: str
    type: str
    data: dict[str, Any]

    @property
    def committed(self) -> bool:
        """Whether the event is derived from the history (it never changes)."""
        return bool(self.data.get("committed"))


class StreamUnavailable(Exception):
    """The host offers no event stream for this job (an older app, or it refused): poll the view instead."""


class StreamLost(Exception):
    """The stream broke again and again without a single event in between."""


@dataclass
class EventStream:
    """The events of one job, resumed with ``Last-Event-ID`` after every break until the job's ``end``."""

    client: httpx.Client
    job_id: str
    last_id: str | None = None
    on_break: Callable[[str | None, str], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    resumed: int = 0
    _fresh: bool = field(default=False, repr=False)

    def __iter__(self) -> Iterator[JobEvent]:
        breaks = 0
        while True:
            self._fresh = False
            try:
                ending: Ending = yield from self._session()
                reason = "the stream closed before the job's end"
            except (httpx.TransportError, SSEError) as exc:
                ending, reason = "closed", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if ending == "end":
                return
            breaks = 0 if self._fresh or ending == "reconnect" else breaks + 1
            if breaks > len(BACKOFF_S):
                raise StreamLost(reason)
            if ending != "reconnect":
                if self.on_break is not None:
                    self.on_break(self.last_id, reason)
                self.sleep(BACKOFF_S[max(0, breaks - 1)])
            self.resumed += 1

    def _session(self) -> Generator[JobEvent, None, Ending]:
        """One connection: the events after ``last_id``, and how the connection ended."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        path = f"/api/jobs/{quote(self.job_id, safe='')}/events"
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
        with self.client.stream("GET", path, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                raise StreamUnavailable(_refusal(response))
            if "text/event-stream" not in response.headers.get("content-type", ""):
                raise StreamUnavailable(f"the host answered {response.headers.get('content-type')!r}, not a stream")
            for sse in EventSource(response).iter_sse():
                data = _data_of(sse.data)
                if data is None:
                    continue  # a keep-alive, or nothing this client can read
                kind = str(data.get("type") or sse.event)
                self._fresh = True
                if kind == "reconnect":
                    self.last_id = str(data.get("after") or sse.id or self.last_id or "") or None
                    return "reconnect"
                if sse.id:
                    self.last_id = sse.id
                yield JobEvent(sse.id, kind, data)
                if kind == "end":
                    return "end"
        return "closed"


def _data_of(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _refusal(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    code = error.get("code") if isinstance(error, dict) else None
    return f"the host answered {response.status_code}{f' {code}' if code else ''}"


# ----- what the CLI shows ---------------------------------------------------------------------------------------


@dataclass
class AnswerDraft:
    """The answer as it is written: each delta's text at its offset; ``superseded`` voids an attempt's text."""

    texts: dict[tuple[str, int], str] = field(default_factory=dict)
    void: set[tuple[str, int]] = field(default_factory=set)
    latest: tuple[str, int] | None = None

    def apply(self, event: JobEvent) -> bool:
        """Take a ``delta`` or ``superseded`` event; returns whether the text changed."""
        key = (str(event.data.get("step_id")), _int(event.data.get("attempt")))
        if event.type == "superseded":
            self.void.add(key)
            self.texts.pop(key, None)
            self.latest = None if self.latest == key else self.latest
            return True
        if event.type != "delta" or key in self.void or not isinstance(event.data.get("text"), str):
            return False
        text = self.texts.get(key, "")
        offset = min(_int(event.data.get("offset"), len(text)), len(text))
        self.texts[key] = text[:offset] + event.data["text"]
        self.latest = key
        return True

    def current(self) -> tuple[str, int, str] | None:
        """The step, attempt and text being written now (None when there is none)."""
        if self.latest is None or not self.texts.get(self.latest):
            return None
        step, attempt = self.latest
        return step, attempt, self.texts[self.latest]


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def local_time(at: Any, *, date: bool = False) -> str:
    """An ISO timestamp as local time with its zone (``11:02:03 UTC``); the text itself when it does not parse."""
    text = str(at or "")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M %Z" if date else "%H:%M:%S %Z")


def _clock(at: Any) -> str:
    return local_time(at)


def step_line(data: dict[str, Any]) -> str:
    """A step's change as one line: which step, which attempt, and what happened."""
    state, attempt = str(data.get("state")), _int(data.get("attempt"))
    where = f"{data.get('step_id')} ({data.get('kind')})"
    error = data.get("error") if isinstance(data.get("error"), dict) else None
    why = f": {error.get('code')}: {str(error.get('message') or '')[:200]}" if error else ""
    took = f" in {data['duration_ms'] / 1000:.1f} s" if isinstance(data.get("duration_ms"), int) else ""
    if state == "retrying":
        # The current state names the attempt that comes next (docs/events.md).
        return f"{where}: retrying, attempt {attempt} at {_clock(data.get('retry_at'))}"
    if state == "waiting":
        return f"{where}: waiting for a person"
    if state == "skipped":
        return f"{where}: skipped{why}"
    return f"{where}: attempt {attempt} {state}{took}{why}"


def event_line(event: JobEvent, seen: set[tuple[Any, ...]]) -> str | None:
    """The line the CLI prints for an event, once (the current state may be said again), or None."""
    data = event.data
    if event.type == "step":
        key: tuple[Any, ...] = ("step", data.get("step_id"), data.get("attempt"), data.get("state"))
        line = step_line(data)
    elif event.type == "status":
        key, line = ("status", data.get("status")), f"job: {data.get('status')}"
    elif event.type == "question":
        key, line = ("question", data.get("question_id")), f"the job asks: {data.get('text')}"
    elif event.type == "tool_call":
        key = ("tool", data.get("step_id"), data.get("tool"), data.get("state"))
        line = f"{data.get('step_id')}: tool {data.get('tool')} {data.get('state')}"
    else:
        return None
    if key in seen:
        return None
    seen.add(key)
    return f"{_clock(data.get('at'))}  {line}"


def step_states(client: httpx.Client) -> frozenset[str]:
    """The states a step of the view can be in (the host's catalog, GET /api/catalog), or none when it has no
    catalog (then every step event is read back from the view)."""
    try:
        response = client.get("/api/catalog")
        states = response.json().get("step_states") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return frozenset()
    return frozenset(str(s) for s in states) if isinstance(states, list) else frozenset()


def apply_to_view(view: dict[str, Any], event: JobEvent, states: frozenset[str]) -> bool:
    """Move a step of the view to the state a ``step`` event tells; returns False when the view must be read
    again: a step the view lacks, or an event state that is not one of the view's step ``states`` (the event
    stream names some states its own way, "started" for a step the view says is running: the view says which)."""
    if event.type != "step":
        return True
    data = event.data
    step = next((s for s in view.get("steps") or [] if s.get("id") == data.get("step_id")), None)
    state = str(data.get("state"))
    if step is None or state not in states:
        return False
    step["state"] = state
    step["attempts"] = max(_int(step.get("attempts")), _int(data.get("attempt")))
    return True
