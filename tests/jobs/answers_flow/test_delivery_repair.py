"""The feedback endpoint and the job view repair a claimed answer whose delivery was cut short, on both claim
stores (the blob store against Azurite): the handlers run in process over a Durable client that stands in for
the extension (it records raised events; the first delivery dies like a host killed after the claim)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from api import jobs as api_jobs
from api.errors import ApiError
from devhost.storage.azurite import Azurite
from shared.jobs.models import JobState, Waiting
from shared.runtime import answer_claims
from shared.runtime.answer_claims import AnswerClaims, SqliteAnswerClaims, build_claims
from shared.runtime.settings import Settings

QUESTION = "s1-q1"


class Crash(Exception):
    """The host died between the claim and the delivery."""


class _Status:
    def __init__(self, data: dict[str, Any]) -> None:
        self.name = "job_orchestrator"
        self._data = data

    def to_json(self) -> dict[str, Any]:
        return dict(self._data)


class Durable:
    """The job's status as the test sets it, and the events raised to it; ``crash`` fails the next raise."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.raised: list[tuple[str, str, Any]] = []
        self.crash = False
        self.wait_on(QUESTION)

    def wait_on(self, question_id: str | None, runtime: str = "Running") -> None:
        waiting = None
        if question_id is not None:
            waiting = Waiting(
                question_id=question_id,
                step_id="s1",
                kind="approval",
                question="Approve this SQL?",
                options=["approve", "edit", "reject", "abort"],
                asked_at="2026-01-01T00:00:00+00:00",
                expires_at="2026-01-02T00:00:00+00:00",
                step_kind="execute_azure_sql",
            )
        state = JobState(status="waiting_for_user" if waiting else "running", waiting=waiting)
        custom = state.model_dump(mode="json")
        self.status = {"instanceId": self.job_id, "runtimeStatus": runtime, "customStatus": custom, "input": None}

    async def get_status(self, job_id: str, **_: Any) -> _Status:
        return _Status(self.status)

    async def raise_event(self, instance: str, name: str, payload: Any) -> None:
        if self.crash:
            self.crash = False
            raise Crash(name)
        self.raised.append((instance, name, payload))


@pytest.fixture(params=["local", "azure_blob"])
def claims(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AnswerClaims:
    if request.param == "local":
        store: AnswerClaims = SqliteAnswerClaims(tmp_path / "claims.sqlite3")
    else:
        azurite: Azurite = request.getfixturevalue("azurite")
        store = build_claims(Settings(), connection_string=azurite.connection_string)
    monkeypatch.setattr(answer_claims, "get_claims", lambda settings: store)
    monkeypatch.setattr(api_jobs, "_repair_checked", {})
    return store


def post(durable: Durable, answer: Any, question_id: str = QUESTION) -> func.HttpResponse:
    body = json.dumps({"answer": answer, "question_id": question_id}).encode()
    url = f"http://localhost/api/jobs/{durable.job_id}/feedback"
    req = func.HttpRequest("POST", url, headers={}, params={}, route_params={"id": durable.job_id}, body=body)
    return asyncio.run(api_jobs.feedback(req, durable, durable.job_id))


def refused(durable: Durable, answer: Any, question_id: str = QUESTION) -> str:
    with pytest.raises(ApiError) as err:
        post(durable, answer, question_id)
    return f"{err.value.status} {err.value.code}"


def test_the_same_answer_posted_again_delivers_a_claim_cut_short(claims: AnswerClaims) -> None:
    durable = Durable(f"job-{time.monotonic_ns()}")
    durable.crash = True
    with pytest.raises(Crash):
        post(durable, "approve")  # claimed, then the host died: no event, the client got no response
    assert durable.raised == []
    record = claims.recorded(durable.job_id, QUESTION)
    assert record is not None and record.answer == "approve"
    # Another answer is refused; the same one is accepted again and delivered, with the recorded payload.
    assert refused(durable, "reject") == "409 ALREADY_ANSWERED"
    again = post(durable, "approve")
    assert again.status_code == 202 and b'"repeated": true' in again.get_body()
    assert durable.raised == [(durable.job_id, f"answer:{QUESTION}", {"answer": "approve", "question_id": QUESTION})]
    # Once the job has moved on (the next question, or the end), the same answer is 202 and nothing is raised.
    durable.wait_on("s2-q2")
    assert post(durable, "approve").status_code == 202
    assert refused(durable, "reject") == "409 ALREADY_ANSWERED"
    durable.wait_on(None, runtime="Completed")
    assert post(durable, "approve").status_code == 202 and len(durable.raised) == 1
    # A question never answered here keeps the errors it had.
    assert refused(durable, "approve", "s9-q9") == "409 JOB_NOT_WAITING"


def test_the_job_view_delivers_a_claim_old_enough(claims: AnswerClaims, monkeypatch: pytest.MonkeyPatch) -> None:
    durable = Durable(f"job-{time.monotonic_ns()}")
    durable.crash = True
    with pytest.raises(Crash):
        post(durable, {"action": "edit", "sql": "SELECT 1"})
    repair = api_jobs.repair_delivery
    # A young claim may still be on its way: not raised again yet.
    assert asyncio.run(repair(durable, durable.job_id, durable.status)) is False
    monkeypatch.setattr(api_jobs, "REPAIR_AFTER_S", 0.0)
    assert asyncio.run(repair(durable, durable.job_id, durable.status)) is True
    payload = {"answer": {"action": "edit", "sql": "SELECT 1"}, "question_id": QUESTION}
    assert durable.raised == [(durable.job_id, f"answer:{QUESTION}", payload)]
    # Looked at again at once: not raised a second time by this process (REPAIR_EVERY_S).
    assert asyncio.run(repair(durable, durable.job_id, durable.status)) is False
    # A question nobody claimed, or a job not waiting, is left alone.
    durable.wait_on("s2-q2")
    assert asyncio.run(repair(durable, durable.job_id, durable.status)) is False
    assert len(durable.raised) == 1


def test_the_view_shows_each_answer_as_the_job_received_it() -> None:
    from api.view import answers_received

    def raised(name: str, answer: Any, at: str) -> dict[str, Any]:
        payload = json.dumps({"answer": answer, "question_id": name.removeprefix("answer:")})
        return {"EventType": "EventRaised", "Name": name, "Input": payload, "Timestamp": at}

    history = [
        {"EventType": "ExecutionStarted", "Timestamp": "t0"},
        raised("answer:s1-q1", "approve", "t1"),
        raised("answer:s1-q1", "approve", "t2"),  # delivered again by a repair: the job took the first
        raised("part-news:1", {"x": 1}, "t3"),
        raised("answer:s2-q2", {"action": "edit", "sql": "SELECT 1"}, "t4"),
    ]
    assert answers_received(history) == [
        {"question_id": "s1-q1", "answer": "approve", "received_at": "t1", "deliveries": 2},
        {"question_id": "s2-q2", "answer": {"action": "edit", "sql": "SELECT 1"}, "received_at": "t4", "deliveries": 1},
    ]
