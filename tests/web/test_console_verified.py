"""The console saves a statement that ran as a verified query; a later job with another region uses it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import open_console, start_host, status_badge

ASKED = "How many returns did the South region have in Q3?"


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "webvq" + uuid.uuid4().hex[:10]}
    proc = start_host(tmp_path_factory.mktemp("web-verified"), env)
    yield proc
    proc.stop()


def test_save_a_statement_as_a_verified_query_and_reuse_it(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    first = jobs.submit(ASKED)
    ran = jobs.wait(first, timeout_s=180)
    [step] = [s for s in ran["steps"] if s["kind"] == "execute_azure_sql"]
    assert "'South'" in step["output"]["sql"]
    open_console(page, host, f"#job={first}")
    expect(status_badge(page)).to_have_text("Completed")

    form = page.locator("details.save-verified")
    form.locator("summary").click()
    form.get_by_label("Verified query name").fill("returns by region in Q3")
    form.get_by_label("Question it answers, with slots such as {region}").fill(
        "How many returns did the {region} region have in Q3?"
    )
    statement = form.get_by_label("Statement, with the same slots")
    statement.fill(statement.input_value().replace("'South'", "{region}"))
    form.get_by_label("Slot values, one slot a line (name: value, value)").fill("region: North, South, East, West")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".vq-status")).to_contain_text("Saved as verified query “returns-by-region-in-q3”")
    page.screenshot(path=str(shots / "verified-saved.png"), full_page=True)
    # A second save of the same id is refused with the server's code, shown in the page.
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".alert")).to_contain_text("VERIFIED_QUERY_EXISTS")

    second = jobs.submit("How many returns did the North region have in Q3?")
    view = jobs.wait(second, timeout_s=180)
    [step] = [s for s in view["steps"] if s["kind"] == "execute_azure_sql"]
    assert step["output"]["verified_query"]["values"] == {"region": "North"}
    open_console(page, host, f"#job={second}")
    expect(page.locator(".verified-note")).to_contain_text("Verified query returns by region in Q3")
    expect(page.locator("details.save-verified")).to_have_count(0)
