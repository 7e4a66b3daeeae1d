"""States never contradict across the event stream, the job view and the CLI (issue 15).

A real devhost runs the app (embedded model): the job waits for a person to approve its SQL step, and its
answer writer is rate limited once, so the answer step is retried after a backoff. One client follows the
stream live through the wait and the retry; then the stream's story, ``GET /api/jobs/{id}`` and
``python -m devhost jobs show <id> --json`` must agree on each step's state and attempts and on the job's
status, and the live current state must agree with the history that replaced it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e.sse import Message, committed_ids, read
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
# Long enough for the stream's poller (every 50 ms) to see the step waiting out its backoff.
RETRY_MS = 2000


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("events-agree")
    env = {
        "JOB_RETRY_FIRST_INTERVAL_MS": str(RETRY_MS),
        "OFFLINE_LLM_FAULTS": "write_answer:RATE_LIMITED:1",
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
    }
    proc = DevHostProcess(REPO_ROOT, data / "data", env=env)
    proc.start()
    yield proc
    proc.stop()


def _steps_of_stream(found: list[Message]) -> dict[str, tuple[str, int]]:
    """Each step's last committed state and its highest attempt, as the stream's committed story tells."""
    told: dict[str, tuple[str, int]] = {}
    for m in found:
        if m.event == "step" and m.committed and m.data:
            step_id, state, attempt = m.data["step_id"], m.data["state"], m.data["attempt"]
            told[step_id] = (state, max(attempt, told.get(step_id, ("", 0))[1]))
    return told


def _steps_of_view(view: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {s["id"]: (s["state"], s["attempts"]) for s in view["steps"]}


def _cli_view(host: DevHostProcess, job_id: str) -> dict[str, Any]:
    assert host.keys is not None
    shown = subprocess.run(
        [sys.executable, "-m", "devhost", "jobs", "show", job_id, "--url", host.base_url, "--key", host.keys.function]
        + ["--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    view: dict[str, Any] = json.loads(shown.stdout)
    return view


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _step_events(found: list[Message], step_id: str, state: str, *, committed: bool) -> list[dict[str, Any]]:
    """The data of one step's events in one state, committed or current-state ones."""
    return [
        m.data
        for m in found
        if m.event == "step" and m.committed == committed and m.data
        if (m.data["step_id"], m.data["state"]) == (step_id, state)
    ]


def _live(found: list[Message], step_id: str, state: str) -> list[dict[str, Any]]:
    return _step_events(found, step_id, state, committed=False)


def _committed(found: list[Message], step_id: str, state: str) -> list[dict[str, Any]]:
    return _step_events(found, step_id, state, committed=True)


def test_the_stream_the_view_and_the_cli_tell_the_same_states_and_attempts(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    job_id = jobs.submit(MIXED_Q, approval={"sql": "always"})
    first = read(jobs.http, job_id, stop=lambda m: m.event == "question")
    question = first[-1].data or {}
    assert jobs.answer(job_id, "approve", question_id=question["question_id"]).status_code == 202
    rest = read(jobs.http, job_id, last_id=first[-1].id)
    live = first + rest
    assert rest[-1].event == "end"

    whole = read(jobs.http, job_id)
    assert committed_ids(whole) == committed_ids(live)
    view = jobs.view(job_id)
    cli = _cli_view(host, job_id)

    # The job's status: the stream's end, the view and the CLI.
    end = whole[-1].data or {}
    assert end["status"] == view["status"] == cli["status"] == "completed"
    # Each step: the same state and the same number of attempts everywhere.
    told = _steps_of_stream(whole)
    assert _steps_of_view(view) == _steps_of_view(cli)
    assert {k: v for k, v in told.items() if k in _steps_of_view(view)} == _steps_of_view(view)
    assert set(told) - set(_steps_of_view(view)) == {"plan"}  # planning is a row of the stream, not a plan step

    sql = next(s["id"] for s in view["steps"] if s["kind"] == "execute_azure_sql")
    answer = next(s["id"] for s in view["steps"] if s["kind"] == "generate_response")
    # The SQL step drafts its statement, then runs it once approved: two attempts, neither failed.
    assert told[answer] == ("succeeded", 2) and told[sql][0] == "succeeded"

    # The live story agrees with the history that replaced it, times included.
    (failed,) = _committed(whole, answer, "failed")
    retrying = _live(live, answer, "retrying")
    assert retrying, "the stream never showed the retry wait"
    assert {(r["attempt"], r["at"]) for r in retrying} == {(failed["attempt"] + 1, failed["at"])}
    second = next(s for s in _committed(whole, answer, "started") if s["attempt"] == 2)
    assert _t(retrying[0]["retry_at"]) <= _t(second["at"])
    waiting = _live(live, sql, "waiting")
    assert waiting and {w["at"] for w in waiting} == {question["at"]}
    for started in _live(live, answer, "started"):
        truth = next(s for s in _committed(whole, answer, "started") if s["attempt"] == started["attempt"])
        # What set the attempt off comes before its scheduling; a retried one starts after the failure (not at
        # the step's first start).
        assert _t(started["at"]) <= _t(truth["at"]), (started, truth)
        if started["attempt"] == 2:
            assert _t(failed["at"]) < _t(started["at"]), (started, failed)
