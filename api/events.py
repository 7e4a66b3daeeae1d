"""``GET /api/jobs/{id}/events``: the job's events as Server-Sent Events (docs/events.md).

One poller per watched job and process reads the job (status, history, custom status, and the new text of a
streaming answer) every ``EVENTS_POLL_MS`` and publishes one shared snapshot; every subscriber of that job
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


class JobFeed:
    """The one poller of one job in this process, and the snapshot it publishes."""

    def __init__(self, job_id: str, client: df.DurableOrchestrationClient, poll_s: float) -> None:
        self.job_id = job_id
        self.client = client
        self.poll_s = poll_s
        self.snapshot = Snapshot()
        self.subscribers = 0
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._streaming = streaming_kinds()
        self._seen: tuple[Any, ...] = ()

    def start(self) -> None:
        """Start polling (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"events-{self.job_id}")

    def stop(self) -> None:
        """Stop polling (the last subscriber left)."""
        if self._task is not None:
            self._task.cancel()

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

    async def _run(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            # Polls start every poll_s (not poll_s after the last one ended): a read's own time is not added.
            started = loop.time()
            try:
                await self.poll()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a read that failed is tried again; subscribers keep their cursors
                failures += 1
                logger.warning("events of %s: read failed (%d): %s", self.job_id, failures, exc)
            if self.snapshot.ended or self.snapshot.gone:
                return
            await asyncio.sleep(max(0.0, started + self.poll_s * min(1 + failures, 20) - loop.time()))

    async def poll(self) -> None:
        """Read the job once (status, history, custom status: one request) and publish what changed."""
        status = await self.client.get_status(
            self.job_id, show_history=True, show_history_output=True, show_input=False
        )
        if not status or not status.name:
            self._publish(Snapshot(gone=True))
            return
        data = status.to_json()
        history = getattr(status, "historyEvents", None) or data.get("historyEvents") or data.get("history") or []
        runtime, custom = data.get("runtimeStatus"), data.get("customStatus")
        key = (len(history), runtime, str(custom), data.get("lastUpdatedTime"))
        previous = self.snapshot
        committed, state, ended = previous.committed, previous.state, previous.ended
        if key != self._seen:
            output = decode(data.get("output"))
            committed = committed_events(history, runtime, output, custom, self._streaming)
            state = current_state(runtime, custom, output, _now(), history)
            ended = runtime in TERMINAL_RUNTIME and bool(committed) and isinstance(committed[-1], EndEvent)
        answer = await self._read_answer(custom, runtime, previous.answer)
        if key == self._seen and answer == previous.answer:
            return
        self._seen = key
        self._publish(Snapshot(committed=committed, state=state, answer=answer, ended=ended))

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


class Feeds:
    """The feeds of this process, one per watched job, and how many streams are open."""

    def __init__(self) -> None:
        self.by_job: dict[str, JobFeed] = {}
        self.open = 0
        # Streams open per signed-in user (Easy Auth principal id): one user cannot take every stream.
        self.by_user: dict[str, int] = {}

    def join(
        self, job_id: str, client: df.DurableOrchestrationClient, poll_s: float, user: str | None = None
    ) -> JobFeed:
        """The job's feed (started when it is new), counting one more subscriber (and one more for its user)."""
        feed = self.by_job.get(job_id)
        if feed is None:
            feed = self.by_job[job_id] = JobFeed(job_id, client, poll_s)
            feed.start()
        feed.subscribers += 1
        self.open += 1
        if user is not None:
            self.by_user[user] = self.by_user.get(user, 0) + 1
        return feed

    def leave(self, feed: JobFeed, user: str | None = None) -> None:
        """One subscriber less; the last one stops the poller."""
        if user is not None:
            left = self.by_user.get(user, 1) - 1
            if left > 0:
                self.by_user[user] = left
            else:
                self.by_user.pop(user, None)
        feed.subscribers -= 1
        self.open -= 1
        if feed.subscribers <= 0:
            feed.stop()
            if self.by_job.get(feed.job_id) is feed:
                del self.by_job[feed.job_id]


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
    if cursor.seq > total and snapshot.ended:
        # The whole story is known and shorter: no instance ever sent this id for this job. (While the job runs,
        # this instance may only be a poll behind the one that sent it: then the cursor waits for the history.)
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
    user: str | None = None,
) -> AsyncGenerator[str, None]:
    """The messages of one subscriber until the job's end, the maximum duration or the client leaving.

    The subscriber joins the job's feed when the response starts and leaves it however the stream ends
    (a client that disconnects cancels the generator where it waits).
    """
    deadline = time.monotonic() + max_s
    sent = Sent()
    feed = FEEDS.join(job_id, client, poll_s, user)
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
        FEEDS.leave(feed, user)


# A client whose socket accepts nothing for this long (its buffers are full) is dropped; it reconnects with
# Last-Event-ID. Until its buffers fill, a client that does not read costs only them.
SEND_TIMEOUT_S = 30.0


class DroppingStreamingResponse(starlette.responses.StreamingResponse):
    """A streaming response that drops a client which stopped reading, instead of waiting on it forever."""

    def __init__(self, *args: Any, send_timeout_s: float = SEND_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.send_timeout_s = send_timeout_s

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
    from api.jobs import _status
    from shared.runtime.settings import get_settings

    settings = get_settings()
    caller = caller_of(req.headers, easy_auth=settings.website_auth_enabled, admin_role=settings.jobs_admin_role)
    cursor = _cursor_of(req)
    await _status(client, job_id, caller)
    if FEEDS.open >= settings.events_max_subscribers:
        raise ApiError(503, "TOO_MANY_STREAMS", "this instance serves its maximum of event streams; retry later")
    user = caller.principal.id if caller.principal is not None else None
    if user is not None and FEEDS.by_user.get(user, 0) >= settings.events_max_streams_per_user:
        raise ApiError(
            429,
            "TOO_MANY_STREAMS",
            f"you have {settings.events_max_streams_per_user} event streams open on this instance; close one first",
        )
    body = stream(
        job_id,
        client,
        cursor,
        poll_s=settings.events_poll_ms / 1000,
        keepalive_s=settings.events_keepalive_s,
        max_s=settings.events_max_stream_s,
        user=user,
    )
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return DroppingStreamingResponse(body, media_type="text/event-stream", headers=headers)


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
    from api.jobs import _route_auth_level

    @bp.route(route="jobs/{job_id}/events", methods=["GET"], auth_level=_route_auth_level())
    @bp.durable_client_input(client_name="client")
    async def job_events(req: Request, client: df.DurableOrchestrationClient) -> Response:
        """The job's events as Server-Sent Events (docs/events.md)."""
        return await guarded_events(req, client, str(req.path_params.get("job_id", "")))
