"""A console whose event stream is refused (an older app, a proxy that cuts streams) polls the job view instead.

The page answers every request for ``/events`` with a 404 before it reaches the host: the console says it
updates every second, still draws a (coarser) timeline from the view, and follows the job to its answer.
"""

from __future__ import annotations

import re

from playwright.sync_api import Page, Route, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import SQL_Q, open_console, status_badge, submit


def test_without_a_stream_the_page_polls_and_draws_the_timeline_from_the_view(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    refused: list[str] = []

    def refuse(route: Route) -> None:
        refused.append(route.request.url)
        route.fulfill(status=404, content_type="application/json", body='{"error": {"code": "NOT_FOUND"}}')

    page.route(re.compile(r"/api/jobs/[0-9a-f]+/events"), refuse)
    open_console(page, host)
    job_id = submit(page, SQL_Q)
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#final-answer")).not_to_be_empty()
    assert refused, "the page never tried the stream"
    timeline = page.locator("#timeline")
    expect(timeline).to_have_attribute("data-source", "view")
    expect(timeline).to_contain_text("one bar per step")
    ids = [s["id"] for s in jobs.view(job_id)["steps"]]
    expect(timeline.locator(".tl-row")).to_have_count(len(ids))
    for step_id in ids:
        bar = timeline.locator(f'.tl-row[data-step-id="{step_id}"] .tl-bar[data-kind="attempt"]')
        expect(bar).to_have_attribute("data-state", "succeeded")
