"""A run_python step's chart in the console: fetched with the key, shown inline as an image (no CSP violation).

Headless Chromium against a devhost whose jobs may run Python in the local sandbox (bubblewrap, ``.venv-sandbox``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from shared.sandbox.local import LocalSandbox
from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import open_console, start_host, status_badge

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    if not LocalSandbox().available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("web-artifacts")
    proc = start_host(tmp / "host", {"ARTIFACT_STORE": "local", "ARTIFACT_PATH": str(tmp / "artifacts.sqlite3")})
    yield proc
    proc.stop()


def test_a_steps_png_is_shown_inline(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    job_id = jobs.submit(QUESTION, tools=["python.run"])
    view = jobs.wait(job_id)
    (chart,) = next(s for s in view["steps"] if s["kind"] == "run_python")["artifacts"]
    open_console(page, host, f"#job={job_id}")
    expect(status_badge(page)).to_have_text("Completed")
    image = page.locator("#detail .slot-results img.artifact-image")
    expect(image).to_have_count(1)
    expect(image).to_have_attribute("alt", f"{chart['name']} ({chart['size']:,} bytes)")
    page.wait_for_function(
        "() => { const i = document.querySelector('.slot-results img.artifact-image');"
        " return i && i.naturalWidth > 0; }"
    )
    assert image.evaluate("i => i.src.startsWith('blob:')")
    # The answer shows the chart with its answer and leads to the step that drew it; so do the citations.
    files = page.locator("#answer-files")
    expect(files).to_contain_text("Charts and files (1)")
    expect(files.locator("img.artifact-image")).to_have_attribute("alt", f"{chart['name']} ({chart['size']:,} bytes)")
    files.get_by_role("button", name=re.compile(r"^from step ")).click()
    expect(page.locator(f"#artifact-{chart['ref']}")).to_be_focused()
    expect(page.locator("#citations .citation-file")).to_contain_text(chart["name"])
    # The step's raw output is whole and closed behind a disclosure: no JSON dump above the chart.
    result = page.locator(f"#detail .slot-results article[data-step-id='{chart['ref'].split('-')[0]}']")
    raw = result.locator("details.raw-output")
    expect(raw).not_to_have_attribute("open", "")
    assert result.locator("img.artifact-image").bounding_box()["y"] < raw.bounding_box()["y"]  # type: ignore[index]
    page.screenshot(path=str(shots / "artifact-chart.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(shots / "artifact-chart-390.png"), full_page=True)


def test_a_python_approval_shows_the_code_and_its_files_and_approve_runs_it(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    job_id = jobs.submit(QUESTION, tools=["python.run"], approval={"python": "writes_files"})
    jobs.wait(job_id, {"waiting_for_user"})
    open_console(page, host, f"#job={job_id}")
    code = page.locator("#waiting-code")
    expect(code).to_be_visible()
    assert "growth_rate" in code.input_value()
    expect(page.get_by_text("Files it writes: chart.png")).to_be_visible()
    expect(page.locator("#waiting-sql")).to_have_count(0)
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#detail .slot-results img.artifact-image")).to_have_count(1)
