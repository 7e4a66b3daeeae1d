"""The job event stream on a real devhost process running the app (embedded model): whole jobs, resuming,
limits, a host killed under a connected client, and many subscribers.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e.sse import Message, committed_ids, read
from tests.jobs.jobclient import JobClient

DOCS_Q = "What does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"


def _env(data: Path, **extra: str) -> dict[str, str]:
    return {
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
        **extra,
    }


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("events-host")
    proc = DevHostProcess(REPO_ROOT, data / "data", env=_env(data))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def _is_question(message: Message) -> bool:
    return message.event == "question"


def _numbers(ids: list[str]) -> list[int]:
    return [int(i[1:]) for i in ids]


def test_a_client_reads_a_whole_job_in_order_and_the_stream_ends(jobs: JobClient) -> None:
    job_id = jobs.submit(DOCS_Q)
    live = read(jobs.http, job_id)
    view = jobs.wait(job_id)
    assert view["links"]["events"].endswith(f"/api/jobs/{job_id}/events")
    ids = committed_ids(live)
    assert _numbers(ids) == list(range(1, len(ids) + 1))
    assert live[-1].event == "end" and live[-1].data == {
        "type": "end",
        "at": live[-1].data["at"] if live[-1].data else None,
        "committed": True,
        "status": "completed",
        "answer_available": True,
    }
    steps = {(m.data["step_id"], m.data["state"]) for m in live if m.event == "step" and m.committed and m.data}
    assert {(s["id"], "succeeded") for s in view["steps"]} <= steps
    usage = [m.data for m in live if m.event == "usage" and m.data]
    assert usage[-1]["total_tokens"] == view["usage"]["total"]["total_tokens"]
    # Every data line is one JSON object with type, at and committed.
    assert all(m.data and {"type", "at", "committed"} <= set(m.data) for m in live if m.id)
    # A client that connects after the end gets the same committed story, then the end.
    after = read(jobs.http, job_id)
    assert committed_ids(after) == ids and [m.data for m in after] == [m.data for m in live if m.committed]


def test_reconnecting_mid_job_with_last_event_id_loses_and_repeats_nothing(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    first = read(jobs.http, job_id, stop=_is_question)
    assert first[-1].event == "question" and not first[-1].committed
    question = first[-1].data or {}
    assert jobs.answer(job_id, "approve", question_id=question["question_id"]).status_code == 202
    rest = read(jobs.http, job_id, last_id=first[-1].id)
    assert rest[-1].event == "end"
    joined = committed_ids(first) + committed_ids(rest)
    assert _numbers(joined) == list(range(1, len(joined) + 1))
    whole = read(jobs.http, job_id)
    assert committed_ids(whole) == joined
    # ?after= resumes the same way as the header.
    tail = read(jobs.http, job_id, after=joined[4])
    assert committed_ids(tail) == joined[5:]


def test_a_waiting_job_keeps_its_stream_alive_until_the_maximum_duration_then_reconnect(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("events-short")
    proc = DevHostProcess(REPO_ROOT, data / "data", env=_env(data, EVENTS_MAX_STREAM_S="1.5", EVENTS_KEEPALIVE_S="0.2"))
    proc.start()
    try:
        jobs = JobClient(proc)
        job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
        jobs.wait(job_id, {"waiting_for_user"})
        got = read(jobs.http, job_id)
        assert any(m.data is None for m in got), "no keep-alive comment on an idle stream"
        assert got[-1].event == "reconnect" and got[-1].data and got[-1].data["after"] == got[-1].id
        again = read(jobs.http, job_id, last_id=got[-1].id)
        assert committed_ids(again) == [] and again[-1].event == "reconnect"
    finally:
        proc.stop()


def test_errors_are_4xx_with_stable_codes(jobs: JobClient, host: DevHostProcess) -> None:
    missing = jobs.http.get("/api/jobs/nope/events")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "JOB_NOT_FOUND"
    job_id = jobs.submit(DOCS_Q)
    bad = jobs.http.get(f"/api/jobs/{job_id}/events", params={"after": "c1;DROP"})
    assert bad.status_code == 400 and bad.json()["error"] == {
        "code": "INVALID_EVENT_ID",
        "message": "after is not an event id of this stream",
        "field": "after",
    }
    no_key = httpx.get(f"{host.base_url}/api/jobs/{job_id}/events")
    assert no_key.status_code == 401


def test_a_client_connected_while_the_host_is_killed_resumes_after_the_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("events-kill")
    proc = DevHostProcess(REPO_ROOT, data / "data", env=_env(data))
    proc.start()
    jobs = JobClient(proc)
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    got: list[Message] = []
    with pytest.raises(httpx.HTTPError):
        with jobs.http.stream("GET", f"/api/jobs/{job_id}/events", timeout=60) as resp:
            from tests.e2e.sse import messages

            for message in messages(resp.iter_lines()):
                got.append(message)
                if message.event == "question":
                    proc.kill()  # SIGKILL while this client is connected and reading
    assert got and got[-1].event == "question"
    proc.start()
    try:
        jobs = JobClient(proc)
        assert jobs.answer(job_id, "approve", question_id=(got[-1].data or {})["question_id"]).status_code == 202
        rest = read(jobs.http, job_id, last_id=got[-1].id)
        joined = committed_ids(got) + committed_ids(rest)
        assert _numbers(joined) == list(range(1, len(joined) + 1)) and rest[-1].event == "end"
        assert committed_ids(read(jobs.http, job_id)) == joined
    finally:
        proc.stop()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _open_raw(port: int, path: str, key: str) -> socket.socket:
    """A subscriber that sends its request and never reads a byte."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-functions-key: {key}\r\n\r\n".encode())
    return sock


