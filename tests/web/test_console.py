"""The web console in headless Chromium against a real devhost running the app (offline defaults)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, Route, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import DOCS_Q, MIXED_Q, SQL_Q, open_console, status_badge, submit


def test_mixed_question_shows_answer_citations_sql_table_usage_and_log(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, MIXED_Q)
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(job_id, log_limit=1000)
    assert view["status"] == "completed"

    # The answer and every citation the API returned, documents by source id and the SQL query.
    expect(page.locator("#final-answer")).to_contain_text("30 days")
    citations = page.locator("#citations > li")
    expect(citations).to_have_count(len(view["answer"]["citations"]))
    for cited in view["answer"]["citations"]:
        expect(page.locator("#citations .source-id", has_text=cited["source_id"])).to_have_count(1)
    # The SQL is shown once (in the step results); its citation leads there instead of repeating it.
    expect(page.locator("#citations .citation-sql")).not_to_contain_text("SELECT")

    # The plan table: one row per step, all succeeded, with tokens and model.
    rows = page.locator("#steps-table tbody tr")
    expect(rows).to_have_count(len(view["steps"]))
    for i, step in enumerate(view["steps"]):
        row = rows.nth(i)
        expect(row).to_have_attribute("data-step-id", step["id"])
        expect(row).to_contain_text(step["kind"])
        expect(row).to_contain_text("Succeeded")
        expect(row.locator("td").nth(3)).to_have_text(f"{step['usage']['total_tokens']:,}")

    # The SQL result table holds exactly the rows the API returned.
    sql_step = next(s for s in view["steps"] if s["kind"] == "execute_azure_sql")
    table = page.locator(f".result-sql[data-step-id='{sql_step['id']}'] table")
    headers = table.locator("thead th")
    expect(headers).to_have_text(sql_step["output"]["columns"])
    body_rows = table.locator("tbody tr")
    expect(body_rows).to_have_count(len(sql_step["output"]["rows"]))
    for i, row_values in enumerate(sql_step["output"]["rows"]):
        expect(body_rows.nth(i).locator("td")).to_have_text([shown_number(v) for v in row_values])
    expect(page.locator(f".result-sql[data-step-id='{sql_step['id']}'] pre")).to_have_text(sql_step["output"]["sql"])

    # Usage: the total row equals the job total.
    total = view["usage"]["total"]
    expect(page.locator("#usage-table tfoot td").nth(2)).to_have_text(f"{total['total_tokens']:,}")

    # The log: every entry of the history, once, in order (the page pages it by log_cursor).
    entries = page.locator("#log-entries li")
    expect(entries).to_have_count(len(view["log"]["entries"]))
    seqs = [int(s) for s in entries.evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == [e["seq"] for e in view["log"]["entries"]]

    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    page.screenshot(path=str(shots / "mixed-completed.png"), full_page=True)


def shown_number(value: object) -> str:
    """A cell as the console shows it (integers grouped; these tests' columns have no decimals)."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def same_sql(shown: str, sql: str) -> bool:
    """The console lays SQL out on several lines; only whitespace may differ."""
    return shown.split() == sql.split()


def wait_for_question(page: Page, heading: str = "Approval needed") -> None:
    expect(status_badge(page)).to_have_text("Waiting for you")
    expect(page.get_by_role("heading", name=heading)).to_be_visible()


def test_approval_shows_the_sql_and_approve_runs_it(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    wait_for_question(page)
    waiting = jobs.view(job_id)["waiting"]
    editor = page.get_by_label("SQL to run", exact=False)
    expect(editor).not_to_have_value("")
    assert same_sql(editor.input_value(), waiting["details"]["sql"])
    expect(page.locator("#waiting .waiting-question")).to_have_text(waiting["question"])
    options = page.locator("#waiting .actions button")
    expect(options).to_have_text(["Approve", "Run edited SQL", "Reject (skip the query)", "Abort job"])
    expect(page.locator("#steps-table tbody tr").first).to_contain_text("Waiting")
    page.screenshot(path=str(shots / "approval-waiting.png"), full_page=True)

    page.get_by_role("button", name="Approve", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#waiting")).to_have_count(0)
    view = jobs.view(job_id)
    assert view["steps"][0]["output"]["sql"] == waiting["details"]["sql"]
    expect(page.locator(".result-sql pre")).to_have_text(waiting["details"]["sql"])


def test_edited_sql_is_what_runs(page: Page, host: DevHostProcess, jobs: JobClient) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    wait_for_question(page)
    edited = "SELECT reason, COUNT(*) AS n FROM returns GROUP BY reason ORDER BY n DESC"
    page.get_by_label("SQL to run", exact=False).fill(edited)
    first = jobs.view(job_id)["waiting"]["question_id"]
    page.get_by_role("button", name="Run edited SQL").click()
    # A human approves the exact statement that runs: the guarded edit is shown for approval again.
    again = jobs.view(job_id).get("waiting") or {}
    for _ in range(200):
        if again.get("question_id") not in (None, first):
            break
        page.wait_for_timeout(50)
        again = jobs.view(job_id).get("waiting") or {}
    shown = again["details"]["sql"]
    assert "group by reason" in shown.lower()
    expect(page.locator("#waiting")).to_contain_text(f"Question {again['question_id']}")
    assert same_sql(page.get_by_label("SQL to run", exact=False).input_value(), shown)
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(status_badge(page)).to_have_text("Completed")
    output = jobs.view(job_id)["steps"][0]["output"]
    assert output["sql"] == shown
    assert "group by reason" in output["sql"].lower()
    expect(page.locator(".result-sql pre")).to_have_text(output["sql"])  # as the guard capped it
    expect(page.locator(".result-sql thead th")).to_have_text(["reason", "n"])
    expect(page.locator(".result-sql tbody tr")).to_have_count(len(output["rows"]))


def test_an_answer_the_api_refuses_is_shown(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    wait_for_question(page)
    # Another user answers first, differently (the same answer again would be taken as a repeat: 202).
    # This page's reads of the job are held (a slow network), so it still shows the
    # question (the event stream says the job moved on; the view it then reads is held).
    held: list[Route] = []
    holding = True

    def hold(route: Route) -> None:
        if holding and route.request.method == "GET":
            held.append(route)
        else:
            route.continue_()

    polls = re.compile(rf"/api/jobs/{job_id}\?")
    page.route(polls, hold)
    assert jobs.answer(job_id, "reject").status_code == 202
    jobs.wait(job_id)

    page.get_by_role("button", name="Approve", exact=True).click()
    notice = page.locator("#action-error")
    expect(notice).to_contain_text("ALREADY_ANSWERED")
    expect(notice).to_contain_text("was already answered")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    page.screenshot(path=str(shots / "answer-refused.png"), full_page=True)

    holding = False
    for route in held:
        route.continue_()
    expect(status_badge(page)).to_have_text("Completed")
    expect(notice).to_be_visible()  # the user's own error stays until dismissed
    page.get_by_role("button", name="Dismiss").click()
    expect(notice).to_be_hidden()


def test_invalid_form_values_show_the_api_error_and_field(page: Page, host: DevHostProcess) -> None:
    open_console(page, host)
    page.get_by_label("Question", exact=True).fill(SQL_Q)
    page.get_by_label("Max tokens per step", exact=True).fill("200000")
    page.get_by_role("button", name="Run job").click()
    error = page.locator("#form-error")
    expect(error).to_contain_text("INVALID_REQUEST")
    expect(error).to_contain_text("constraints.max_tokens")
    expect(page.get_by_label("Max tokens per step", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(page).not_to_have_url(re.compile("#job="))


def test_budget_stop_shows_the_failing_step(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, MIXED_Q, max_tokens="400", budget="3000")
    expect(status_badge(page)).to_have_text("Failed")
    error = jobs.view(job_id)["error"]
    failure = page.locator(".failure")
    expect(failure.get_by_role("heading")).to_contain_text(f"Failed at step {error['step_id']}")
    expect(failure).to_contain_text("BUDGET_EXCEEDED")
    expect(failure).to_contain_text(error["message"])
    expect(page.locator(f"#steps-table tr[data-step-id='{error['step_id']}']")).to_contain_text("Failed")
    page.screenshot(path=str(shots / "failed-budget.png"), full_page=True)


def test_cancel_a_waiting_job(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, SQL_Q, approval="always")
    wait_for_question(page)
    page.get_by_role("button", name="Cancel job").click()
    page.get_by_role("button", name="Keep it running").click()  # changing one's mind costs nothing
    expect(status_badge(page)).to_have_text("Waiting for you")
    page.get_by_role("button", name="Cancel job").click()
    page.get_by_role("button", name="Yes, cancel the job").click()
    expect(status_badge(page)).to_have_text("Cancelled")
    expect(page.locator("#steps-table tbody tr").first).to_contain_text("Cancelled")
    expect(page.locator("#waiting")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    assert jobs.view(job_id)["status"] == "cancelled"
    expect(page.locator("#log-entries")).to_contain_text("job cancelled")
    page.screenshot(path=str(shots / "cancelled.png"), full_page=True)


def listed_ids(page: Page) -> list[str]:
    return list(page.locator("#job-list .job-item").evaluate_all("els => els.map(e => e.dataset.jobId)"))


def test_job_list_newest_first_filter_more_and_deep_link(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    done = [jobs.submit(DOCS_Q) for _ in range(2)]
    for job_id in done:
        jobs.wait(job_id)
    # Enough jobs for a second page (the console asks for 20 at a time).
    for _ in range(21):
        jobs.submit(DOCS_Q)
    open_console(page, host)
    expected = jobs.http.get("/api/jobs", params={"limit": 100}).json()["jobs"]
    assert len(expected) > 20
    expect(page.locator("#job-list .job-item")).to_have_count(20)
    assert listed_ids(page) == [j["id"] for j in expected[:20]]
    page.get_by_role("button", name="More jobs").click()
    expect(page.locator("#job-list .job-item")).to_have_count(len(expected))
    assert listed_ids(page) == [j["id"] for j in expected]
    expect(page.get_by_role("button", name="More jobs")).to_be_hidden()

    page.get_by_label("Show jobs with status", exact=True).select_option("completed")
    completed = jobs.http.get("/api/jobs", params={"status": "completed", "limit": 20}).json()["jobs"]
    expect(page.locator("#job-list .job-item")).to_have_count(len(completed))
    expect(page.locator("#job-list .badge")).to_have_text(["Completed"] * len(completed))

    # Opening a job from the list: its address is a deep link that works in a new tab.
    first = listed_ids(page)[0]
    page.locator(f"#job-list .job-item[data-job-id='{first}'] a").click()
    expect(page).to_have_url(re.compile(f"#job={first}$"))
    expect(page.locator("#job-list a[aria-current='true']")).to_have_count(1)
    expect(status_badge(page)).to_have_text("Completed")
    page.screenshot(path=str(shots / "job-list.png"))
    other = page.context.new_page()
    # The key is kept per tab (sessionStorage): a new tab asks for it again, then the deep link works.
    open_console(other, host, f"#job={done[0]}")
    expect(other.locator("#detail-heading")).to_have_text(DOCS_Q)
    expect(other.locator("#job-status")).to_have_text("Completed")
    other.close()
    # Reloading the same tab keeps the key.
    page.reload()
    expect(page.get_by_label("Function key", exact=True)).to_have_value(host.keys.function if host.keys else "")


def test_narrow_screen_layout(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    job_id = jobs.submit(MIXED_Q)
    jobs.wait(job_id)
    page.set_viewport_size({"width": 390, "height": 844})
    open_console(page, host, f"#job={job_id}")
    expect(status_badge(page)).to_have_text("Completed")
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= 390, f"the page scrolls sideways: {scroll_width}px"
    # One column, the open job first.
    detail_top = page.locator("#job-detail").bounding_box()
    form_top = page.locator("#job-form").bounding_box()
    assert detail_top and form_top and detail_top["y"] < form_top["y"]
    page.screenshot(path=str(shots / "narrow.png"))
    page.screenshot(path=str(shots / "narrow-full.png"), full_page=True)


def test_job_text_is_shown_as_text_never_as_markup(page: Page, host: DevHostProcess) -> None:
    question = "<img src=x onerror=\"document.title='pwned'\"> <b>Which</b> region had the most returns in Q3?"
    open_console(page, host)
    submit(page, question)
    expect(page.locator("#detail-heading")).to_have_text(question)
    expect(page.locator("#job-list .job-question").first).to_have_text(question)
    expect(status_badge(page)).to_have_text(re.compile("Completed|Failed|Waiting for you"))
    expect(page.locator("main img, main b")).to_have_count(0)
    assert page.title() == "Durable AI Jobs"


def test_clarifying_question_takes_free_text(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    open_console(page, host)
    job_id = submit(page, "Zxqv blorp?")  # matches neither the data nor the documents: the planner asks
    wait_for_question(page, "A question for you")
    waiting = jobs.view(job_id)["waiting"]
    assert waiting["kind"] == "clarify" and waiting["free_text"]
    expect(page.locator("#waiting .waiting-question")).to_have_text(waiting["question"])
    expect(page.locator("#waiting .actions button")).to_have_text(["Send answer", *waiting["options"]])
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#waiting [role=alert]")).to_contain_text("Type an answer first.")
    page.screenshot(path=str(shots / "clarify.png"), full_page=True)
    page.get_by_label("Your answer", exact=True).fill("the returns policy")
    page.get_by_label("Your answer", exact=True).press("Enter")
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#log-entries")).to_contain_text(f"user answered {waiting['question_id']}")
    assert jobs.view(job_id)["status"] == "completed"


def test_a_missing_or_wrong_key_is_explained(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    jobs.submit(DOCS_Q)
    page.emulate_media(color_scheme="dark")
    page.goto("/api/ui/")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    # Before the user has done anything: a calm "enter the key" state, no error banner.
    locked = page.locator("#jobs-locked")
    expect(locked).to_have_text("Enter the function key at the top of the page to see the jobs.")
    expect(page.locator("#key-state")).to_have_text("Not set")
    expect(page.locator("#banner")).to_be_hidden()
    expect(page.locator("#jobs-error")).to_be_hidden()
    expect(page.get_by_role("alert")).to_have_count(0)
    page.screenshot(path=str(shots / "no-key-dark.png"))
    # A wrong key is checked and said to be rejected, never "accepted" or kept.
    key = page.get_by_label("Function key", exact=True)
    key.fill("wrong-key")
    expect(page.locator("#key-state")).to_have_text("Not checked yet")
    key.dispatch_event("change")
    expect(page.locator("#key-state")).to_have_text("Key rejected (401)")
    expect(locked).to_contain_text("rejected (401)")
    assert page.evaluate("sessionStorage.getItem('durable-ai-jobs.function-key')") is None
    page.screenshot(path=str(shots / "wrong-key-dark.png"))
    assert host.keys is not None
    key.fill(host.keys.function)
    key.dispatch_event("change")
    expect(page.locator("#key-state")).to_have_text("Key accepted · kept for this tab")
    expect(locked).to_be_hidden()
    expect(page.locator("#job-list .job-item").first).to_be_visible()
    expect(page.locator("#jobs-error")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('durable-ai-jobs.function-key')") == host.keys.function
    assert page.evaluate("localStorage.getItem('durable-ai-jobs.function-key')") is None
    page.get_by_role("button", name="Show").click()
    expect(key).to_have_attribute("type", "text")
    expect(page.get_by_role("button", name="Hide")).to_have_attribute("aria-pressed", "true")


def test_a_shared_job_link_without_a_key_asks_for_it_calmly(page: Page, host: DevHostProcess, jobs: JobClient) -> None:
    job_id = jobs.submit(DOCS_Q)
    jobs.wait(job_id)
    page.goto(f"/api/ui/#job={job_id}")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    expect(page.locator("#detail-locked")).to_have_text(
        "Enter the function key at the top of the page to open this job."
    )
    expect(page.get_by_role("alert")).to_have_count(0)
    assert host.keys is not None
    key = page.get_by_label("Function key", exact=True)
    key.fill(host.keys.function)
    key.dispatch_event("change")
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#detail-locked")).to_be_hidden()


LABEL_AUDIT = """() => {
  const problems = [];
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (!el.labels.length && !el.getAttribute('aria-label')) problems.push(`unlabelled ${el.outerHTML.slice(0, 80)}`);
  }
  for (const el of document.querySelectorAll('button, a[href]')) {
    const named = el.textContent.trim() || el.getAttribute('aria-label');
    if (!named) problems.push(`nameless ${el.outerHTML.slice(0, 80)}`);
  }
  for (const el of document.querySelectorAll('[id]')) {
    if (document.querySelectorAll(`[id="${CSS.escape(el.id)}"]`).length > 1) problems.push(`duplicate id ${el.id}`);
  }
  if (document.querySelectorAll('h1').length !== 1) problems.push('not exactly one h1');
  return problems;
}"""


def test_controls_are_labelled_and_keyboard_usable(page: Page, host: DevHostProcess) -> None:
    open_console(page, host)
    submit(page, SQL_Q, approval="always")
    wait_for_question(page)
    assert page.evaluate(LABEL_AUDIT) == []
    # Approve with the keyboard only.
    page.get_by_role("button", name="Approve", exact=True).focus()
    page.keyboard.press("Enter")
    expect(status_badge(page)).to_have_text("Completed")
    assert page.evaluate(LABEL_AUDIT) == []


def test_the_forms_choices_and_labels_come_from_the_catalog(page: Page, host: DevHostProcess) -> None:
    """The mode, SQL approval and status choices are the catalog's enums with its labels (a value with none: itself)."""

    def with_new_values(route: Route) -> None:
        resp = route.fetch()
        if resp.status != 200:  # before the key is entered
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        catalog["job_request_schema"]["properties"]["mode"]["enum"].append("swarm")  # throwaway, no label
        catalog["labels"]["mode"]["hybrid"] = "Hybrid (relabelled)"
        catalog["job_statuses"].append("paused")
        catalog["labels"]["job_status"]["paused"] = "On hold"
        route.fulfill(json=catalog)

    page.route("**/api/catalog", with_new_values)
    open_console(page, host)
    mode = page.get_by_label("Mode", exact=True)
    expect(mode.locator("option")).to_have_text(
        [
            "Deterministic: a plan, then its steps",
            "Hybrid (relabelled)",
            "Agent: the Executor calls tools turn by turn",
            "swarm",
        ]
    )
    expect(mode).to_have_value("deterministic")  # the schema's default
    expect(page.get_by_label("SQL approval", exact=True).locator("option")).to_have_text(
        ["Never ask", "Always ask", "Sensitive tables only"]
    )
    statuses = page.get_by_label("Show jobs with status", exact=True).locator("option")
    expect(statuses.first).to_have_text("All statuses")
    expect(statuses.last).to_have_text("On hold")
