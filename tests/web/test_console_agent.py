"""Agent mode in the console: submit with bounds and tools, the Executor's turns and tool calls, its questions.

Headless Chromium against a real devhost running the app on embedded defaults (the offline Executor).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import MIXED_Q, fill_form, open_console, start_host, status_badge, submit

# Markup in the question reaches the tool calls' input: the console must show it as text.
MARKUP_Q = MIXED_Q.replace("refunds after 30 days", "<b>refunds</b> after 30 days")


def turn_lines(view: dict[str, Any]) -> list[str]:
    """The log lines of the Executor's turns, in order."""
    return [e["message"] for e in view["log"]["entries"] if e["message"].startswith("agent_turn")]


def row_of(page: Page, step_id: str) -> Locator:
    return page.locator(f"#agent-table tbody tr[data-step-id='{step_id}']")


def test_an_agent_job_shows_its_turns_tool_calls_and_answer(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, MARKUP_Q, mode="agent", max_turns="4", max_tool_calls="6")
    expect(status_badge(page)).to_have_text("Completed")
    view = jobs.view(job_id, log_limit=1000)
    assert view["mode"] == "agent" and view["status"] == "completed"

    # No plan table: the Executor's turns instead, each tool call a row with its turn, input and output.
    expect(page.locator("#steps-table")).to_have_count(0)
    calls = [s for s in view["steps"] if s.get("turn") is not None]
    assert {s["kind"] for s in calls} == {"execute_azure_sql", "consult_rag"}
    expect(page.locator("#agent-table tbody tr[data-step-id]")).to_have_count(len(view["steps"]))
    for step in calls:
        row = row_of(page, step["id"])
        expect(row).to_have_attribute("data-turn", str(step["turn"]))
        expect(row.locator("th .tool-name")).to_have_text(step["kind"])
        expect(row.locator(".tool-turn")).to_have_text(str(step["turn"]))
        expect(row).to_contain_text("Succeeded")
        expect(row.locator(".tool-input")).to_have_text(step["tool_input"])
        expect(row.locator(".tool-output")).to_have_text(step["tool_output"])
        expect(row.locator("td").nth(5)).not_to_have_text("—")  # a duration (the tool name is a th)
        expect(row.locator("td").nth(6)).to_have_text(f"{step['usage']['total_tokens']:,}")
        # Inside its turn's group.
        group = page.locator(f"#agent-table tbody.turn[data-turn='{step['turn']}']")
        expect(group.locator(f"tr[data-step-id='{step['id']}']")).to_have_count(1)
    # The model's text is data: the markup is shown as typed, never made into elements.
    docs = next(s for s in calls if s["kind"] == "consult_rag")
    assert "<b>refunds</b>" in docs["tool_input"]
    expect(row_of(page, docs["id"]).locator(".tool-input")).to_contain_text("<b>refunds</b>")
    expect(page.locator("#agent-table b")).to_have_count(0)
    expect(row_of(page, "answer")).to_contain_text("generate_response")

    # Every turn of the Executor is a group with its log lines, in order; the last turn called no tool.
    lines = turn_lines(view)
    assert len(lines) == view["steps"][0]["turn"] + 1 == 2
    expect(page.locator("#agent-table .reasoning .log-message")).to_have_text(lines)
    expect(page.locator("#agent-table tbody.turn[data-turn='1'] .log-message")).to_have_text(lines[:1])
    expect(page.locator("#agent-table tbody.turn[data-turn='2'] .turn-head")).to_contain_text("no tool calls")
    expect(page.locator("#steps-title")).to_have_text("Executor · 2 turns, 2 tool calls")

    # The answer and its citations, as for any job; the tool steps' results are shown.
    expect(page.locator("#final-answer")).to_contain_text("30 days")
    expect(page.locator("#citations > li")).to_have_count(len(view["answer"]["citations"]))
    sql = next(s for s in calls if s["kind"] == "execute_azure_sql")
    expect(page.locator(f".result-sql[data-step-id='{sql['id']}'] pre")).to_have_text(sql["output"]["sql"])
    expect(page.locator("#usage-table tbody")).to_contain_text(f"{sql['id']} · SQL (turn {sql['turn']})")
    # The Executor's turns have their own usage line: the lines add up to the total.
    usage = view["usage"]
    executor = page.locator("#usage-table tbody tr", has_text="Executor turns")
    expect(executor.locator("td").nth(2)).to_have_text(f"{usage['executor']['total_tokens']:,}")
    by_step = sum(u["total_tokens"] for u in usage["by_step"].values())
    assert usage["executor"]["total_tokens"] + by_step == usage["total"]["total_tokens"]
    expect(page.locator("#usage-table tfoot td").nth(2)).to_have_text(f"{usage['total']['total_tokens']:,}")
    page.screenshot(path=str(shots / "agent-completed.png"), full_page=True)