def test_many_subscribers_share_one_poller_and_a_client_that_never_reads_costs_bounded_memory(
    jobs: JobClient, host: DevHostProcess
) -> None:
    assert host.proc is not None and host.port is not None and host.keys is not None
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    path = f"/api/jobs/{job_id}/events"
    before = _rss_kb(host.proc.pid)
    opened = host.output().count("Executing 'Functions.job_events'")
    idle = [_open_raw(host.port, path, host.keys.function) for _ in range(200)]
    try:
        # Wait until the host has opened all 200 streams (its log says so), then measure.
        deadline = time.monotonic() + 60
        while host.output().count("Executing 'Functions.job_events'") < opened + 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert host.output().count("Executing 'Functions.job_events'") >= opened + 200
        # Each of them has its stream open once one more, read, subscriber sees the question.
        watched = read(jobs.http, job_id, stop=_is_question)
        assert watched[-1].event == "question"
        during = _rss_kb(host.proc.pid)
        per_subscriber_kb = (during - before) / 200
        print(f"\nhost RSS {before} KB -> {during} KB with 200 idle subscribers: {per_subscriber_kb:.1f} KB each")
        assert per_subscriber_kb < 200, f"{per_subscriber_kb:.0f} KB per idle subscriber"
        # The job goes on while nobody of them reads; a reading client still gets the end.
        assert jobs.answer(job_id, "approve").status_code == 202
        rest = read(jobs.http, job_id, last_id=watched[-1].id)
        assert rest[-1].event == "end"
    finally:
        for sock in idle:
            sock.close()
    assert os.path.exists(f"/proc/{host.proc.pid}")


def test_an_agent_job_streams_its_tool_calls(jobs: JobClient) -> None:
    question = (
        "What does the returns policy say about refunds after 30 days, and which region had the most returns in Q3?"
    )
    job_id = jobs.submit(question, mode="agent")
    found = read(jobs.http, job_id)
    view = jobs.wait(job_id)
    calls = [(d["step_id"], d["tool"], d["state"]) for m in found if m.event == "tool_call" and (d := m.data or {})]
    tool_steps = [s for s in view["steps"] if s.get("turn") is not None]
    # Calls of one turn run together, so they may end in any order; each one starts, then succeeds.
    assert tool_steps and sorted(calls) == sorted(
        call for s in tool_steps for call in ((s["id"], s["kind"], "started"), (s["id"], s["kind"], "succeeded"))
    )
    for step in tool_steps:
        mine = [state for step_id, _, state in calls if step_id == step["id"]]
        assert mine == ["started", "succeeded"]
    assert found[-1].event == "end" and (found[-1].data or {})["status"] == "completed"


