"""``GET /api/jobs/{id}/events``: the job's events as Server-Sent Events (docs/events.md).

One poller per watched job and process reads the job (status, history, custom status, and the new text of a
streaming answer) every ``EVENTS_POLL_MS`` while it changes, less often while it is quiet (without its
history when nothing was checkpointed), and publishes one shared snapshot; every subscriber of that job
holds only a cursor into it and is woken when it changes. A slow client only slows its own generator (the
response pulls from it), a vanished one is dropped by the server, and neither holds a queue: memory per
subscriber is its cursor and its socket's buffers.

The function takes the HTTP streams extension's ``Request`` and returns its ``StreamingResponse`` (Azure's
Python worker streams it; devhost serves it the same way).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import starlette.responses
from azurefunctions.extensions.http.fastapi import JSONResponse, Request, Response

from api.errors import ApiError
from api.events_derive import committed_events, current_state, streaming_kinds, streaming_step
from api.view import decode
from shared.jobs.events import (
    KEEP_ALIVE,
    AnyEvent,
    Cursor,
    DeltaEvent,
    EndEvent,
    ReconnectEvent,
    SupersededEvent,
    parse_event_id,
    sse,
)
from shared.jobs.models import TERMINAL_RUNTIME
from shared.runtime.streaming.base import PartialSlice

logger = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Answer:
    """The text of the answer attempt being written now, as far as this process has read it."""

    step_id: str
    attempt: int
    text: str = ""


@dataclass
class Snapshot:
    """What one poll of a job found; shared by every subscriber of the job (never mutated once published)."""

    committed: list[AnyEvent] = field(default_factory=list)
    state: list[AnyEvent] = field(default_factory=list)
    answer: Answer | None = None
    ended: bool = False
    gone: bool = False


# A job is read every poll_s while it changes; once it has not changed for a while, the wait between reads
# grows with that quiet time (a quarter of it, so a change is seen within 25 % of how long the job was quiet),
# up to the idle maximum. A change, or a new subscriber, brings the poller back to poll_s.
QUIET_SHARE = 0.25
# A status read without the history tells whether anything was checkpointed since the last full read (the
# runtime status, the custom status, the last-updated time). That time has a precision of one second, and may
# come from another machine's clock: it is trusted only once it is this much older than the full read.
SETTLE_S = 5.0


class JobFeed:
    """The one poller of one job in this process, and the snapshot it publishes."""

    def __init__(
        self, job_id: str, client: df.DurableOrchestrationClient, poll_s: float, idle_s: float | None = None
    ) -> None:
        self.job_id = job_id
        self.client = client
        self.poll_s = poll_s
        self.idle_s = max(poll_s, idle_s if idle_s is not None else poll_s)
        self.snapshot = Snapshot()
        self.subscribers = 0
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._streaming = streaming_kinds()
        self._seen: tuple[Any, ...] = ()
        # What a read without the history shows when nothing was checkpointed since the last full read; None
        # while that cannot be told (no full read yet, or its last-updated time too recent to compare).
        self._settled: tuple[Any, ...] | None = None
        self._quiet_since = 0.0
        self.reads = 0  # full reads (with the history), for tests and benchmarks

    def start(self) -> None:
        """Start polling (once)."""
        if self._task is None:
            self._quiet_since = asyncio.get_running_loop().time()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"events-{self.job_id}")

    def stop(self) -> None:
        """Stop polling (the last subscriber left)."""
        if self._task is not None:
            self._task.cancel()

    def wake(self) -> None:
        """Read the job now and at the full rate again (a new subscriber came, or this process changed the job)."""
        self._quiet_since = asyncio.get_running_loop().time()
        self._wake.set()

    async def changed(self, seen: Snapshot, within_s: float) -> None:
        """Wait until the snapshot is another than ``seen``, or ``within_s`` seconds.

        A subscriber names the snapshot it last read: one published while it was away (its generator paused at
        a ``yield`` until its client took the messages) wakes it at once instead of being skipped.
        """
        if self.snapshot is not seen:
            return
        waiter = self._changed
        try:
            await asyncio.wait_for(waiter.wait(), within_s)
        except TimeoutError:
            pass

    def _publish(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.ready.set()
        waiter, self._changed = self._changed, asyncio.Event()
        waiter.set()

    def interval(self, now: float, failures: int = 0) -> float:
        """Seconds from the start of one read to the next: poll_s while the job changes, longer once it is quiet."""
        quiet = max(0.0, now - self._quiet_since)
        return min(self.idle_s, max(self.poll_s, quiet * QUIET_SHARE)) * min(1 + failures, 20)

    async def _run(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            # Reads start every interval (not an interval after the last one ended): a read's own time is not added.
            started = loop.time()
            self._wake.clear()
            try:
                if await self.poll():
                    self._quiet_since = started
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a read that failed is tried again; subscribers keep their cursors
                failures += 1
                logger.warning("events of %s: read failed (%d): %s", self.job_id, failures, exc)
            if self.snapshot.ended or self.snapshot.gone:
                return
            left = started + self.interval(started, failures) - loop.time()
            if left > 0 and not self._wake.is_set():
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    pass

    async def _read(self, history: bool) -> df.DurableOrchestrationStatus | None:
        """The job's status (with its history or without); None when there is no such instance."""
        status = await self.client.get_status(
            self.job_id, show_history=history, show_history_output=history, show_input=False
        )
        if not status or not status.name:
            return None
        return status

    async def poll(self) -> bool:
        """Read the job once and publish what changed; True when something did.

        A job with nothing new since the last full read costs one status read without the history (and, while
        an answer streams, one read of its new text); only a change reads the history and derives the events.
        """
        glance = await self._read(history=False) if self._settled is not None else None
        # Anything checkpointed since the last full read (or no such read to compare with): read the history.
        status = glance if glance is not None and _glance(glance) == self._settled else None
        full = status is None
        if status is None:
            self.reads += 1
            status = await self._read(history=True)
            if status is None:
                self._publish(Snapshot(gone=True))
                return True
        data = status.to_json()
        runtime, custom = data.get("runtimeStatus"), data.get("customStatus")
        previous = self.snapshot
        committed, state, ended, key = previous.committed, previous.state, previous.ended, self._seen
        if full:
            history = getattr(status, "historyEvents", None) or data.get("historyEvents") or data.get("history") or []
            key = (len(history), runtime, str(custom), data.get("lastUpdatedTime"))
            if key != self._seen:
                output = decode(data.get("output"))
                committed = committed_events(history, runtime, output, custom, self._streaming)
                state = current_state(runtime, custom, output, _now(), history)
                ended = runtime in TERMINAL_RUNTIME and bool(committed) and isinstance(committed[-1], EndEvent)
            self._settled = _glance(status) if _settled(getattr(status, "last_updated_time", None)) else None
        answer = await self._read_answer(custom, runtime, previous.answer)
        if key == self._seen and answer == previous.answer:
            return False
        self._seen = key
        self._publish(Snapshot(committed=committed, state=state, answer=answer, ended=ended))
        return True

    async def _read_answer(self, custom: Any, runtime: Any, known: Answer | None) -> Answer | None:
        """The answer being written now, reading only the text after what this process already has."""
        now = streaming_step(custom, runtime, self._streaming)
        if now is None:
            return None
        step_id, attempt = now
        from shared.runtime.settings import get_settings
        from shared.runtime.streaming.local import get_store

        store = get_store(get_settings())
        if store is None:
            return None
        have = known if known is not None and (known.step_id, known.attempt) == now else Answer(step_id, attempt)
        found: PartialSlice | None = await asyncio.to_thread(
            store.read_from, self.job_id, step_id, attempt, len(have.text)
        )
        if found is None or found.attempt != attempt:
            return have  # nothing written yet, or an entry of an attempt the custom status has not reached
        if not found.text:
            return have
        return Answer(step_id, attempt, have.text[: found.offset] + found.text)


