"""The console shows the answer as the event stream's deltas write it, and drops a superseded attempt's text.

The app runs over a fake OpenAI-compatible server. Attempt 1 of the answer streams slowly past the job's
timeout (MODEL_TIMEOUT, retryable): its text shows, then the stream says `superseded`. Attempt 2 is silent for
two seconds before it writes: in that gap the page shows no answer text at all, not attempt 1's stale words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.fakes.openai_server import FakeOpenAI, SlowReply
from tests.jobs.jobclient import JobClient
from tests.web.console import DOCS_Q, open_console, status_badge
from tests.web.fake_model import answer_reply, docs_plan, policy_answer, start_fake_model_host

STALE = " ".join(f"STALE DRAFT sentence {i} that a retried attempt wrote." for i in range(1, 41))
ANSWER = policy_answer(8)
TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=None) as llm:
        # Attempt 2: two silent seconds, then the answer in ten deltas (well within the timeout).
        llm.script_job(
            plan=docs_plan(), write_answer=SlowReply(2.0, answer_reply(ANSWER, chunks=10, chunk_delay_s=0.1))
        )
        # Attempt 1: forty deltas 0.15 s apart, so the job's 4 s timeout ends it half way.
        llm.script(answer_reply(STALE, chunks=40, chunk_delay_s=0.15), task="write_answer")
        yield llm


@pytest.fixture(scope="module")
def host(fake_llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_fake_model_host(fake_llm, tmp_path_factory.mktemp("web-timeline-answer"))
    yield proc
    proc.stop()


def test_the_answer_is_written_from_deltas_and_a_superseded_attempt_is_cleared(
    page: Page, host: DevHostProcess, jobs: JobClient, fake_llm: FakeOpenAI, shots: Path
) -> None:
    job_id = jobs.submit(DOCS_Q, constraints={"timeout_ms": TIMEOUT_MS})
    open_console(page, host, f"#job={job_id}")
    expect(page.locator("#job-updates")).to_contain_text("event stream")
    partial = page.locator("#partial-answer")
    expect(partial).to_contain_text("STALE DRAFT sentence 2")
    page.screenshot(path=str(shots / "answer-attempt-1.png"), full_page=True)

    # Attempt 1 timed out and attempt 2 began: its text is void and none of it stays on the page.
    row = page.locator('#timeline .tl-row[data-step-id="answer"]')
    expect(row.locator('.tl-bar[data-kind="attempt"][data-attempt="2"]')).to_have_attribute("data-open", "true")
    first = row.locator('.tl-bar[data-kind="attempt"][data-attempt="1"]')
    expect(first).to_have_attribute("data-state", "failed")
    expect(first).to_have_attribute("aria-label", re.compile("MODEL_TIMEOUT"))
    expect(partial).to_have_count(0)
    assert status_badge(page).text_content() != "Completed"  # cleared in the gap, not by the final answer

    # Attempt 2 writes: its words appear as they are written, before the job has its answer.
    expect(partial).to_contain_text("Returns received 31 to 60 days")
    expect(partial).not_to_contain_text("STALE")
    page.screenshot(path=str(shots / "answer-attempt-2.png"), full_page=True)
    expect(status_badge(page)).to_have_text("Completed")
    expect(partial).to_have_count(0)
    expect(page.locator("#final-answer")).to_contain_text("Point 8: the store credit is valid")
    expect(page.locator("#final-answer")).not_to_contain_text("STALE")
    assert jobs.view(job_id)["answer"]["text"] == ANSWER
    assert fake_llm.failures == []
