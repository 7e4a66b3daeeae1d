"""The event stream's parts on their own: store reads by offset, derivation from a history, subscriber cursors."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from azure.core.pipeline.transport import RequestsTransport

from api.events import Answer, Sent, Snapshot, _after
from api.events_derive import committed_events, current_state
from shared.jobs.events import Cursor, StepEvent, parse_event_id
from shared.runtime.settings import Settings
from shared.runtime.streaming.azure import BlobPartialOutputStore, build_blob_store
from shared.runtime.streaming.local import PartialOutputStore, SqlitePartialOutputStore

if TYPE_CHECKING:
    from devhost.storage.azurite import Azurite

STREAMING = {"generate_response"}


@pytest.fixture(params=["local", "azure_blob"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> PartialOutputStore:
    if request.param == "local":
        return SqlitePartialOutputStore(tmp_path / "p.sqlite3")
    azurite: Azurite = request.getfixturevalue("azurite")
    return build_blob_store(Settings(), None, connection_string=azurite.connection_string)


def test_a_follower_reads_only_new_text_and_a_new_attempt_supersedes(store: PartialOutputStore) -> None:
    job = f"job-{time.monotonic_ns()}"
    assert store.read_from(job, "a", 1, 0) is None
    store.append(job, "a", 1, "Les retours ")
    first = store.read_from(job, "a", 1, 0)
    assert first is not None and (first.text, first.offset, first.end, first.superseded) == (
        "Les retours ",
        0,
        12,
        False,
    )
    store.append(job, "a", 1, "après 30 jours")
    second = store.read_from(job, "a", 1, first.end)
    assert second is not None and (second.text, second.offset) == ("après 30 jours", 12)
    nothing = store.read_from(job, "a", 1, second.end)
    assert nothing is not None and nothing.text == "" and not nothing.complete
    # The attempt is retried: the follower of attempt 1 is told, and gets attempt 2's text from 0.
    store.append(job, "a", 2, "Second")
    retried = store.read_from(job, "a", 1, second.end)
    assert retried is not None and (retried.superseded, retried.attempt, retried.offset, retried.text) == (
        True,
        2,
        0,
        "Second",
    )
    store.append(job, "a", 2, " try", complete=True)
    done = store.read_from(job, "a", 2, retried.end)
    assert done is not None and (done.text, done.complete) == (" try", True)


def test_the_blob_store_follows_with_ranged_reads(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    store: BlobPartialOutputStore = build_blob_store(Settings(), None, connection_string=azurite.connection_string)
    job = f"job-{time.monotonic_ns()}"
    store.append(job, "a", 1, "é" * 10)
    first = store.read_from(job, "a", 1, 0)
    assert first is not None and first.end == 10
    store.append(job, "a", 1, "ü and more")
    # What the SDK sends to Azurite, seen at its transport.
    requests: list[Any] = []
    send = RequestsTransport.send

    def recording_send(self: RequestsTransport, request: Any, **kwargs: Any) -> Any:
        requests.append(request)
        return send(self, request, **kwargs)

    monkeypatch.setattr(RequestsTransport, "send", recording_send)
    second = store.read_from(job, "a", 1, 10)
    assert second is not None and second.text == "ü and more"
    reads = [r for r in requests if r.method == "GET"]
    # One ranged GET from byte 19 (the last byte of ten two-byte characters), not the whole blob again.
    assert len(reads) == 1
    wanted = reads[0].headers.get("x-ms-range") or reads[0].headers.get("range")
    assert wanted is not None and wanted.startswith("bytes=19-")


def _task(step: str, attempt: int, kind: str, at: str, *, failed: bool = False, tokens: int = 10) -> dict[str, Any]:
    result: dict[str, Any] = {"status": "failed" if failed else "success", "result": {}, "usage": {}}
    if failed:
        result["error"] = {"code": "LLM_UNAVAILABLE", "message": "stream broke"}
    else:
        result["usage"] = {"tokens_input": tokens, "tokens_output": 1}
    return {
        "EventType": "TaskCompleted",
        "Timestamp": at,
        "ScheduledTime": at.replace(".5", ".1"),
        "FunctionName": kind,
        "Input": {"task_id": f"job:{step}:{attempt}", "executor_type": kind, "task": {}},
        "Result": result,
    }


HISTORY: list[dict[str, Any]] = [
    {"EventType": "ExecutionStarted", "Timestamp": "2026-01-01T00:00:00.0Z", "Input": {}},
    _task("plan", 1, "plan", "2026-01-01T00:00:01.5Z"),
    _task("answer", 1, "generate_response", "2026-01-01T00:00:02.5Z", failed=True),
    {"EventType": "TimerCreated", "Timestamp": "2026-01-01T00:00:02.6Z", "FireAt": "2026-01-01T00:00:03.0Z"},
    {"EventType": "TimerFired", "Timestamp": "2026-01-01T00:00:03.0Z"},
    _task("answer", 2, "generate_response", "2026-01-01T00:00:04.5Z"),
    {
        "EventType": "ExecutionCompleted",
        "Timestamp": "2026-01-01T00:00:05.0Z",
        "OrchestrationStatus": "Completed",
        "Result": {"status": "completed", "answer": "A."},
    },
]


def test_committed_events_only_grow_as_the_history_does() -> None:
    final = committed_events(HISTORY, "Completed", {"status": "completed", "answer": "A."}, None, STREAMING)
    for cut in range(len(HISTORY)):
        partial = committed_events(HISTORY[:cut], "Running", None, None, STREAMING)
        assert final[: len(partial)] == partial
    kinds = [(e.type, getattr(e, "state", None)) for e in final]
    assert kinds[-2:] == [("status", None), ("end", None)]
    superseded = [e for e in final if e.type == "superseded"]
    assert [(e.step_id, e.attempt) for e in superseded] == [("answer", 1)]
    steps = [(e.step_id, e.state, e.attempt) for e in final if isinstance(e, StepEvent)]
    assert steps == [
        ("plan", "started", 1),
        ("plan", "succeeded", 1),
        ("answer", "started", 1),
        ("answer", "failed", 1),
        ("answer", "started", 2),
        ("answer", "succeeded", 2),
    ]
    usage = [e for e in final if e.type == "usage"]
    assert [u.total_tokens for u in usage] == [11, 22]


def test_the_end_waits_for_the_runtime_status_to_be_terminal() -> None:
    early = committed_events(HISTORY, "Running", None, None, STREAMING)
    assert all(e.type != "end" for e in early)


def test_current_state_says_what_runs_and_what_is_asked() -> None:
    custom = {
        "status": "waiting_for_user",
        "steps": [
            {"id": "sql", "kind": "execute_azure_sql", "state": "waiting", "attempts": 1},
            {
                "id": "answer",
                "kind": "generate_response",
                "state": "retrying",
                "attempts": 1,
                "next_attempt": 2,
                "retry_at": "2026-01-01T00:00:09+00:00",
            },
        ],
        "waiting": {
            "question_id": "q1",
            "step_id": "sql",
            "kind": "approval",
            "question": "Run it?",
            "options": ["approve", "reject"],
            "asked_at": "2026-01-01T00:00:01+00:00",
            "expires_at": "2026-01-02T00:00:00+00:00",
        },
    }
    state = current_state("Running", custom, None, "now")
    assert [e.type for e in state] == ["status", "step", "step", "question"]
    assert all(not e.committed for e in state)
    retry = state[2]
    assert isinstance(retry, StepEvent) and (retry.state, retry.attempt, retry.retry_at) == (
        "retrying",
        2,
        "2026-01-01T00:00:09Z",
    )
    assert current_state("Completed", custom, None, "now") == []


def _ids(messages: list[str]) -> list[str]:
    return [line[4:] for m in messages for line in m.splitlines() if line.startswith("id: ")]


def test_a_subscriber_cursor_gets_each_event_once_and_deltas_by_offset() -> None:
    committed = committed_events(HISTORY[:2], "Running", None, None, STREAMING)
    state = current_state("Running", {"status": "running", "steps": []}, None, "now")
    snap = Snapshot(committed=committed, state=state, answer=Answer("answer", 1, "Hello"))
    streamed = Sent()
    first, cursor = _after(snap, Cursor(), streamed)
    assert _ids(first) == [f"c{i}" for i in range(1, len(committed) + 1)] + [
        f"c{len(committed)}.p1.0.0",
        f"c{len(committed)}.p1.1.5",
    ]
    again, same = _after(snap, cursor, streamed)
    assert again == [] and same == cursor
    # More text: one delta at offset 5.
    grown = Snapshot(committed=committed, state=state, answer=Answer("answer", 1, "Hello world"))
    more, cursor = _after(grown, cursor, streamed)
    assert len(more) == 1 and '"offset":5' in more[0] and '"text":" world"' in more[0]
    # The attempt was retried: its deltas are void, the next attempt starts at 0.
    retried = Snapshot(committed=committed, state=state, answer=Answer("answer", 2, "Again"))
    out, cursor = _after(retried, cursor, streamed)
    assert ["event: superseded" in m for m in out] == [True, False]
    assert '"attempt":2,"offset":0,"text":"Again"' in out[1]
    # Resuming from the last id re-sends the current state but no text; from a committed id, the text from 0.
    parsed = parse_event_id(_ids(out)[-1])
    assert parsed is not None
    resumed, _ = _after(retried, Cursor(parsed.seq, 0, parsed.attempt, parsed.chars), Sent())
    assert resumed and not any("event: delta" in m for m in resumed)
    from_committed, _ = _after(retried, Cursor(parsed.seq), Sent())
    assert any('"offset":0,"text":"Again"' in m for m in from_committed)


@pytest.mark.parametrize("text", ["", "x", "c", "c1.p", "c-1", "c1.p1.2", "c1x"])
def test_foreign_event_ids_are_refused(text: str) -> None:
    assert parse_event_id(text) is None


def test_event_ids_parse_back_to_their_cursor() -> None:
    assert parse_event_id("c12") == Cursor(12)
    assert parse_event_id("c12.p3.2.540") == Cursor(12, 3, 2, 540)
    assert Cursor(12, 3, 2, 540).provisional_id() == "c12.p3.2.540"


class _Status:
    def __init__(self, history: list[dict[str, Any]], runtime: str, custom: Any = None) -> None:
        self.name = "job_orchestrator"
        self.historyEvents = history
        self._data = {
            "runtimeStatus": runtime,
            "customStatus": custom,
            "output": {"status": "completed", "answer": "A."},
        }

    def to_json(self) -> dict[str, Any]:
        return dict(self._data)


class _Client:
    """A durable client whose job advances one history event per read."""

    def __init__(self) -> None:
        self.reads = 0

    async def get_status(self, job_id: str, **_: Any) -> _Status:
        self.reads += 1
        cut = min(self.reads, len(HISTORY))
        return _Status(HISTORY[:cut], "Completed" if cut == len(HISTORY) else "Running")


def test_many_subscribers_share_one_poller_and_a_stalled_one_blocks_nobody() -> None:
    import asyncio

    from api.events import FEEDS, stream

    async def scenario() -> tuple[list[list[str]], int, int]:
        client = _Client()

        async def subscriber() -> list[str]:
            got: list[str] = []
            async for chunk in stream("job-x", client, Cursor(), poll_s=0.001, keepalive_s=5, max_s=30):
                got.extend(i for i in _ids([chunk]) if "." not in i)
            return got

        stalled = stream("job-x", client, Cursor(), poll_s=0.001, keepalive_s=5, max_s=30)
        await stalled.__anext__()  # joined, then never read again
        readers = await asyncio.gather(*(subscriber() for _ in range(50)))
        subscribed = FEEDS.by_job["job-x"].subscribers
        await stalled.aclose()
        return readers, client.reads, subscribed

    readers, reads, subscribed_after = asyncio.run(scenario())
    whole = committed_events(HISTORY, "Completed", {"status": "completed", "answer": "A."}, None, STREAMING)
    assert all(r == [f"c{i}" for i in range(1, len(whole) + 1)] for r in readers)
    # One poller for 51 subscribers: about one read per history event, not one per subscriber.
    assert reads <= len(HISTORY) + 2
    assert subscribed_after == 1
    assert "job-x" not in FEEDS.by_job and FEEDS.open == 0


@pytest.mark.parametrize("past", [0, 1, 999])
def test_a_resume_point_at_or_past_a_finished_jobs_end_is_sent_the_end_again(past: int) -> None:
    # An empty answer would make a browser's EventSource reconnect for ever: the end tells it to stop.
    committed = committed_events(HISTORY, "Completed", {"status": "completed", "answer": "A."}, None, STREAMING)
    out, cursor = _after(Snapshot(committed=committed, ended=True), Cursor(len(committed) + past), Sent())
    assert _ids(out) == [f"c{len(committed)}"] and "event: end" in out[0] and cursor.seq == len(committed)
    # While the job runs, a cursor past what this instance has read waits for the history (nothing sent).
    running = Snapshot(committed=committed[:-2], ended=False)
    assert _after(running, Cursor(len(committed)), Sent())[0] == []


def test_a_client_that_stops_reading_is_dropped_and_leaves_the_feed() -> None:
    import asyncio

    from api.events import FEEDS, DroppingStreamingResponse, stream

    async def scenario() -> tuple[int, int]:
        client = _Client()
        body = stream("job-y", client, Cursor(), poll_s=0.001, keepalive_s=5, max_s=30)
        response = DroppingStreamingResponse(body, media_type="text/event-stream", send_timeout_s=0.05)
        sent: list[dict[str, Any]] = []
        blocked = asyncio.Event()

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message.get("body"):
                await blocked.wait()  # the socket's buffers are full: this send never completes

        await response.stream_response(send)
        return len(sent), FEEDS.open

    sends, still_open = asyncio.run(scenario())
    assert sends == 2  # the response start, then the first body that never went out
    assert still_open == 0 and "job-y" not in FEEDS.by_job


def test_agent_tool_calls_become_tool_call_events_beside_their_steps() -> None:
    lookup = _task("t1", 1, "consult_rag", "2026-01-01T00:00:01.5Z")
    family = _task("t2", 1, "call_tool", "2026-01-01T00:00:02.5Z", failed=True)
    family["Input"]["task"] = {"tool": "http.weather", "arguments": {"city": "Oslo"}}
    turn = _task("turn-1", 1, "agent_turn", "2026-01-01T00:00:00.5Z")
    nested = _task("research-t3", 2, "execute_azure_sql", "2026-01-01T00:00:03.5Z")
    events = committed_events([turn, lookup, family, nested], "Running", None, None, STREAMING)
    calls = [(e.step_id, e.tool, e.state, e.summary) for e in events if e.type == "tool_call"]
    assert calls == [
        ("t1", "consult_rag", "started", None),
        ("t1", "consult_rag", "succeeded", None),
        ("t2", "http.weather", "started", None),
        ("t2", "http.weather", "failed", "stream broke"),
        ("research-t3", "execute_azure_sql", "started", None),
        ("research-t3", "execute_azure_sql", "succeeded", None),
    ]
    # The Executor's turn is a step, not a tool call; a failed tool call of a non-streaming kind is not superseded.
    assert ("turn-1", "succeeded") in [(e.step_id, e.state) for e in events if isinstance(e, StepEvent)]
    assert not [e for e in events if e.type == "superseded"]


def test_current_state_a_client_already_has_is_not_repeated() -> None:
    committed = committed_events(HISTORY[:2], "Running", None, None, STREAMING)
    running = {
        "status": "running",
        "steps": [{"id": "answer", "kind": "generate_response", "state": "running", "attempts": 1}],
    }
    sent = Sent()
    first, cursor = _after(
        Snapshot(committed=committed, state=current_state("Running", running, None, "t1")), Cursor(), sent
    )
    assert [m.split("\n")[1] for m in first[len(committed) :]] == ["event: status", "event: step"]
    # One more committed event: the state is derived again (new time), but nothing in it changed for this client.
    more = committed_events(HISTORY[:3], "Running", None, None, STREAMING)
    again, cursor = _after(Snapshot(committed=more, state=current_state("Running", running, None, "t2")), cursor, sent)
    assert len(again) == len(more) - len(committed) and all('"committed":true' in m for m in again)
    waiting = {**running, "status": "waiting_for_user"}
    changed, _ = _after(Snapshot(committed=more, state=current_state("Running", waiting, None, "t3")), cursor, sent)
    assert len(changed) == 1 and '"status":"waiting_for_user"' in changed[0]


class _QuietJob:
    """A job that does not change until the test says so; counts reads with and without the history."""

    def __init__(self, updated: str) -> None:
        self.updated = updated
        self.custom: dict[str, Any] = {"status": "running", "steps": []}
        self.full = 0
        self.glances = 0

    async def get_status(self, job_id: str, *, show_history: bool = False, **_: Any) -> Any:
        from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

        if show_history:
            self.full += 1
        else:
            self.glances += 1
        return DurableOrchestrationStatus(
            name="job_orchestrator",
            instanceId=job_id,
            createdTime="2026-01-01T00:00:00Z",
            lastUpdatedTime=self.updated,
            runtimeStatus="Running",
            customStatus=self.custom,
            historyEvents=HISTORY[:2] if show_history else None,
        )


def test_a_job_that_does_not_change_is_read_less_and_less_often_and_without_its_history() -> None:
    import asyncio

    from api.events import JobFeed

    async def scenario() -> tuple[int, int, int, int, str]:
        job = _QuietJob("2026-01-01T00:00:00Z")  # last checkpoint long ago: a glance can tell a change
        feed = JobFeed("job-quiet", job, poll_s=0.01, idle_s=0.2)
        feed.start()
        await asyncio.sleep(1.5)  # at a fixed 10 ms, 150 reads
        quiet_full, quiet_glances = job.full, job.glances
        # A checkpoint: the glance sees it, one read of the history follows, and the subscribers are told.
        job.updated, job.custom = "2026-01-01T00:01:00Z", {"status": "waiting_for_user", "steps": []}
        seen = feed.snapshot

        async def told() -> None:
            while feed.snapshot is seen:
                await feed.changed(seen, 1.0)

        await asyncio.wait_for(told(), 60)  # a bound against a hang, not a timing: the change comes in ms
        status = str(feed.snapshot.state[0].model_dump().get("status"))
        feed.stop()
        return quiet_full, quiet_glances, job.full, feed.reads, status

    quiet_full, quiet_glances, full, reads, status = asyncio.run(scenario())
    assert quiet_full == 1 and quiet_glances < 40
    assert full == 2 and reads == 2 and status == "waiting_for_user"


def test_a_recent_checkpoint_is_read_with_its_history_until_it_has_settled() -> None:
    import asyncio
    from datetime import UTC, datetime

    from api.events import JobFeed

    async def scenario() -> tuple[int, int]:
        # Last-updated times have a precision of one second: a change in the same second would look the same.
        job = _QuietJob(datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        feed = JobFeed("job-recent", job, poll_s=0.01, idle_s=0.05)
        feed.start()
        await asyncio.sleep(0.5)
        feed.stop()
        return job.full, job.glances

    full, glances = asyncio.run(scenario())
    assert full > 1 and glances == 0


def test_the_wait_between_reads_grows_with_the_quiet_time_up_to_the_idle_maximum() -> None:
    import asyncio

    from api.events import Feeds, JobFeed

    feed = JobFeed("job-i", None, poll_s=0.05, idle_s=1.0)
    assert feed.interval(0.0) == 0.05  # just changed
    assert feed.interval(2.0) == 0.5  # a quarter of the quiet time
    assert feed.interval(60.0) == 1.0  # never longer than the idle maximum
    assert feed.interval(0.0, failures=2) == pytest.approx(0.15)  # failed reads wait longer

    async def joined_later() -> float:
        feeds = Feeds()
        job = _QuietJob("2026-01-01T00:00:00Z")
        first = feeds.join("job-j", job, 0.05, 1.0)
        loop = asyncio.get_running_loop()
        first._quiet_since = loop.time() - 60  # quiet for a minute
        assert first.interval(loop.time()) == 1.0
        second = feeds.join("job-j", job, 0.05, 1.0)
        waited = second.interval(loop.time())
        # This process answered the job's question (or cancelled it): the same, without a new subscriber.
        first._quiet_since = loop.time() - 60
        feeds.nudge("job-j")
        feeds.nudge("job-not-watched")
        assert first.interval(loop.time()) == 0.05
        feeds.leave(first)
        feeds.leave(second)
        return waited

    assert asyncio.run(joined_later()) == 0.05  # a new subscriber brings the full rate back