def test_the_stream_belongs_to_the_jobs_owner_like_the_view(tmp_path_factory: pytest.TempPathFactory) -> None:
    data = tmp_path_factory.mktemp("events-owner")
    proc = DevHostProcess(REPO_ROOT, data / "data", env=_env(data), extra_args=["--principal-header"])
    proc.start()
    try:
        alice, bob, nobody = (
            httpx.Client(base_url=proc.base_url, headers=h, timeout=60)
            for h in ({"X-Devhost-Principal": "alice"}, {"X-Devhost-Principal": "bob"}, {})
        )
        resp = alice.post("/api/jobs", json={"question": SQL_Q, "approval": {"sql": "always"}})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        theirs = bob.get(f"/api/jobs/{job_id}/events")
        assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "JOB_NOT_FOUND"
        anonymous = nobody.get(f"/api/jobs/{job_id}/events")
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "UNAUTHENTICATED"
        mine = read(alice, job_id, stop=_is_question)
        assert mine[-1].event == "question"
    finally:
        proc.stop()


def test_a_resume_point_at_or_past_a_finished_jobs_end_is_sent_the_end(jobs: JobClient) -> None:
    job_id = jobs.submit(DOCS_Q)
    whole = read(jobs.http, job_id)
    end = whole[-1]
    assert end.event == "end" and end.id is not None
    last = int(end.id[1:])
    # The id of the end itself, and ids past it: one message, the end again (an EventSource then stops
    # instead of reconnecting for ever on an empty answer).
    for resume in (end.id, f"c{last + 1}", f"c{last + 500}"):
        again = read(jobs.http, job_id, last_id=resume)
        assert [(m.id, m.event, m.data) for m in again] == [(end.id, "end", end.data)]
    tail = read(jobs.http, job_id, after=f"c{last + 2}")
    assert [m.event for m in tail] == ["end"]


def test_one_user_opening_sixty_streams_at_once_gets_exactly_their_share(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("events-burst")
    proc = DevHostProcess(REPO_ROOT, data / "data", env=_env(data), extra_args=["--principal-header"])
    proc.start()
    try:
        alice = httpx.Client(base_url=proc.base_url, headers={"X-Devhost-Principal": "alice"}, timeout=60)
        resp = alice.post("/api/jobs", json={"question": SQL_Q, "approval": {"sql": "always"}})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        deadline = time.monotonic() + 60
        while alice.get(f"/api/jobs/{job_id}").json()["status"] != "waiting_for_user":
            assert time.monotonic() < deadline, "the job never asked for its approval"
            time.sleep(0.1)  # then it waits: every admitted stream stays open

        async def burst() -> tuple[list[int], list[str]]:
            limits = httpx.Limits(max_connections=100)
            headers = {"X-Devhost-Principal": "alice"}
            async with httpx.AsyncClient(base_url=proc.base_url, headers=headers, timeout=60, limits=limits) as http:
                opened = [http.stream("GET", f"/api/jobs/{job_id}/events") for _ in range(60)]
                try:
                    answers = await asyncio.gather(*(stream.__aenter__() for stream in opened))
                    codes = [a.status_code for a in answers]
                    refused = [(await a.aread()).decode() for a in answers if a.status_code != 200]
                    # Held open until every one of the 60 has its answer.
                    return codes, refused
                finally:
                    await asyncio.gather(*(s.__aexit__(None, None, None) for s in opened), return_exceptions=True)

        codes, refused = asyncio.run(burst())
        assert codes.count(200) == 20 and codes.count(429) == 40, codes
        assert all('"TOO_MANY_STREAMS"' in body for body in refused)

        # Once they are closed, the user has their share back.
        def one_more() -> int:
            with alice.stream("GET", f"/api/jobs/{job_id}/events") as resp:
                return resp.status_code

        deadline = time.monotonic() + 30
        while one_more() == 429:
            assert time.monotonic() < deadline, "the closed streams were never released"
            time.sleep(0.2)
    finally:
        proc.stop()