def _settled(updated: Any) -> bool:
    """Whether a last-updated time is old enough that a later checkpoint would show another one."""
    if not isinstance(updated, datetime):
        return False
    aware = updated if updated.tzinfo is not None else updated.replace(tzinfo=UTC)
    return (datetime.now(UTC) - aware).total_seconds() > SETTLE_S


def _glance(status: Any) -> tuple[Any, ...]:
    """What a status read without the history tells of a change: runtime status, custom status, last update."""
    return (str(status.runtime_status), str(status.custom_status), status.last_updated_time)


class StreamSlot:
    """One admitted stream, counted against the process's and its user's limits until released (once)."""

    def __init__(self, feeds: Feeds, user: str | None) -> None:
        self.feeds = feeds
        self.user = user
        self.released = False

    def release(self) -> None:
        """Give the slot back (idempotent: the stream's end and the response's end both call it)."""
        if self.released:
            return
        self.released = True
        self.feeds.open -= 1
        if self.user is not None:
            left = self.feeds.by_user.get(self.user, 1) - 1
            if left > 0:
                self.feeds.by_user[self.user] = left
            else:
                self.feeds.by_user.pop(self.user, None)


class Feeds:
    """The feeds of this process, one per watched job, and how many streams are open."""

    def __init__(self) -> None:
        self.by_job: dict[str, JobFeed] = {}
        self.open = 0
        # Streams open per signed-in user (Easy Auth principal id): one user cannot take every stream.
        self.by_user: dict[str, int] = {}

    def admit(self, user: str | None, *, max_open: int, max_per_user: int) -> StreamSlot:
        """Count one more stream, or refuse it (503 for the process, 429 for the user).

        Checked and counted in one step, with no await in between: streams opened at the same moment cannot all
        pass the check before any of them is counted.
        """
        if self.open >= max_open:
            raise ApiError(503, "TOO_MANY_STREAMS", "this instance serves its maximum of event streams; retry later")
        if user is not None and self.by_user.get(user, 0) >= max_per_user:
            raise ApiError(
                429,
                "TOO_MANY_STREAMS",
                f"you have {max_per_user} event streams open on this instance; close one first",
            )
        self.open += 1
        if user is not None:
            self.by_user[user] = self.by_user.get(user, 0) + 1
        return StreamSlot(self, user)

    def join(
        self, job_id: str, client: df.DurableOrchestrationClient, poll_s: float, idle_s: float | None = None
    ) -> JobFeed:
        """The job's feed (started when it is new, read at once when it is not), counting one more subscriber."""
        feed = self.by_job.get(job_id)
        if feed is None:
            feed = self.by_job[job_id] = JobFeed(job_id, client, poll_s, idle_s)
            feed.start()
        else:
            feed.wake()  # a quiet job's snapshot may be an idle interval old
        feed.subscribers += 1
        return feed

    def leave(self, feed: JobFeed) -> None:
        """One subscriber less; the last one stops the poller."""
        feed.subscribers -= 1
        if feed.subscribers <= 0:
            feed.stop()
            if self.by_job.get(feed.job_id) is feed:
                del self.by_job[feed.job_id]

    def nudge(self, job_id: str) -> None:
        """This process changed the job (an answer, a cancel): its feed, if watched, reads it at once."""
        feed = self.by_job.get(job_id)
        if feed is not None:
            feed.wake()


