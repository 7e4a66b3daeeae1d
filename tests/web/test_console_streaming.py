"""The console shows the answer while the model streams it (the app over a fake OpenAI-compatible server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.fakes.openai_server import FakeOpenAI
from tests.jobs.jobclient import JobClient
from tests.web.console import DOCS_Q, open_console, status_badge, submit
from tests.web.fake_model import MODEL, SOURCE, answer_reply, docs_plan, policy_answer, start_fake_model_host

ANSWER = policy_answer(12)


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=None) as llm:
        # About 6 s of streaming in 30 deltas: several of the page's 1 s polls land inside it.
        llm.script_job(plan=docs_plan(), write_answer=answer_reply(ANSWER, chunks=30, chunk_delay_s=0.2))
        yield llm


@pytest.fixture(scope="module")
def host(fake_llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_fake_model_host(fake_llm, tmp_path_factory.mktemp("web-streaming"))
    yield proc
    proc.stop()


def test_the_answer_grows_on_the_page_while_it_streams(
    page: Page, host: DevHostProcess, jobs: JobClient, fake_llm: FakeOpenAI, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, DOCS_Q)
    partial = page.locator("#partial-answer")
    expect(partial).to_be_visible()
    expect(page.get_by_role("heading", name="Answer (being written)")).to_be_visible()
    shown = partial.text_content() or ""
    assert shown and ANSWER.startswith(shown.strip()[:40])
    page.screenshot(path=str(shots / "streaming.png"), full_page=True)

    expect(status_badge(page)).to_have_text("Completed")
    expect(partial).to_have_count(0)
    expect(page.locator("#final-answer")).to_contain_text("Point 12: the store credit is valid")
    expect(page.locator("#citations .source-id")).to_have_text([SOURCE])
    view = jobs.view(job_id)
    assert view["answer"]["text"] == ANSWER
    assert fake_llm.failures == []
    # Cost from MODEL_PRICES shows in the usage table.
    expect(page.locator("#usage-table tfoot td").nth(3)).not_to_have_text("$0")
    # One precision for the whole cost column (a $0 step reads $0.000000 beside a priced one), right-aligned.
    costs = page.locator("#usage-table tbody td:nth-child(5), #usage-table tfoot td:nth-child(5)").all_inner_texts()
    assert len({len(c.split(".")[1]) if "." in c else 0 for c in costs}) == 1, costs
    # A real model is named as such: no stand-in label.
    expect(page.locator("#answer-model")).to_contain_text(MODEL)
    expect(page.locator(".offline-note")).to_have_count(0)