def test_the_executor_asks_and_the_console_answers(
    page: Page, host: DevHostProcess, jobs: JobClient, shots: Path
) -> None:
    open_console(page, host)
    job_id = submit(page, "Tell me about blorps", mode="agent")
    expect(status_badge(page)).to_have_text("Waiting for you")
    waiting = jobs.view(job_id)["waiting"]
    assert waiting["step_id"] == "t1" and waiting["kind"] == "clarify"
    expect(page.get_by_role("heading", name="A question for you")).to_be_visible()
    expect(page.locator("#waiting .waiting-question")).to_have_text(waiting["question"])
    asking = row_of(page, "t1")
    expect(asking.locator(".tool-name")).to_have_text("request_user_feedback")
    expect(asking).to_contain_text("Waiting")
    expect(asking.locator(".tool-output")).to_have_text("waiting for your answer")
    page.screenshot(path=str(shots / "agent-asks.png"), full_page=True)

    page.get_by_label("Your answer", exact=True).fill("returns")
    page.get_by_role("button", name="Send answer").click()
    expect(status_badge(page)).to_have_text("Completed")
    expect(page.locator("#waiting")).to_have_count(0)
    view = jobs.view(job_id, log_limit=1000)
    assert [(s["id"], s["kind"], s.get("turn")) for s in view["steps"]] == [
        ("t1", "request_user_feedback", 1),
        ("t2", "consult_rag", 2),
        ("answer", "generate_response", None),
    ]
    expect(asking).to_contain_text("Succeeded")
    expect(asking.locator(".tool-output")).to_have_text(view["steps"][0]["tool_output"])
    expect(asking.locator(".tool-output")).to_contain_text("returns")
    expect(row_of(page, "t2").locator(".tool-input")).to_contain_text("returns")
    expect(row_of(page, "t2")).to_have_attribute("data-turn", "2")
    # The wait is not part of the step's duration: the console says it apart.
    if view["steps"][0].get("waited_ms"):
        expect(asking.locator(".step-waited")).to_contain_text("waiting")
    expect(page.locator("#final-answer")).not_to_be_empty()


def test_agent_fields_are_checked_in_the_page_then_by_the_server(page: Page, host: DevHostProcess) -> None:
    open_console(page, host)
    expect(page.get_by_label("Max turns", exact=True)).to_be_hidden()
    fill_form(page, MIXED_Q, mode="agent", tools="http.weather, bad/tool")
    page.get_by_role("button", name="Run job").click()
    error = page.locator("#form-error")
    expect(error).to_contain_text("“bad/tool” is not a tool name")
    expect(page.get_by_label("Allowed family tools", exact=True)).to_have_attribute("aria-invalid", "true")
    assert "#job=" not in page.url

    # A bound out of range passes the page (numbers are the server's to judge) and names its field.
    fill_form(page, MIXED_Q, mode="agent", max_turns="99", tools="http.weather function.growth_rate")
    page.get_by_role("button", name="Run job").click()
    expect(error).to_contain_text("agent.max_turns")
    expect(page.get_by_label("Max turns", exact=True)).to_have_attribute("aria-invalid", "true")
    assert "#job=" not in page.url
    page.get_by_label("Mode", exact=True).select_option("hybrid")
    expect(page.get_by_label("Max turns", exact=True)).to_be_hidden()