FEEDS = Feeds()


@dataclass
class Sent:
    """What one connection already told its client that a later snapshot may repeat."""

    superseded: set[tuple[str, int]] = field(default_factory=set)
    # The last current-state event sent per subject (the status, a step, the question), without its time.
    state: dict[str, str] = field(default_factory=dict)


def _subject(event: AnyEvent) -> str:
    """What a current-state event is about: a newer one about the same subject replaces it."""
    return f"{event.type}:{getattr(event, 'step_id', '') or ''}"


def _after(snapshot: Snapshot, cursor: Cursor, sent: Sent) -> tuple[list[str], Cursor]:
    """The SSE messages a subscriber at ``cursor`` has not had from this snapshot, and its new cursor."""
    out: list[str] = []
    cursor = _committed_after(snapshot, cursor, sent.superseded, out)
    if snapshot.ended:
        return out, cursor
    for event in snapshot.state:
        # The current state is derived again on every change: what this client already has is not repeated.
        said = event.model_dump_json(exclude={"at"})
        if sent.state.get(_subject(event)) != said:
            sent.state[_subject(event)] = said
            cursor = Cursor(cursor.seq, cursor.state + 1, cursor.attempt, cursor.chars)
            out.append(sse(cursor.provisional_id(), event))
    streamed = sent.superseded
    if snapshot.answer is not None:
        cursor = _answer_after(snapshot.answer, cursor, streamed, out)
    return out, cursor


