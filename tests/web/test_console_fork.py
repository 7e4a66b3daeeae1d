"""The console's forks (web/fork.js) in headless Chromium against devhost: re-run a finished job from a step with
an edited SQL, see the fork's origin and carried-over steps, and compare the two jobs side by side."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import MIXED_Q, job_id_of, open_console, status_badge, submit

EDITED_SQL = "SELECT name FROM regions ORDER BY name"


def test_rerun_from_a_step_then_compare(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    origin = submit(page, MIXED_Q)
    expect(status_badge(page)).to_have_text("Completed")
    # Every step of the finished job offers "Re-run from here"; the SQL step's form starts from its SQL.
    steps = page.locator("#fork-steps li")
    expect(steps).to_have_count(3)
    page.locator("#fork-steps button[data-fork-point='s1']").click()
    sql = page.get_by_label("Step SQL", exact=True)
    expect(sql).to_have_value(re.compile(r"^SELECT regions\.name"))
    sql.fill(EDITED_SQL)
    page.get_by_role("button", name="Re-run from s1").click()
    # The page opens the fork, which names its origin; it ran the edited statement.
    expect(page.locator("#forked-from")).to_contain_text(origin)
    fork_id = job_id_of(page)
    assert fork_id != origin
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(fork_id)
    assert view["forked_from"]["job"] == origin and view["forked_from"]["input"] == {"sql": EDITED_SQL}
    # Side by side: the claims each answer has alone are marked, the SQL step's rows summarized.
    page.get_by_role("button", name="Compare with the origin").click()
    expect(page.locator("#compare-result .compare-side[data-side='b'] .claim.added").first).to_contain_text("4 rows")
    expect(page.locator("#compare-result .compare-side[data-side='a'] .claim.dropped").first).to_contain_text("92")
    expect(page.locator("#compare-result tr[data-step='s1']")).to_contain_text("1 → 4")
    page.screenshot(path=str(shots / "fork-compare.png"), full_page=True)
    # A fork at the answer carries the first two steps over; the console marks them.
    page.locator("#fork-steps button[data-fork-point='s3']").click()
    page.get_by_label("Fork: max tokens per call", exact=True).fill("700")
    page.get_by_role("button", name="Re-run from s3").click()
    expect(page.locator("#forked-from")).to_contain_text(fork_id)
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#fork-steps li", has_text="(carried over)")).to_have_count(2)
    # The origin lists its fork.
    page.goto(f"/api/ui/#job={origin}")
    expect(page.locator("#fork-list")).to_contain_text(fork_id)


def test_a_refused_fork_says_why_at_the_form(page: Page, host: DevHostProcess) -> None:
    open_console(page, host)
    submit(page, MIXED_Q)
    expect(status_badge(page)).to_have_text("Completed")
    page.locator("#fork-steps button[data-fork-point='s1']").click()
    page.get_by_label("Step SQL", exact=True).fill("DELETE FROM regions")
    page.get_by_role("button", name="Re-run from s1").click()
    expect(page.locator(".fork-form .alert")).to_contain_text("SQL rejected")
