"""Human answers over HTTP on a real devhost: they name the question shown, one wins, bad SQL edits are 400.

Also the states the API shows for failed, retrying and waiting jobs (issue 9 §2 and §3).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

SQL_Q = "Which region had the most returns in Q3?"
DOCS_Q = "What does the returns policy say about refunds after 30 days?"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("answers-host"), env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def waiting_on(jobs: JobClient, job_id: str, other_than: str | None = None, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waiting = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
        if waiting["question_id"] != other_than:
            return dict(waiting)
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} asked nothing after {other_than}")


def error(resp: httpx.Response) -> dict:
    return dict(resp.json()["error"])


def test_feedback_must_name_the_question_that_is_waiting(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    waiting = waiting_on(jobs, job_id)
    qid = waiting["question_id"]
    unnamed = jobs.post_feedback(job_id, {"answer": "approve"})
    assert unnamed.status_code == 409, unnamed.text
    assert error(unnamed)["code"] == "STALE_QUESTION" and qid in error(unnamed)["message"]
    assert error(unnamed)["field"] == "question_id"
    other = jobs.post_feedback(job_id, {"answer": "approve", "question_id": "s1-q7"})
    assert other.status_code == 409 and error(other)["code"] == "STALE_QUESTION" and qid in error(other)["message"]
    # Neither resumed the job nor used up the question: it still waits, and the right answer is accepted.
    assert jobs.view(job_id)["waiting"]["question_id"] == qid
    assert jobs.post_feedback(job_id, {"answer": "approve", "question_id": qid}).status_code == 202
    assert jobs.wait(job_id)["status"] == "completed"


def test_of_many_concurrent_answers_exactly_one_is_accepted(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    qid = waiting_on(jobs, job_id)["question_id"]
    answers = ["approve", "reject"] * 4
    start = threading.Barrier(len(answers))

    def post(answer: str) -> tuple[str, httpx.Response]:
        with httpx.Client(base_url=jobs.host.base_url, headers=dict(jobs.http.headers), timeout=60) as http:
            start.wait()
            return answer, http.post(f"/api/jobs/{job_id}/feedback", json={"answer": answer, "question_id": qid})

    with ThreadPoolExecutor(len(answers)) as pool:
        results = list(pool.map(post, answers))
    # One answer wins the claim; the same answer posted again is accepted again (idempotent), the other refused.
    first = [answer for answer, resp in results if resp.status_code == 202 and not resp.json().get("repeated")]
    assert len(first) == 1, [(a, r.status_code, r.text) for a, r in results]
    for answer, resp in results:
        if answer == first[0]:
            assert resp.status_code == 202, resp.text
        else:
            assert resp.status_code == 409 and error(resp)["code"] == "ALREADY_ANSWERED", resp.text
    view = jobs.wait(job_id)
    assert view["status"] == "completed"
    # The one accepted answer is the one the job acted on, received once.
    assert view["steps"][0]["state"] == ("succeeded" if first[0] == "approve" else "skipped")
    assert [(a["question_id"], a["answer"]) for a in view["answers"]] == [(qid, first[0])]
    other = "reject" if first[0] == "approve" else "approve"
    again = jobs.post_feedback(job_id, {"answer": first[0], "question_id": qid})
    assert again.status_code == 202 and again.json()["repeated"] is True
    refused = jobs.post_feedback(job_id, {"answer": other, "question_id": qid})
    assert refused.status_code == 409 and error(refused)["code"] == "ALREADY_ANSWERED"


def test_a_sql_edit_the_guard_rejects_is_400_and_the_job_keeps_waiting(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    qid = waiting_on(jobs, job_id)["question_id"]
    for sql, reason in (
        ("DELETE FROM returns", "SQL rejected"),
        ("SELECT * FROM no_such_table", "SQL rejected"),
        ("   ", "non-empty"),
    ):
        resp = jobs.post_feedback(job_id, {"answer": {"action": "edit", "sql": sql}, "question_id": qid})
        assert resp.status_code == 400, resp.text
        assert error(resp)["code"] == "INVALID_ANSWER" and error(resp)["field"] == "answer.sql"
        assert reason in error(resp)["message"]
    view = jobs.view(job_id)
    assert view["status"] == "waiting_for_user" and view["waiting"]["question_id"] == qid
    # The refused edits did not consume the question: a valid edit is accepted and shown for approval again.
    edited = "SELECT reason, COUNT(*) AS n FROM returns GROUP BY reason"
    resp = jobs.post_feedback(job_id, {"answer": {"action": "edit", "sql": edited}, "question_id": qid})
    assert resp.status_code == 202, resp.text
    again = waiting_on(jobs, job_id, other_than=qid)
    assert "group by reason" in again["details"]["sql"].lower()
    assert jobs.answer(job_id, "reject", question_id=again["question_id"]).status_code == 202
    assert jobs.wait(job_id)["status"] == "completed"


def test_an_aborted_job_log_and_plan_say_failed(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    waiting = waiting_on(jobs, job_id)
    time.sleep(0.05)  # some human wait, so the step has one to report
    assert jobs.answer(job_id, "abort", question_id=waiting["question_id"]).status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "failed"
    lines = [e["message"] for e in view["log"]["entries"]]
    assert lines[-1].startswith("job failed at s1: REJECTED_BY_USER"), lines[-1]
    assert not any("Completed" in line for line in lines)
    assert view["plan"]["status"] == "planned"
    step = view["steps"][0]
    assert step["state"] == "failed" and step["waited_ms"] > 0
    assert step["duration_ms"] >= 0


def test_failed_planning_and_a_retrying_step_over_http(tmp_path: Path) -> None:
    env = {
        "OFFLINE_LLM_FAULTS": "plan:AUTH_FAILED:1,write_answer:RATE_LIMITED:1",
        "JOB_RETRY_FIRST_INTERVAL_MS": "2000",
    }
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()
    try:
        jobs = JobClient(host)
        failed = jobs.wait(jobs.submit(DOCS_Q))
        assert failed["status"] == "failed" and failed["plan"]["status"] == "failed" and failed["steps"] == []
        assert not any("Completed" in e["message"] for e in failed["log"]["entries"])

        job_id = jobs.submit(DOCS_Q)
        seen: dict | None = None
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            view = jobs.view(job_id)
            seen = next((s for s in view["steps"] if s["state"] == "retrying"), None)
            if view["status"] in ("completed", "failed"):
                break
            time.sleep(0.05)
        assert seen is not None, "the backoff was never shown as retrying"
        assert re.fullmatch(r"retrying at \d\d:\d\d:\d\d \(attempt 2 of \d+\)", seen["message"]), seen["message"]
        done = jobs.wait(job_id)
        assert done["status"] == "completed" and done["steps"][-1]["state"] == "succeeded"
    finally:
        host.stop()