def _committed_after(snapshot: Snapshot, cursor: Cursor, streamed: set[tuple[str, int]], out: list[str]) -> Cursor:
    """Append the committed events after ``cursor``; the current state is then re-sent (it is idempotent)."""
    total = len(snapshot.committed)
    if cursor.seq >= total and snapshot.ended:
        # The client has the end already, or an id past it (no instance ever sent that for this job). It is sent
        # the end again, so that it stops: an empty stream would make an EventSource reconnect for ever. (While
        # the job runs, this instance may only be a poll behind the one that sent the id: the cursor waits.)
        out.append(sse(f"c{total}", snapshot.committed[-1]))
        return Cursor(total, 0, cursor.attempt, cursor.chars)
    if cursor.seq >= total:
        return cursor
    for seq in range(cursor.seq, total):
        event = snapshot.committed[seq]
        out.append(sse(f"c{seq + 1}", event))
        if isinstance(event, SupersededEvent):
            streamed.add((event.step_id, event.attempt))
    return Cursor(total, 0, cursor.attempt, cursor.chars)


def _answer_after(answer: Answer, cursor: Cursor, streamed: set[tuple[str, int]], out: list[str]) -> Cursor:
    """Append the answer text after ``cursor`` (a newer attempt first voids the one the subscriber followed)."""
    if cursor.attempt != answer.attempt:
        if cursor.attempt and (answer.step_id, cursor.attempt) not in streamed:
            streamed.add((answer.step_id, cursor.attempt))
            void = SupersededEvent(at=_now(), committed=False, step_id=answer.step_id, attempt=cursor.attempt)
            out.append(sse(Cursor(cursor.seq, cursor.state, answer.attempt, 0).provisional_id(), void))
        cursor = Cursor(cursor.seq, cursor.state, answer.attempt, 0)
    if len(answer.text) <= cursor.chars:
        return cursor
    delta = DeltaEvent(
        at=_now(), step_id=answer.step_id, attempt=answer.attempt, offset=cursor.chars, text=answer.text[cursor.chars :]
    )
    cursor = Cursor(cursor.seq, cursor.state, answer.attempt, len(answer.text))
    out.append(sse(cursor.provisional_id(), delta))
    return cursor


async def stream(
    job_id: str,
    client: df.DurableOrchestrationClient,
    cursor: Cursor,
    *,
    poll_s: float,
    keepalive_s: float,
    max_s: float,
    idle_s: float | None = None,
    slot: StreamSlot | None = None,
) -> AsyncGenerator[str, None]:
    """The messages of one subscriber until the job's end, the maximum duration or the client leaving.

    The subscriber joins the job's feed when the response starts and leaves it however the stream ends
    (a client that disconnects cancels the generator where it waits); its admission ``slot`` is released then.
    """
    deadline = time.monotonic() + max_s
    sent = Sent()
    try:
        feed = FEEDS.join(job_id, client, poll_s, idle_s)
        try:
            while True:
                snapshot = feed.snapshot
                messages, cursor = _after(snapshot, cursor, sent) if feed.ready.is_set() else ([], cursor)
                if messages:
                    yield "".join(messages)
                if snapshot.ended or snapshot.gone:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    after = cursor.provisional_id() if cursor.state or cursor.chars else cursor.committed_id()
                    yield sse(after, ReconnectEvent(at=_now(), after=after))
                    return
                await feed.changed(snapshot, min(keepalive_s, left))
                if feed.snapshot is snapshot and time.monotonic() < deadline:
                    yield KEEP_ALIVE
        finally:
            FEEDS.leave(feed)
    finally:
        if slot is not None:
            slot.release()


# A client whose socket accepts nothing for this long (its buffers are full) is dropped; it reconnects with
# Last-Event-ID. Until its buffers fill, a client that does not read costs only them.
SEND_TIMEOUT_S = 30.0


