"""The console when a step failed with a retryable error after its automatic retries: Retry is the primary action."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import DOCS_Q, open_console, start_host, status_badge, submit


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # The answer writer is rate limited three times: the automatic retries give up and the job asks the user.
    proc = start_host(tmp_path_factory.mktemp("web-retry"), {"OFFLINE_LLM_FAULTS": "write_answer:RATE_LIMITED:3"})
    yield proc
    proc.stop()


def test_a_retryable_failure_makes_retry_the_primary_action(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, DOCS_Q)
    panel = page.locator("#waiting")
    expect(panel).to_contain_text("RATE_LIMITED")
    waiting = jobs.view(job_id)["waiting"]
    assert waiting["kind"] == "error" and waiting["details"]["error"]["code"] == "RATE_LIMITED"
    expect(panel.locator(".actions button.primary")).to_have_text("Retry")
    expect(panel.locator(".actions button").first).to_have_text("Retry")
    expect(panel.locator(".actions button").last).to_have_text("Abort job")
    # The answer step's input is its question, shown as a field (no internal flags, no JSON).
    expect(page.get_by_label("Step question", exact=True)).to_have_value(waiting["details"]["input"]["question"])
    page.screenshot(path=str(shots / "retryable-waiting.png"), full_page=True)
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#final-answer")).not_to_be_empty()
