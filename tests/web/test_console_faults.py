"""The console when a step fails and waits for the user (an injected offline LLM fault), in headless Chromium."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import SQL_Q, open_console, start_host, status_badge, submit


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # The first three SQL drafts fail with a non-retryable error (one per test), so the job asks the user what to do.
    proc = start_host(tmp_path_factory.mktemp("web-faults"), {"OFFLINE_LLM_FAULTS": "write_sql:BAD_REQUEST:3"})
    yield proc
    proc.stop()


def test_failed_step_shows_the_error_and_a_field_editor(
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
    # BAD_REQUEST is not retryable: a plain retry repeats it, so editing the input is the primary action.
    expect(panel.locator(".actions button")).to_have_text(
        ["Retry with edited input", "Retry", "Skip step", "Abort job"]
    )
    expect(panel.locator(".actions button.primary")).to_have_text("Retry with edited input")
    # Fields, not JSON: the step's question as a labelled input, nothing else of the step input.
    question = page.get_by_label("Step question", exact=True)
    expect(question).to_have_value(waiting["details"]["input"]["question"])
    expect(page.get_by_label("Step SQL", exact=True)).to_have_value(waiting["details"]["input"].get("sql") or "")
    expect(panel).not_to_contain_text("{")
    expect(panel.locator("input, textarea")).to_have_count(2)
    expect(page.locator("#steps-table tbody tr").first).to_contain_text("BAD_REQUEST")
    page.screenshot(path=str(shots / "step-error-waiting.png"), full_page=True)

    # Nothing changed: the page says so and sends nothing.
    page.get_by_role("button", name="Retry with edited input").click()
    expect(panel.get_by_role("alert")).to_contain_text("Change a field of the step input first.")
    # A field the API refuses (an empty question): its message, naming the field, is shown.
    question.fill("")
    page.get_by_role("button", name="Retry with edited input").click()
    notice = page.locator("#action-error")
    expect(notice).to_contain_text("INVALID_ANSWER")
    expect(notice).to_contain_text("answer.question")
    assert jobs.view(job_id)["status"] == "waiting_for_user"
    question.fill(waiting["details"]["input"]["question"])

    # A real edit: the step runs the SQL typed into the SQL field; only changed fields are sent.
    sent: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda r: sent.append(json.loads(r.post_data or "{}")) if r.url.endswith("/feedback") else None,
    )
    page.get_by_label("Step SQL", exact=True).fill("SELECT name\nFROM regions\nORDER BY name")
    page.get_by_role("button", name="Retry with edited input").click()
    expect(status_badge(page)).to_have_text("Completed")
    assert sent[-1]["answer"] == {"action": "edit", "sql": "SELECT name\nFROM regions\nORDER BY name"}
    output = jobs.view(job_id)["steps"][0]["output"]
    assert "from regions" in output["sql"].lower()
    expect(page.locator(".result-sql thead th")).to_have_text(["name"])
    expect(page.locator(".result-sql tbody tr")).to_have_count(len(output["rows"]))


def test_an_unknown_field_refused_by_the_api_is_shown_with_its_name(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q)
    expect(status_badge(page)).to_have_text("Waiting for you")
    assert jobs.view(job_id)["waiting"]["kind"] == "error"

    # The page never offers internal flags; a request that adds one anyway is refused by the API, by name.
    def add_flag(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        body["answer"]["allow_sensitive"] = True
        route.continue_(post_data=json.dumps(body))

    page.route("**/feedback", add_flag)
    page.get_by_label("Step question", exact=True).fill("Which region had the fewest returns in Q3?")
    page.get_by_role("button", name="Retry with edited input").click()
    notice = page.locator("#action-error")
    expect(notice).to_contain_text("INVALID_ANSWER")
    expect(notice).to_contain_text("answer.allow_sensitive")
    assert jobs.view(job_id)["status"] == "waiting_for_user"


def test_a_rejected_query_makes_edit_the_primary_action_not_retry(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q)
    expect(page.locator("#waiting")).to_contain_text("BAD_REQUEST")
    first = jobs.view(job_id)["waiting"]["question_id"]
    # An edit that reads a sensitive table without approval: the step fails with SQL_REJECTED.
    page.get_by_label("Step SQL", exact=True).fill("SELECT email FROM customer_contacts")
    page.get_by_role("button", name="Retry with edited input").click()
    panel = page.locator("#waiting")
    expect(panel).not_to_contain_text(f"Question {first}")
    expect(panel).to_contain_text("SQL_REJECTED")
    # Retry would run the same rejected statement again: Edit is primary, Retry is a plain button.
    expect(panel.locator(".actions button.primary")).to_have_text("Retry with edited input")
    expect(panel.locator(".actions button").first).to_have_text("Retry with edited input")
    expect(panel.get_by_role("button", name="Retry", exact=True)).not_to_have_class(re.compile("primary"))
    assert jobs.view(job_id)["waiting"]["details"]["error"]["code"] == "SQL_REJECTED"
