"""The console follows a job through its event stream, with a timeline of its steps (web/timeline.js).

The job asks for SQL approval (a human wait on the SQL step) and its answer writer is rate limited once (two
attempts of the answer step with a retry wait between them). While the stream is open the page does not poll
the job view: the page's clock is run ahead and no view request goes out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import MIXED_Q, open_console, start_host, status_badge, submit


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_host(tmp_path_factory.mktemp("web-timeline"), {"OFFLINE_LLM_FAULTS": "write_answer:RATE_LIMITED:1"})
    yield proc
    proc.stop()


def bar_box(page: Page, selector: str) -> tuple[float, float]:
    """The left and right edge of a bar, in pixels."""
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return box["x"], box["x"] + box["width"]


def test_the_timeline_shows_steps_attempts_a_retry_wait_and_a_human_wait(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    view_reads: list[str] = []
    streams: list[str] = []

    def note(request: Request) -> None:
        path = request.url.split("?", 1)[0]
        if re.search(r"/api/jobs/[0-9a-f]+/events$", path):
            streams.append(request.url)
        elif re.search(r"/api/jobs/[0-9a-f]+$", path) and request.method == "GET":
            view_reads.append(request.url)

    page.on("request", note)
    page.clock.install()
    open_console(page, host)
    job_id = submit(page, MIXED_Q, approval="always")
    panel = page.locator("#waiting")
    expect(panel).to_be_visible()
    expect(page.locator("#job-updates")).to_contain_text("event stream")
    assert streams, "the page opened no event stream"

    steps = jobs.view(job_id)["steps"]
    sql = next(s["id"] for s in steps if s["kind"] == "execute_azure_sql")
    answer = next(s["id"] for s in steps if s["kind"] == "generate_response")
    timeline = page.locator("#timeline")
    human = f'#timeline .tl-row[data-step-id="{sql}"] .tl-bar[data-kind="human"]'
    expect(page.locator(human)).to_have_attribute("data-open", "true")
    # No polling while the stream is open: ten seconds of the page's timers go by and no view is read.
    expect(timeline.locator(".tl-legend li")).to_have_count(5)
    reads = len(view_reads)
    page.clock.run_for(10_000)
    assert len(view_reads) == reads, view_reads[reads:]
    page.screenshot(path=str(shots / "timeline-waiting.png"), full_page=True)

    panel.get_by_role("button", name="Approve").click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#final-answer")).to_contain_text("West")

    # One row for the planning, then one per step in the plan's order.
    ids = [s["id"] for s in jobs.view(job_id)["steps"]]
    expect(timeline.locator(".tl-row")).to_have_count(len(ids) + 1)
    assert timeline.locator(".tl-row").evaluate_all("rows => rows.map(r => r.dataset.stepId)") == ["plan", *ids]
    # The SQL step: the person's wait, closed, then the approved query ran.
    expect(page.locator(human)).to_have_attribute("data-open", "false")
    sql_runs = page.locator(f'#timeline .tl-row[data-step-id="{sql}"] .tl-bar[data-kind="attempt"]')
    expect(sql_runs.last).to_have_attribute("data-state", "succeeded")
    # The answer step: attempt 1 failed, a retry wait, attempt 2 succeeded, left to right on the axis.
    row = f'#timeline .tl-row[data-step-id="{answer}"]'
    attempts = page.locator(f'{row} .tl-bar[data-kind="attempt"]')
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_have_attribute("data-state", "failed")
    expect(attempts.nth(1)).to_have_attribute("data-state", "succeeded")
    expect(page.locator(f'{row} .tl-bar[data-kind="retry"]')).to_have_count(1)
    first = bar_box(page, f'{row} .tl-bar[data-kind="attempt"][data-attempt="1"]')
    wait = bar_box(page, f'{row} .tl-bar[data-kind="retry"]')
    second = bar_box(page, f'{row} .tl-bar[data-kind="attempt"][data-attempt="2"]')
    assert first[0] <= wait[0] <= second[0] and first[1] <= second[0] + 1
    expect(page.locator(f"{row} .tl-summary")).to_contain_text("2 attempts")
    expect(page.locator(f'{row} .tl-bar[data-attempt="1"]')).to_have_attribute("aria-label", re.compile("RATE_LIMITED"))
    # Nothing is open once the job ended.
    expect(timeline.locator('.tl-bar[data-open="true"]')).to_have_count(0)
    page.screenshot(path=str(shots / "timeline-done.png"), full_page=True)

    # The finished job opened afresh: the stream tells the whole story again, and the timeline is the same.
    later = page.context.browser.new_page(base_url=host.base_url) if page.context.browser else None
    assert later is not None
    try:
        open_console(later, host, f"#job={job_id}")
        expect(status_badge(later)).to_have_text("Completed")
        expect(later.locator("#timeline")).to_have_attribute("data-source", "events")
        again = later.locator(row)
        expect(again.locator('.tl-bar[data-kind="attempt"]')).to_have_count(2)
        expect(again.locator('.tl-bar[data-kind="retry"]')).to_have_count(1)
        expect(later.locator(f'#timeline .tl-row[data-step-id="{sql}"] .tl-bar[data-kind="human"]')).to_have_count(1)
    finally:
        later.close()
