"""A retried answer attempt in the event stream: its deltas, then ``superseded``, then the next attempt's text.

The app runs on devhost with the real Azure OpenAI provider against the fake OpenAI server: the first
answer attempt streams a few pieces slowly and then breaks inside the stream (a retryable upstream error),
the second streams the whole answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e.sse import Message, committed_ids, read
from tests.fakes.openai_server import FakeOpenAI, JsonReply, StreamErrorReply
from tests.jobs.jobclient import JobClient

KEY = "fake-aoai-key-ev"
DEPLOYMENT = "jobs-chat-ev"
QUESTION = "What does the returns policy say about refunds after 30 days?"
ANSWER = "Refunds after 30 days are given as store credit. " + " ".join(f"Point {i} follows." for i in range(15))
BROKEN = ['{"answer": "An attempt', " that breaks", " half way", " through", " its", " text"]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module")
def host(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("events-fakes")
    env = {
        "LLM_PROVIDER": "azure_openai",
        "AZURE_OPENAI_ENDPOINT": llm.endpoint,
        "AZURE_OPENAI_API_KEY": KEY,
        "AZURE_OPENAI_CHAT_DEPLOYMENT": DEPLOYMENT,
        "JOB_RETRY_FIRST_INTERVAL_MS": "300",
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
        "PARTIAL_OUTPUT_FLUSH_MS": "20",
    }
    proc = DevHostProcess(REPO_ROOT, data / "data", env=env)
    proc.start()
    yield proc
    proc.stop()


def _plan() -> dict[str, Any]:
    return {
        "steps": [
            {"id": "policy", "kind": "consult_rag", "title": "Policy", "input": {"query": QUESTION}, "depends_on": []},
            {
                "id": "answer",
                "kind": "generate_response",
                "title": "Answer",
                "input": {"question": QUESTION},
                "depends_on": ["policy"],
            },
        ],
        "rationale": "Needs the returns policy.",
    }


def _text_of(found: list[Message], attempt: int) -> str:
    """The answer text of one attempt, put together from its deltas by offset, as a client would."""
    text = ""
    for message in found:
        data = message.data or {}
        if message.event == "delta" and data["attempt"] == attempt:
            text = text[: data["offset"]] + data["text"]
    return text


def test_a_retried_answer_attempt_is_superseded_and_the_next_one_streams(llm: FakeOpenAI, host: DevHostProcess) -> None:
    llm.reset()
    llm.script_job(
        plan=JsonReply(_plan()),
        write_answer=JsonReply({"answer": ANSWER, "citations": [], "claims": []}, chunks=25, chunk_delay_s=0.06),
    )
    llm.script(StreamErrorReply(BROKEN, code="server_error", chunk_delay_s=0.15), task="write_answer")
    jobs = JobClient(host)
    job_id = jobs.submit(QUESTION)
    found = read(jobs.http, job_id)
    events = [
        (m.event, m.committed, (m.data or {}).get("attempt")) for m in found if m.event in ("delta", "superseded")
    ]
    # Attempt 1 streamed part of its text, then was superseded (committed, from the history).
    assert _text_of(found, 1) and _text_of(found, 1) in "".join(BROKEN)[len('{"answer": "') :]
    assert ("superseded", True, 1) in events
    first_superseded = events.index(("superseded", True, 1))
    assert all(attempt == 1 for kind, _, attempt in events[:first_superseded] if kind == "delta")
    # Attempt 2's deltas come after it and make up the whole answer; nothing of attempt 1 follows.
    assert all(attempt == 2 for kind, _, attempt in events[first_superseded + 1 :] if kind == "delta")
    assert _text_of(found, 2) == ANSWER
    assert all(not m.committed for m in found if m.event == "delta")
    steps = [(d["state"], d["attempt"]) for m in found if m.event == "step" and m.committed and (d := m.data or {})]
    assert ("failed", 1) in steps and ("succeeded", 2) in steps
    assert found[-1].event == "end" and (found[-1].data or {})["answer_available"] is True
    view = jobs.view(job_id)
    assert view["answer"]["text"] == ANSWER
    # Reading the finished job again: the same committed story, no deltas (the answer is in the view).
    again = read(jobs.http, job_id)
    assert committed_ids(again) == committed_ids(found) and not [m for m in again if m.event == "delta"]
    assert json.dumps([m.data for m in again]) == json.dumps([m.data for m in found if m.committed])
