"""The console tells the truth (issue 9, console items): confirmations, cited sources, SQL once and formatted,
numbers, long questions and the offline model's label; in headless Chromium against a real devhost."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import MIXED_Q, SQL_Q, open_console, status_badge, submit

REVENUE_Q = "What is the total revenue by region?"
CLAUSES = ("SELECT", "FROM", "JOIN", "WHERE", "GROUP BY", "ORDER BY", "LIMIT")


def in_viewport(locator: Locator) -> bool:
    return bool(
        locator.evaluate(
            "el => { const r = el.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }"
        )
    )


def test_abort_at_a_question_asks_first(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    expect(page.get_by_role("heading", name="Approval needed")).to_be_visible()
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/feedback") else None)
    page.get_by_role("button", name="Abort job").click()
    confirm = page.get_by_role("button", name="Yes, abort the job")
    expect(confirm).to_be_visible()
    expect(confirm).to_be_focused()
    page.screenshot(path=str(shots / "abort-confirm.png"), full_page=True)
    page.get_by_role("button", name="Keep the question open").click()
    expect(confirm).to_be_hidden()
    assert sent == []  # changing one's mind sends nothing
    assert jobs.view(job_id)["status"] == "waiting_for_user"
    page.get_by_role("button", name="Abort job").click()
    confirm.click()
    expect(status_badge(page)).not_to_have_text("Waiting for you")
    assert len(sent) == 1
    assert jobs.wait(job_id)["status"] in ("failed", "cancelled")


def test_cancel_asks_first(page: Page, host: DevHostProcess, jobs: JobClient) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    expect(page.get_by_role("heading", name="Approval needed")).to_be_visible()
    page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_role("button", name="Yes, cancel the job")).to_be_focused()
    page.get_by_role("button", name="Keep it running").click()
    assert jobs.view(job_id)["status"] == "waiting_for_user"
    page.get_by_role("button", name="Cancel job").click()
    page.get_by_role("button", name="Yes, cancel the job").click()
    expect(status_badge(page)).to_have_text("Cancelled")


def test_citations_open_the_cited_passage_and_query(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    page.set_viewport_size({"width": 1280, "height": 600})
    open_console(page, host)
    job_id = submit(page, MIXED_Q)
    expect(status_badge(page)).to_have_text("Completed")
    citations = jobs.view(job_id)["answer"]["citations"]
    doc = next(c for c in citations if c["kind"] == "document")
    sql = next(c for c in citations if c["kind"] == "sql")

    chunk = page.locator(f"details.chunk[data-source-id='{doc['source_id']}']")
    expect(chunk).not_to_have_attribute("open", "")
    page.locator(f"#citations button[data-source-id='{doc['source_id']}']").click()
    expect(chunk).to_have_attribute("open", "")
    expect(chunk.locator(".chunk-content")).to_be_visible()
    expect(chunk).to_have_class(re.compile("flash"))
    assert in_viewport(chunk.locator("summary"))
    expect(chunk).to_contain_text(doc["title"])
    page.screenshot(path=str(shots / "citation-opened-chunk.png"))

    result = page.locator(f".result-sql[data-source-id='{sql['source_id']}']")
    page.locator(f"#citations button[data-source-id='{sql['source_id']}']").click()
    expect(result).to_have_class(re.compile("flash"))
    expect(result).to_be_focused()
    assert in_viewport(result.locator("pre"))
    expect(result.locator("table")).to_be_visible()

    # The [source] markers in the answer text lead to the same places.
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#final-answer .cite-mark", has_text=doc["source_id"]).first.click()
    expect(chunk).to_be_focused()


def test_sql_is_shown_once_and_formatted(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, MIXED_Q)
    expect(status_badge(page)).to_have_text("Completed")
    step = next(s for s in jobs.view(job_id)["steps"] if s["kind"] == "execute_azure_sql")
    raw = step["output"]["sql"]
    holders = page.locator("#detail pre, #detail textarea").filter(has_text=re.compile(r"FROM\s+returns"))
    expect(holders).to_have_count(1)
    shown = page.locator(".result-sql pre").inner_text()
    assert shown.split() == raw.split(), "formatting changed more than whitespace"
    lines = shown.splitlines()
    assert len(lines) >= 5
    for line in lines:
        assert line.lstrip().startswith(CLAUSES), line
    for clause in ("FROM", "WHERE", "GROUP BY", "ORDER BY", "LIMIT"):
        assert any(line.startswith(clause) for line in lines), clause
    # A quoted literal keeps its spaces and keywords: only whitespace outside strings is re-laid.
    assert "'2025-07-01'" in shown


def test_numbers_are_formatted_and_right_aligned(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, REVENUE_Q)
    expect(status_badge(page)).to_have_text("Completed")
    output = next(s for s in jobs.view(job_id)["steps"] if s["kind"] == "execute_azure_sql")["output"]
    col = output["columns"].index("revenue")
    values = [row[col] for row in output["rows"]]
    most = max(len(str(v).split(".")[1]) if "." in str(v) else 0 for v in values)
    decimals = 0 if most == 0 else max(2, min(4, most))  # one precision per column, money-like at least 2
    table = page.locator(".result-sql table")
    cells = table.locator(f"tbody tr td:nth-child({col + 1})")
    expect(cells).to_have_text([f"{v:,.{decimals}f}" for v in values])
    assert all("," in t for t in cells.all_inner_texts())  # thousands separators
    aligned = cells.evaluate_all("els => els.map(e => getComputedStyle(e).textAlign)")
    assert set(aligned) == {"right"}
    header = table.locator(f"thead th:nth-child({col + 1})")
    assert header.evaluate("e => getComputedStyle(e).textAlign") == "right"
    # The names stay left-aligned; in the answer's own table, numbers written as text align right too.
    assert table.locator("tbody td").first.evaluate("e => getComputedStyle(e).textAlign") in ("left", "start")
    answer_cells = page.locator("#final-answer table tbody td:nth-child(2)")
    expect(answer_cells.first).to_have_text(re.compile(r"^\$[\d,]+\.\d\d$"))
    assert set(answer_cells.evaluate_all("els => els.map(e => getComputedStyle(e).textAlign)")) == {"right"}
    page.screenshot(path=str(shots / "numbers.png"), full_page=True)


def test_a_long_question_is_clamped_and_the_input_counts_characters(
    page: Page, host: DevHostProcess, shots: Path
) -> None:
    open_console(page, host)
    counter = page.locator("#question-count")
    expect(counter).to_have_text("0 / 2,000 characters")
    question_box = page.get_by_label("Question", exact=True)
    assert question_box.get_attribute("aria-describedby") == "question-count"
    long_q = REVENUE_Q + " " + " ".join(f"Please also consider detail number {i} carefully." for i in range(30))
    question_box.fill(long_q)
    expect(counter).to_have_text(f"{len(long_q):,} / 2,000 characters")
    question_box.fill("x" * 1900)
    expect(counter).to_have_class(re.compile("near"))

    submit(page, long_q)
    heading = page.locator("#detail-heading")
    expect(heading).to_have_text(long_q)
    more = page.get_by_role("button", name="Show more")
    expect(more).to_be_visible()
    # Measure once the job has settled: while it runs the page may replace the heading element as it follows it.
    expect(status_badge(page)).to_have_text(re.compile("Completed|Failed|Waiting for you"))
    # Read in one script from the heading in the document now (the page may replace the element while it
    # follows the job, so a handle resolved a moment earlier can be detached).
    line = float(
        page.evaluate("() => parseFloat(getComputedStyle(document.getElementById('detail-heading')).lineHeight)")
    )
    clamped = heading.bounding_box()
    assert clamped and clamped["height"] <= 3 * line + 2
    page.screenshot(path=str(shots / "long-question-clamped.png"))
    more.click()
    expect(page.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    full = heading.bounding_box()
    assert full and full["height"] > clamped["height"] + line
    expect(status_badge(page)).to_have_text(re.compile("Completed|Failed|Waiting for you"))
    # Still open after the page updated the job.
    expect(page.get_by_role("button", name="Show less")).to_be_visible()

    # A short question has nothing to expand.
    submit(page, SQL_Q)
    expect(page.locator("#detail-heading")).to_have_text(SQL_Q)
    expect(page.locator("#question-more")).to_be_hidden()


def test_the_offline_model_is_labelled_as_a_stand_in(page: Page, host: DevHostProcess, jobs: JobClient) -> None:
    open_console(page, host)
    job_id = submit(page, REVENUE_Q)
    expect(status_badge(page)).to_have_text("Completed")
    steps = jobs.view(job_id)["steps"]
    assert {s.get("model") for s in steps if s.get("model")} == {"offline"}
    expect(page.locator("#answer-model")).to_have_text(
        re.compile("deterministic, keyword-matching stand-in, not an LLM")
    )
    for step in steps:
        row = page.locator(f"#steps-table tr[data-step-id='{step['id']}']")
        if step.get("model") == "offline":
            expect(row.locator(".offline-note")).to_have_text("keyword-matching stand-in, not an LLM")
        else:
            expect(row.locator(".offline-note")).to_have_count(0)


def test_a_job_that_failed_in_planning_does_not_show_planning(
    page: Page, host: DevHostProcess, jobs: JobClient
) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, budget="10")  # the planner's own call is over this budget
    expect(status_badge(page)).to_have_text("Failed")
    assert jobs.view(job_id)["steps"] == []
    expect(page.locator("#plan-state")).to_have_text("No plan: the job failed before a plan was made.")
    expect(page.locator("#detail")).not_to_contain_text("Planning…")