class DroppingStreamingResponse(starlette.responses.StreamingResponse):
    """A streaming response that drops a client which stopped reading, instead of waiting on it forever."""

    def __init__(
        self, *args: Any, send_timeout_s: float = SEND_TIMEOUT_S, slot: StreamSlot | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.send_timeout_s = send_timeout_s
        self.slot = slot
        if slot is not None:
            # A response that is never sent never starts its body generator (whose end releases the slot).
            weakref.finalize(self, slot.release)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Send the response; however it ends (even before the body started), the stream's slot is released."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.slot is not None:
                self.slot.release()

    async def stream_response(self, send: Any) -> None:
        """Stream with a bounded wait on each send; on a stalled client, close the body generator and stop."""

        async def bounded(message: Any) -> None:
            await asyncio.wait_for(send(message), self.send_timeout_s)

        try:
            await super().stream_response(bounded)
        except TimeoutError:
            logger.info("event stream: dropped a client that read nothing for %.0f s", self.send_timeout_s)
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


def _cursor_of(req: Request) -> Cursor:
    """Where a reconnecting client resumes: ``Last-Event-ID``, else ``?after=``; the start otherwise."""
    for name, text in (("Last-Event-ID", req.headers.get("last-event-id")), ("after", req.query_params.get("after"))):
        if text:
            cursor = parse_event_id(text)
            if cursor is None:
                raise ApiError(400, "INVALID_EVENT_ID", f"{name} is not an event id of this stream", field=name)
            # A new connection is sent the current state whole: its provisional cursor part is not kept.
            return Cursor(cursor.seq, 0, cursor.attempt, cursor.chars)
    return Cursor()


def _error(exc: ApiError) -> Response:
    """The error body every endpoint uses (api/errors.py), as the streams extension's response."""
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.field:
        error["field"] = exc.field
    return JSONResponse({"error": error}, status_code=exc.status)


async def events(req: Request, client: df.DurableOrchestrationClient, job_id: str) -> Response:
    """Open the event stream of one job (after the same checks as the job view)."""
    from api.auth import caller_of
    from api.common import owned_status
    from shared.runtime.settings import get_settings

    settings = get_settings()
    caller = caller_of(req.headers, easy_auth=settings.website_auth_enabled, admin_role=settings.jobs_admin_role)
    cursor = _cursor_of(req)
    await owned_status(client, job_id, caller)
    user = caller.principal.id if caller.principal is not None else None
    # No await from here to the response: the slot is counted before another request can be admitted.
    slot = FEEDS.admit(
        user, max_open=settings.events_max_subscribers, max_per_user=settings.events_max_streams_per_user
    )
    body = stream(
        job_id,
        client,
        cursor,
        poll_s=settings.events_poll_ms / 1000,
        keepalive_s=settings.events_keepalive_s,
        max_s=settings.events_max_stream_s,
        idle_s=settings.events_idle_poll_ms / 1000,
        slot=slot,
    )
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return DroppingStreamingResponse(body, media_type="text/event-stream", headers=headers, slot=slot)


async def guarded_events(req: Request, client: df.DurableOrchestrationClient, job_id: str) -> Response:
    """Map every error to the API's error body, like api/errors.guarded (a 5xx only for the unexpected)."""
    from pydantic import ValidationError

    from api.errors import from_validation_error
    from shared.runtime.settings import ConfigError

    try:
        return await events(req, client, job_id)
    except ApiError as exc:
        return _error(exc)
    except (ConfigError, ValidationError) as exc:
        logger.error("job_events: %s", exc)
        if isinstance(exc, ValidationError) and exc.title != "Settings":
            return _error(from_validation_error(exc))
        return _error(ApiError(503, "CONFIG_ERROR", "the app is misconfigured; the error was logged"))
    except Exception:
        logger.exception("unhandled error in job_events")
        return _error(ApiError(500, "INTERNAL_ERROR", "the request failed unexpectedly; the error was logged"))


def register(bp: df.Blueprint) -> None:
    """Register the event stream route on the blueprint."""
    from api.common import route_auth_level

    @bp.route(route="jobs/{job_id}/events", methods=["GET"], auth_level=route_auth_level())
    @bp.durable_client_input(client_name="client")
    async def job_events(req: Request, client: df.DurableOrchestrationClient) -> Response:
        """The job's events as Server-Sent Events (docs/events.md)."""
        return await guarded_events(req, client, str(req.path_params.get("job_id", "")))
