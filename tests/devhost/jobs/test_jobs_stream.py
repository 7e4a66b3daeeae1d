"""``ask`` and ``jobs attach`` follow the job's event stream and resume it after a break (Last-Event-ID).

A real ``devhost serve`` runs the app; a loopback proxy (tests/devhost/jobs/cutproxy.py) cuts the stream in the
middle of a message, as a dying network path does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devhost.jobs.stream import EventStream, JobEvent
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.devhost.jobs.cutproxy import CutProxy
from tests.devhost.jobs.test_jobs_cli import MIXED_Q, devhost
from tests.jobs.jobclient import JobClient


def start(tmp: Path, **env: str) -> DevHostProcess:
    proc = DevHostProcess(REPO_ROOT, tmp, env={"JOB_RETRY_FIRST_INTERVAL_MS": "50", **env})
    proc.start()
    return proc


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start(tmp_path_factory.mktemp("cli-stream-host"))
    yield proc
    proc.stop()


@pytest.fixture
def retry_host(tmp_path: Path) -> Iterator[DevHostProcess]:
    """A host whose answer writer is rate limited once: its first job's answer step takes two attempts."""
    proc = start(tmp_path / "host", OFFLINE_LLM_FAULTS="write_answer:RATE_LIMITED:1")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def client_for(url: str, host: DevHostProcess) -> httpx.Client:
    assert host.keys is not None
    return httpx.Client(base_url=url, headers={"x-functions-key": host.keys.function}, timeout=30)


def read_all(url: str, host: DevHostProcess, job_id: str) -> tuple[list[JobEvent], EventStream]:
    with client_for(url, host) as client:
        stream = EventStream(client, job_id, sleep=lambda _s: None)
        return list(stream), stream


def test_a_whole_job_read_through_a_cut_stream_is_the_same_story_without_a_gap_or_a_repeat(
    host: DevHostProcess, jobs: JobClient
) -> None:
    job_id = jobs.submit(MIXED_Q)
    jobs.wait(job_id)
    whole, direct = read_all(host.base_url, host, job_id)
    assert direct.resumed == 0
    committed = [e.id for e in whole if e.committed]
    assert committed and len(committed) == len(set(committed))
    assert whole[-1].type == "end" and whole[-1].data["status"] == "completed"

    proxy = CutProxy(host.port or 0, cuts=2, after_messages=3)
    try:
        resumed, stream = read_all(proxy.url, host, job_id)
    finally:
        proxy.close()
    # Two breaks, each in the middle of a message: the client connected three times, each time after the last
    # whole message it had.
    assert stream.resumed == 2 and [s.cut for s in proxy.streams] == [True, True, False]
    assert proxy.streams[0].last_event_id is None
    assert proxy.streams[1].last_event_id == proxy.streams[0].ids_forwarded[2]
    assert proxy.streams[2].last_event_id == proxy.streams[1].ids_forwarded[2]
    # Exactly the same committed events, in the same order: none lost, none repeated.
    assert [e.id for e in resumed if e.committed] == committed
    assert [e.data for e in resumed if e.committed] == [e.data for e in whole if e.committed]


def test_ask_follows_the_stream_resumes_it_and_prints_each_step_once(retry_host: DevHostProcess) -> None:
    proxy = CutProxy(retry_host.port or 0, cuts=1, after_messages=4)
    try:
        assert retry_host.keys is not None
        result = devhost("ask", MIXED_Q, "--url", proxy.url, "--key", retry_host.keys.function)
    finally:
        proxy.close()
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "West" in out and "returns-and-refunds.md#" in out
    # It followed the stream (no fallback to polling) and resumed after the break with the last id it had.
    assert "polling the job instead" not in out
    assert len(proxy.streams) >= 2 and proxy.streams[0].cut
    resumed_after = proxy.streams[1].last_event_id
    assert resumed_after == proxy.streams[0].ids_forwarded[3]
    assert f"resuming after {resumed_after}" in out
    # Step progress was printed live, each change once although the stream was read twice around the break.
    lines = [line.split("  ", 1)[1] for line in out.splitlines() if "  " in line and ": attempt " in line]
    assert lines and max(Counter(lines).values()) == 1, lines
    answer_lines = [line for line in lines if "(generate_response)" in line]
    assert any("attempt 1 started" in line for line in answer_lines), out
    assert any("attempt 2 started" in line for line in answer_lines), out


def test_attach_json_prints_only_the_final_view_on_stdout(host: DevHostProcess, jobs: JobClient) -> None:
    job_id = jobs.submit(MIXED_Q)
    assert host.keys is not None
    result = devhost("jobs", "attach", job_id, "--url", host.base_url, "--key", host.keys.function, "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)  # nothing but the view: `| jq` works
    assert view["id"] == job_id and view["status"] == "completed"
    assert "polling the job instead" not in result.stderr


def test_a_stream_that_never_gets_through_gives_way_to_polling(host: DevHostProcess) -> None:
    # Every connection to the stream dies before its first whole message: the CLI says so and polls the view.
    proxy = CutProxy(host.port or 0, cuts=100, after_messages=0)
    try:
        assert host.keys is not None
        result = devhost("ask", MIXED_Q, "--url", proxy.url, "--key", host.keys.function)
    finally:
        proxy.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "West" in result.stdout
    assert "polling the job instead" in result.stdout
