"""Barriers of the job event stream, each on its own: the caller must see the job (as for the view), a
hostile ``Last-Event-ID`` / ``after=`` is a 400 naming it (never a 5xx, never a cursor), and the console
renders what the stream carries (question text, log lines, file names) as text, never as HTML.

The handler is the app's real one; the Durable client answers ``get_status`` with the SDK's own status type.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from api.events import guarded_events
from shared.jobs.events import Cursor, parse_event_id
from shared.runtime.settings import reset_settings
from tests.api.test_definitions import principal
from tests.security.test_artifacts_barriers import Jobs

WEB = Path(__file__).resolve().parents[2] / "web"


@pytest.fixture
def easy_auth(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")
    reset_settings()
    yield
    reset_settings()


def open_stream(job_id: str, user: str, *, after: str | None = None, last_id: str | None = None) -> Response:
    headers = dict(principal(user))
    if last_id is not None:
        headers["last-event-id"] = last_id
    scope = {
        "type": "http",
        "method": "GET",
        "path": f"/api/jobs/{job_id}/events",
        "query_string": f"after={after}".encode() if after is not None else b"",
        "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()],
    }
    client: Any = Jobs({"job-a": "alice", "job-b": "bob"})
    return asyncio.run(guarded_events(Request(scope), client, job_id))


def error_of(resp: Response) -> tuple[int, str, str | None]:
    err = json.loads(bytes(resp.body))["error"]
    return resp.status_code, err["code"], err.get("field")


def test_another_users_job_has_no_stream(easy_auth: None) -> None:
    assert error_of(open_stream("job-b", "alice"))[:2] == (404, "JOB_NOT_FOUND")
    assert error_of(open_stream("job-missing", "alice"))[:2] == (404, "JOB_NOT_FOUND")


@pytest.mark.parametrize(
    "hostile",
    ["-1", "c-1", "c1e9", "c" + "9" * 10, "c1.p1.1", "c1.p9999999.1.1", "c1\r\nevent: x", "c1;drop", "%00", "x" * 5000],
)
@pytest.mark.parametrize("where", ["after", "last_id"])
def test_a_hostile_resume_point_is_a_400_naming_it(easy_auth: None, hostile: str, where: str) -> None:
    resp = open_stream("job-a", "alice", **{where: hostile})
    assert error_of(resp) == (400, "INVALID_EVENT_ID", "after" if where == "after" else "Last-Event-ID")


def test_event_ids_parse_only_as_bounded_cursors() -> None:
    assert parse_event_id("c12") == Cursor(12)
    assert parse_event_id("c3.p2.1.40") == Cursor(3, 2, 1, 40)
    assert parse_event_id("c" + "9" * 10) is None  # more digits than any real job: no huge ints


# What would turn data into markup or code in the console's origin.
HTML_SINKS = re.compile(r"\.(innerHTML|outerHTML)\s*[+]?=|insertAdjacentHTML|document\.write|\beval\(|new Function\(")


@pytest.mark.parametrize("script", sorted(p.name for p in WEB.glob("*.js")))
def test_the_console_never_renders_data_as_html(script: str) -> None:
    source = (WEB / script).read_text(encoding="utf-8")
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)  # comments may name what is avoided
    assert HTML_SINKS.search(code) is None


def test_one_user_cannot_hold_more_than_their_share_of_streams(
    easy_auth: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.events import FEEDS

    monkeypatch.setenv("EVENTS_MAX_STREAMS_PER_USER", "2")
    reset_settings()
    monkeypatch.setattr(FEEDS, "by_user", {"alice": 2})
    assert error_of(open_stream("job-a", "alice"))[:2] == (429, "TOO_MANY_STREAMS")
    # Another user is not held back by alice's streams.
    assert open_stream("job-b", "bob").status_code == 200


def test_a_users_streams_are_counted_while_open_and_released_when_they_end() -> None:
    from api.errors import ApiError
    from api.events import Feeds

    feeds = Feeds()
    first = feeds.admit("alice", max_open=10, max_per_user=2)
    second = feeds.admit("alice", max_open=10, max_per_user=2)
    anonymous = feeds.admit(None, max_open=10, max_per_user=2)
    assert feeds.by_user == {"alice": 2} and feeds.open == 3
    with pytest.raises(ApiError) as refused:
        feeds.admit("alice", max_open=10, max_per_user=2)
    assert (refused.value.status, refused.value.code) == (429, "TOO_MANY_STREAMS") and feeds.open == 3
    first.release()
    first.release()  # the stream's end and the response's end both release: counted once
    second.release()
    assert feeds.by_user == {} and feeds.open == 1
    with pytest.raises(ApiError) as full:
        feeds.admit("bob", max_open=1, max_per_user=2)
    assert (full.value.status, full.value.code) == (503, "TOO_MANY_STREAMS")
    anonymous.release()
    assert feeds.open == 0


def test_streams_opened_at_the_same_moment_cannot_all_pass_the_check(
    easy_auth: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 opens of one user at once, each pausing in the ownership read (an await) before it is admitted."""
    from api.events import FEEDS

    monkeypatch.setenv("EVENTS_MAX_STREAMS_PER_USER", "20")
    reset_settings()

    async def scenario() -> tuple[list[int], int, int]:
        client: Any = Jobs({"job-a": "alice"})
        real = client.get_status

        async def slow_status(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0.01)  # every request is inside this await when the others arrive
            return await real(*args, **kwargs)

        client.get_status = slow_status
        headers = [(k.lower().encode(), v.encode("latin-1")) for k, v in principal("alice").items()]
        scope = {"type": "http", "method": "GET", "path": "/api/jobs/job-a/events", "query_string": b""}
        answers = await asyncio.gather(
            *(guarded_events(Request({**scope, "headers": headers}), client, "job-a") for _ in range(60))
        )
        held = FEEDS.by_user.get("alice", 0)
        for answer in answers:  # responses never sent: releasing them gives every slot back
            slot = getattr(answer, "slot", None)
            if slot is not None:
                slot.release()
        return [a.status_code for a in answers], held, FEEDS.by_user.get("alice", 0)

    codes, held, left = asyncio.run(scenario())
    assert sorted(codes).count(200) == 20 and sorted(codes).count(429) == 40
    assert held == 20 and left == 0
