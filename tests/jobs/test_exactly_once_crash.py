"""Exactly once across a crash (issue 25), on a real devhost process killed with SIGKILL.

- A person's answer: the host dies between the claim (which records the answer) and its delivery, a window
  the test hook ``ANSWER_CLAIM_PAUSE_S`` holds open. After the restart the same answer posted again is 202
  and resumes the job, a different one is 409; a claim nobody posts again is delivered by the job view.
  Either way the job takes the answer once (one SQL run, one answer received).
- A tool with side effects: an HTTP tool on loopback counts the distinct Idempotency-Keys it was called
  with, across a crash in the middle of its call and a 500: one key per call, however often it is repeated;
  a tool that always answers 500 is called three times before the model sees the failure, one declared
  non-retryable once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.runtime.answer_claims import AnswerRecord, SqliteAnswerClaims
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess, wait_for
from tests.fakes.loopback import LoopbackServer
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.jobclient import JobClient

SQL_Q = "Which region had the most returns in Q3?"


def claims_of(data: Path) -> SqliteAnswerClaims:
    return SqliteAnswerClaims(data / "answer_claims.sqlite3")


def post_in_background(host: DevHostProcess, job_id: str, body: dict[str, Any]) -> threading.Thread:
    """Post feedback from a thread; the host dies before it answers, so the client gets no response."""
    key = host.keys.function if host.keys else ""
    url = f"{host.base_url}/api/jobs/{job_id}/feedback"

    def post() -> None:
        try:
            httpx.post(url, json=body, headers={"x-functions-key": key}, timeout=120)
        except httpx.HTTPError:
            pass  # the host was killed mid-request: no response, as a client would see it

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def sql_runs(view: dict[str, Any]) -> int:
    return sum(1 for e in view["log"]["entries"] if "execute_azure_sql" in e["message"] and "rows" in e["message"])


def test_an_answer_claimed_before_a_kill_is_delivered_once(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    env = {
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "PARTIAL_OUTPUT_PATH": str(shared / "partial_output.sqlite3"),
        "ANSWER_CLAIM_PAUSE_S": "120",
    }
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()
    try:
        jobs = JobClient(host)
        # Two jobs wait for an SQL approval; both answers are claimed, then the host dies before delivering.
        reposted, repaired = (jobs.submit(SQL_Q, approval={"sql": "always"}) for _ in range(2))
        questions = {j: jobs.wait(j, {"waiting_for_user"})["waiting"]["question_id"] for j in (reposted, repaired)}
        threads = [post_in_background(host, j, {"answer": "approve", "question_id": q}) for j, q in questions.items()]
        claims = claims_of(shared)
        for job, qid in questions.items():

            def claimed(job: str = job, qid: str = qid) -> AnswerRecord | None:
                return claims.recorded(job, qid)

            wait_for(f"the claim of {job}", claimed)
        host.kill()
        for thread in threads:
            thread.join(timeout=30)
        record = claims.recorded(reposted, questions[reposted])
        assert record is not None and record.answer == "approve" and record.instance == reposted
        host.extra_env["ANSWER_CLAIM_PAUSE_S"] = "0"
        host.start()
        jobs = JobClient(host)

        # The lost delivery is real: the job still waits on the same question (nothing else delivers it).
        qid = questions[reposted]
        assert jobs.view(reposted)["waiting"]["question_id"] == qid
        other = jobs.answer(reposted, "reject", question_id=qid)
        assert other.status_code == 409 and other.json()["error"]["code"] == "ALREADY_ANSWERED", other.text
        again = jobs.answer(reposted, "approve", question_id=qid)
        assert again.status_code == 202 and again.json()["repeated"] is True, again.text
        # The job view, polled, repairs the other one: no client posts its answer again.
        for job in (reposted, repaired):
            view = jobs.wait(job, timeout_s=120, allow_waiting=True)
            assert view["status"] == "completed", view.get("error")
            assert view["steps"][0]["state"] == "succeeded" and sql_runs(view) == 1
            assert [(a["question_id"], a["answer"]) for a in view["answers"]] == [(questions[job], "approve")]
        assert "claimed but not delivered; delivering it again" in host.output(since_launch=True)
        # Posted once more after the job finished: still 202, and nothing runs again.
        late = jobs.answer(reposted, "approve", question_id=qid)
        assert late.status_code == 202 and late.json()["repeated"] is True
        assert sql_runs(jobs.view(reposted)) == 1
    finally:
        host.stop()


# --- tools with side effects ----------------------------------------------------------------------------


class SideEffects:
    """An HTTP API with side effects on loopback: /effect hangs on its first call (the test kills the host
    meanwhile), answers 500 on its second and 200 after; /broken always answers 500. Every request's
    Idempotency-Key is recorded per path."""

    def __init__(self) -> None:
        self.calls: dict[str, list[str | None]] = {"effect": [], "broken": [], "once": []}
        self.in_flight = threading.Event()
        self.release = threading.Event()
        routes = [Route("/{name}", self.handle, methods=["POST"])]
        self.server = LoopbackServer(Starlette(routes=routes), name="side-effects")

    async def handle(self, request: Request) -> Response:
        import anyio

        name = request.path_params["name"]
        self.calls[name].append(request.headers.get("idempotency-key"))
        if name == "effect" and len(self.calls[name]) == 1:
            self.in_flight.set()
            await anyio.to_thread.run_sync(self.release.wait, 60)
            return JSONResponse({"late": True})
        if name != "effect" or len(self.calls[name]) == 2:
            return JSONResponse({"error": "the ledger is busy"}, status_code=500)
        return JSONResponse({"booked": True})


@pytest.fixture
def api() -> Iterator[SideEffects]:
    effects = SideEffects()
    effects.server.start()
    yield effects
    effects.release.set()
    effects.server.stop()


def call(tool: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "arguments_json": "{}"}


def turn(*calls: dict[str, Any]) -> JsonReply:
    return JsonReply({"reasoning": "book it", "tool_calls": list(calls)})


def entry(api: SideEffects, name: str, **extra: Any) -> dict[str, Any]:
    url = f"{api.server.origin}/{name}"
    return (
        {"name": name, "description": f"{name} booking", "url": url, "method": "POST"}
        | {
            "private_hosts": ["127.0.0.1"],
            "timeout_s": 90,
        }
        | extra
    )


def test_a_tool_call_repeated_across_a_crash_and_a_500_keeps_one_key(tmp_path: Path, api: SideEffects) -> None:
    answer = {"answer": "Booked.", "citations": []}
    with FakeOpenAI(api_key="k") as llm:
        llm.script(
            turn(call("http.effect", "e")),
            turn(call("http.broken", "b"), call("http.once", "o")),
            turn(call("format_output", "end")),
            task="agent_turn",
        )
        llm.always(JsonReply(answer), task="write_answer")
        env = {
            "LLM_PROVIDER": "azure_openai",
            "AZURE_OPENAI_ENDPOINT": llm.endpoint,
            "AZURE_OPENAI_API_KEY": "k",
            "AZURE_OPENAI_CHAT_DEPLOYMENT": "dep",
            "JOB_RETRY_FIRST_INTERVAL_MS": "50",
            "TOOLS_HTTP": json.dumps(
                [entry(api, "effect"), entry(api, "broken", timeout_s=5), entry(api, "once", retryable=False)]
            ),
        }
        host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()
        try:
            jobs = JobClient(host)
            tools = ["http.effect", "http.broken", "http.once"]
            job_id = jobs.submit("Book the order, please.", mode="agent", tools=tools)
            wait_for("the first call of http.effect", api.in_flight.is_set)
            host.kill()  # mid-call: the server saw the request, the job never got the answer
            api.release.set()
            host.start()
            view = JobClient(host).wait(job_id, timeout_s=180)
            assert view["status"] == "completed", view.get("error")
        finally:
            host.stop()
    # The call in flight ran again after the restart, then met a 500 and was retried: one call, one key.
    assert len(api.calls["effect"]) == 3 and set(api.calls["effect"]) == {f"{job_id}:t1:1"}
    # Always 500: three attempts of one call (one key) before the model saw the failure.
    assert api.calls["broken"] == [f"{job_id}:t2:1"] * 3
    # Declared non-retryable: called once, its failure final.
    assert api.calls["once"] == [f"{job_id}:t3:1"]
    keys = Counter(k for calls in api.calls.values() for k in calls)
    assert len(keys) == 3 and None not in keys
    steps = {s["id"]: s for s in view["steps"]}
    assert steps["t1"]["state"] == "succeeded" and steps["t1"]["output"]["data"] == {"booked": True}
    assert steps["t2"]["state"] == "failed" and steps["t2"]["attempts"] == 3
    assert steps["t3"]["state"] == "failed" and steps["t3"]["attempts"] == 1


def test_a_record_is_what_the_feedback_endpoint_delivers() -> None:
    record = AnswerRecord.of("s1-q1", "job", {"action": "edit", "sql": "SELECT 1"}, now=0.0)
    assert record.payload() == {"answer": {"action": "edit", "sql": "SELECT 1"}, "question_id": "s1-q1"}
