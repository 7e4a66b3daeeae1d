"""The console shows the checked claims: the summary, unsupported ones marked, evidence highlighted on click."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from shared.providers.search.local import get_default_index
from shared.runtime.settings import Settings
from tests.devhost.hostproc import DevHostProcess
from tests.e2e.test_claims_over_devhost import DOCS_QUERY, Q3_SQL, QUESTION, TOP_K, claims_answer, plan, q3_rows
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.jobclient import JobClient
from tests.web.console import open_console, status_badge
from tests.web.fake_model import start_fake_model_host


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=None) as llm:
        yield llm


@pytest.fixture(scope="module")
def host(fake_llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_fake_model_host(fake_llm, tmp_path_factory.mktemp("web-claims"))
    yield proc
    proc.stop()


def test_claims_with_their_evidence_and_the_unsupported_marked(
    page: Page, host: DevHostProcess, jobs: JobClient, fake_llm: FakeOpenAI, shots: Path
) -> None:
    rows = q3_rows()
    settings = Settings()
    chunks = get_default_index(settings.local_index_path, settings.documents_dir).search(DOCS_QUERY, top_k=TOP_K)
    reply = claims_answer(rows, chunks)
    fake_llm.script_job(
        plan=plan(),
        write_sql={"sql": Q3_SQL, "tables": ["returns", "order_items", "orders", "regions"], "explanation": "Q3"},
        write_answer=JsonReply(reply),
    )
    job_id = jobs.submit(QUESTION)
    jobs.wait(job_id, timeout_s=180)
    open_console(page, host, f"#job={job_id}")
    expect(status_badge(page)).to_have_text("Completed")

    claims = page.locator("#claims li.claim")
    expect(page.locator("#claims-summary")).to_have_text("Claims: verified 3 of 6; 3 unsupported")
    expect(claims).to_have_count(6)
    statuses = [claims.nth(i).get_attribute("data-status") for i in range(6)]
    assert statuses == ["verified", "unsupported", "verified", "verified", "unsupported", "unsupported"]
    expect(page.locator("#claims .claim-unsupported .claim-badge")).to_have_text(["Unsupported"] * 3)
    expect(claims.nth(5)).to_contain_text("No evidence cited.")
    expect(claims.nth(1).locator(".claim-reason")).to_contain_text(str(rows[1][1]))

    # A figure's evidence: its cells highlighted in the SQL step's table.
    claims.nth(0).get_by_role("button").click()
    cells = page.locator("#detail .slot-results td.evidence-cell")
    expect(cells).to_have_count(2)
    expect(cells).to_have_text([str(rows[0][0]), str(rows[0][1])])
    # A quote's evidence: its span marked in the passage (and the previous highlight gone).
    claims.nth(3).get_by_role("button").click()
    expect(cells).to_have_count(0)
    mark = page.locator("#detail .slot-results mark.evidence-span")
    expect(mark).to_have_count(1)
    expect(mark).to_have_text(reply["claims"][3]["text"])
    expect(mark).to_be_visible()
    page.screenshot(path=str(shots / "claims.png"), full_page=True)