def test_an_unconfigured_tool_is_refused_on_submit_naming_it(page: Page, host: DevHostProcess) -> None:
    open_console(page, host)
    fill_form(page, MIXED_Q, mode="agent", tools="function.growth_rate http.nowhere")
    page.get_by_role("button", name="Run job").click()
    expect(page.locator("#form-error")).to_contain_text("tools.1")
    expect(page.locator("#form-error")).to_contain_text("not configured")
    expect(page.get_by_label("Allowed family tools", exact=True)).to_have_attribute("aria-invalid", "true")
    assert "#job=" not in page.url


@pytest.fixture(scope="module")
def faulty_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    # The Executor's first turn fails with an error no retry fixes: the job answers from what it has (nothing).
    proc = start_host(tmp_path_factory.mktemp("faulty-host"), env={"OFFLINE_LLM_FAULTS": "agent_turn:BAD_REQUEST:1"})
    yield proc
    proc.stop()


def test_a_failed_executor_turn_is_shown_in_its_turn(page: Page, faulty_host: DevHostProcess) -> None:
    page.goto(f"{faulty_host.base_url}/api/ui/")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    assert faulty_host.keys is not None
    page.get_by_label("Function key", exact=True).fill(faulty_host.keys.function)
    page.get_by_label("Function key", exact=True).dispatch_event("change")
    job_id = submit(page, MIXED_Q, mode="agent")
    expect(status_badge(page)).to_have_text("Completed")
    lines = turn_lines(JobClient(faulty_host).view(job_id, log_limit=1000))
    assert lines and all("failed BAD_REQUEST" in line for line in lines), lines
    failed = page.locator("#agent-table tbody.turn[data-turn='1'] .reasoning li.failed .log-message")
    expect(failed).to_have_text(lines)
    expect(page.locator("#agent-table tbody.turn")).to_have_count(2)  # turn 1, then the answer
    expect(page.locator("#agent-table tbody.turn[data-turn='1'] .turn-head")).to_have_text("Turn 1 · no tool calls")


def test_the_form_limits_are_the_request_schemas(page: Page, host: DevHostProcess) -> None:
    """The job form's limits come from the catalog's job_request_schema: the console keeps no copy of them."""

    def tighter(route: Any) -> None:
        resp = route.fetch()
        if resp.status != 200:
            route.fulfill(response=resp)
            return
        catalog = resp.json()
        schema = catalog["job_request_schema"]
        schema["properties"]["question"]["maxLength"] = 100
        schema["properties"]["tools"]["maxItems"] = 2
        schema["$defs"]["AgentLimits"]["properties"]["max_turns"]["maximum"] = 5
        route.fulfill(json=catalog)

    page.route("**/api/catalog", tighter)
    open_console(page, host)
    expect(page.locator("#question-count")).to_have_text("0 / 100 characters")
    expect(page.get_by_label("Question", exact=True)).to_have_attribute("maxlength", "100")
    expect(page.get_by_label("Max turns", exact=True)).to_have_attribute("max", "5")
    expect(page.get_by_label("Max tokens per step", exact=True)).to_have_attribute("placeholder", "1024")
    fill_form(page, MIXED_Q[:90], mode="agent", tools="function.a function.b function.c")
    page.get_by_role("button", name="Run job").click()
    expect(page.locator("#form-error")).to_contain_text("At most 2 tools may be allowed (3 given).")
    expect(page.get_by_label("Allowed family tools", exact=True)).to_have_attribute("aria-invalid", "true")
