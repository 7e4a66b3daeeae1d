"""Fixtures for the web console tests: one devhost and one headless Chromium per module.

Chromium is Debian's (/usr/bin/chromium, installed by scripts/install-system-deps.sh), driven by the
Playwright wheel's own driver; `playwright install` is never used. Screenshots go to the module's tmp
directory, or to $WEB_SCREENSHOT_DIR when it is set (to look at them after a run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from tests.devhost.hostproc import DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import CHROMIUM, CHROMIUM_ARGS, UI_TIMEOUT_MS, start_host


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = start_host(tmp_path_factory.mktemp("web-host"))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-system-deps.sh (installs Debian's chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=UI_TIMEOUT_MS)

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("WEB_SCREENSHOT_DIR")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class PageProblems:
    """What the page reported that a working console never does: uncaught errors and CSP violations."""

    errors: list[str] = field(default_factory=list)

    def check(self) -> None:
        assert self.errors == [], self.errors


@pytest.fixture
def page(browser: Browser, host: DevHostProcess) -> Iterator[Page]:
    """A fresh browser context (empty storage) on the console, with the function key entered."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=host.base_url)
    context.set_default_timeout(UI_TIMEOUT_MS)
    tab = context.new_page()
    problems = PageProblems()
    tab.on("pageerror", lambda exc: problems.errors.append(f"page error: {exc}"))
    tab.on(
        "console",
        lambda msg: (
            problems.errors.append(f"console: {msg.text}")
            if re.search(r"Content Security Policy|Refused to|Uncaught", msg.text)
            else None
        ),
    )
    yield tab
    context.close()
    problems.check()
