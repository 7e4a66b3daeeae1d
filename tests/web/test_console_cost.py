"""The job's cost in the console: the ledger's total in the header (with its currency, the meters with no price
counted apart, never as 0), the breakdown on demand (by meter, by step, the unknown meters with their
quantities), and each ended job's cost in the job list, a cancelled one's too.

Headless Chromium against a real devhost on embedded defaults, priced for Flex On Demand (so some meters have
a price and the Azure Storage transactions and stored bytes do not). Everything checked here is compared with
what the server published (the view's ``cost``, the list's ``cost``), never with numbers written in JS.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import MIXED_Q, SQL_Q, open_console, start_host, status_badge


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_host(tmp_path_factory.mktemp("web-cost"), {"COST_HOSTING": "flex_on_demand"})
    yield proc
    proc.stop()


def row(page: Page, job_id: str) -> Locator:
    return page.locator(f".job-item[data-job-id='{job_id}']")


def test_the_header_shows_the_ledger_total_and_the_breakdown_on_demand(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    job_id = jobs.submit(MIXED_Q)
    cost = jobs.wait(job_id, timeout_s=120)["cost"]
    unknown = [u["meter"] for u in cost["unknown"]]
    assert set(unknown) == {"storage.transactions", "storage.stored_bytes"} and cost["total"] > 0
    open_console(page, host, f"#job={job_id}")
    expect(status_badge(page)).to_have_text("Completed")
    header = page.locator("#job-cost")
    expect(header).to_contain_text(re.compile(r"^USD\s0\.0000\d+ \+ price unknown for 2 meters$"))
    shown = float(re.findall(r"[\d.]+", header.inner_text())[0])
    assert shown == pytest.approx(cost["total"], rel=0.01)  # three significant digits of the server's total

    # The breakdown is closed until asked for.
    box = page.locator("#cost-breakdown")
    expect(box).not_to_have_attribute("open", "")
    page.get_by_role("button", name="Breakdown").click()
    expect(box).to_have_attribute("open", "")
    expect(page.locator("#cost-by-meter")).to_be_visible()
    for meter in cost["by_meter"]:
        cells = page.locator(f"#cost-by-meter tr[data-meter='{meter['meter']}'] td")
        if meter["included_in"]:
            expect(cells.last).to_have_text(f"included in {meter['included_in']}")
        elif meter["cost"] is None:
            # A meter with no price: its quantity and "price unknown", never a 0.
            expect(cells.last).to_have_text("price unknown")
            expect(cells.nth(1)).to_have_text(meter["unit"])
        else:
            expect(cells.last).to_contain_text("USD")
    # The unknown meters again, with their quantities and units.
    items = page.locator("#cost-unknown li")
    expect(items).to_have_count(len(unknown))
    transactions = next(u for u in cost["unknown"] if u["meter"] == "storage.transactions")
    expect(page.locator("#cost-unknown li[data-meter='storage.transactions']")).to_contain_text(
        f"{transactions['quantity']:,g} transaction"
    )
    # By step: every step of the ledger, with the meters it has no price for.
    steps = page.locator("#cost-by-step tbody tr")
    expect(steps).to_have_count(len(cost["by_step"]))
    s3 = next(s for s in cost["by_step"] if "storage.stored_bytes" in s["unknown"])
    expect(page.locator(f"#cost-by-step tr[data-step='{s3['step_id']}'] td").last).to_contain_text(
        "storage.stored_bytes"
    )
    page.screenshot(path=str(shots / "cost-breakdown.png"), full_page=True)
    box.screenshot(path=str(shots / "cost-breakdown-box.png"))
    # The job list: the same total and the count of unknown meters, from the list API's own cost.
    listed = next(j for j in jobs.http.get("/api/jobs", params={"limit": 100}).json()["jobs"] if j["id"] == job_id)
    assert listed["cost"]["total"] == pytest.approx(cost["total"]) and listed["cost"]["unknown"] == 2
    expect(row(page, job_id).locator(".job-cost")).to_have_text(re.compile(r"^USD\s0\.0000\d+ \+ 2 unknown$"))


def test_a_cancelled_job_shows_what_it_cost_in_the_header_and_the_list(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    open_console(page, host, f"#job={job_id}")
    # While it waits: what it has cost so far.
    expect(page.locator("#job-cost")).to_contain_text("so far")
    assert jobs.cancel(job_id).status_code == 202
    expect(status_badge(page)).to_have_text("Cancelled")
    cost = jobs.view(job_id)["cost"]
    assert cost["total"] > 0
    expect(page.locator("#job-cost")).to_have_text(
        re.compile(rf"^USD\s0\.0000\d+ \+ price unknown for {len(cost['unknown'])} meters?$")
    )
    page.locator("#refresh-jobs").click()
    expect(row(page, job_id).locator(".job-cost")).to_contain_text("USD")
