"""Helpers for the console's browser tests: the host, the Chromium launch options, and page actions."""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-default-apps",
]
# Generous: the first job of a host also warms its imports; waits end as soon as the text shows.
UI_TIMEOUT_MS = 30_000


def start_host(tmp: Path, env: dict[str, str] | None = None) -> DevHostProcess:
    """A devhost running the function app itself on embedded defaults."""
    return DevHostProcess(REPO_ROOT, tmp, env={"JOB_RETRY_FIRST_INTERVAL_MS": "50", **(env or {})}).start()


def open_console(page: Page, host: DevHostProcess, fragment: str = "") -> None:
    """Load the console and enter the host's function key (kept in sessionStorage by the page)."""
    page.goto(f"/api/ui/{fragment}")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    assert host.keys is not None
    page.get_by_label("Function key", exact=True).fill(host.keys.function)
    page.get_by_label("Function key", exact=True).dispatch_event("change")


MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"
DOCS_Q = "What does the returns policy say about refunds after 30 days?"


def job_id_of(page: Page) -> str:
    """The job the page shows (from its #job=<id> address)."""
    expect(page).to_have_url(re.compile(r"#job=[0-9a-f]+$"))
    return page.url.rsplit("#job=", 1)[1]


def fill_form(
    page: Page,
    question: str,
    approval: str = "never",
    max_tokens: str = "",
    budget: str = "",
    *,
    mode: str = "deterministic",
    max_turns: str = "",
    max_tool_calls: str = "",
    tools: str = "",
) -> None:
    """Fill the job form (the agent fields only in agent mode, where the page shows them)."""
    page.get_by_label("Question", exact=True).fill(question)
    page.get_by_label("SQL approval", exact=True).select_option(approval)
    page.get_by_label("Max tokens per step", exact=True).fill(max_tokens)
    page.get_by_label("Token budget", exact=True).fill(budget)
    page.get_by_label("Mode", exact=True).select_option(mode)
    if mode == "agent":
        page.get_by_label("Max turns", exact=True).fill(max_turns)
        page.get_by_label("Max tool calls", exact=True).fill(max_tool_calls)
        page.get_by_label("Allowed family tools", exact=True).fill(tools)


def submit(
    page: Page, question: str, approval: str = "never", max_tokens: str = "", budget: str = "", **agent: str
) -> str:
    """Fill the form and run the job; returns the id the page opened."""
    fill_form(page, question, approval, max_tokens, budget, **agent)
    page.get_by_role("button", name="Run job").click()
    return job_id_of(page)


def status_badge(page: Page) -> Locator:
    """The job status badge of the detail view."""
    return page.locator("#job-status")
