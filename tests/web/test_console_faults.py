"""The console when a step fails and waits for the user (an injected offline LLM fault), in headless Chromium."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import SQL_Q, open_console, start_host, status_badge, submit


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # The first SQL draft fails with a non-retryable error, so the job asks the user what to do.
    proc = start_host(tmp_path_factory.mktemp("web-faults"), {"OFFLINE_LLM_FAULTS": "write_sql:BAD_REQUEST:1"})
    yield proc
    proc.stop()


def test_failed_step_shows_the_error_and_an_input_editor(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q)
    expect(status_badge(page)).to_have_text("Waiting for you")
    waiting = jobs.view(job_id)["waiting"]
    assert waiting["kind"] == "error"
    panel = page.locator("#waiting")
    expect(panel.get_by_role("heading", name="A step failed")).to_be_visible()
    expect(panel).to_contain_text("BAD_REQUEST")
    expect(panel).to_contain_text(waiting["details"]["error"]["message"])
    expect(panel.locator(".actions button")).to_have_text(
        ["Retry", "Skip step", "Retry with edited input", "Abort job"]
    )
    editor = page.get_by_label("Step input as JSON", exact=False)
    assert json.loads(editor.input_value()) == waiting["details"]["input"]
    expect(page.locator("#steps-table tbody tr").first).to_contain_text("BAD_REQUEST")
    page.screenshot(path=str(shots / "step-error-waiting.png"), full_page=True)

    # Not JSON: the page says so and sends nothing.
    editor.fill("{not json")
    page.get_by_role("button", name="Retry with edited input").click()
    expect(panel.get_by_role("alert")).to_contain_text("INVALID_JSON")
    # An empty edit: the API refuses it (400 INVALID_ANSWER) and the page shows why.
    editor.fill("{}")
    page.get_by_role("button", name="Retry with edited input").click()
    expect(page.locator("#action-error")).to_contain_text("INVALID_ANSWER")
    expect(page.locator("#action-error")).to_contain_text("an edit needs the new input")
    assert jobs.view(job_id)["status"] == "waiting_for_user"

    # A real edit: the step runs the SQL given in its input.
    edited = {**waiting["details"]["input"], "sql": "SELECT name FROM regions ORDER BY name"}
    editor.fill(json.dumps(edited))
    page.get_by_role("button", name="Retry with edited input").click()
    expect(status_badge(page)).to_have_text("Completed")
    output = jobs.view(job_id)["steps"][0]["output"]
    assert "from regions" in output["sql"].lower()
    expect(page.locator(".result-sql thead th")).to_have_text(["name"])
    expect(page.locator(".result-sql tbody tr")).to_have_count(len(output["rows"]))
