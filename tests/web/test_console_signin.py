"""The console with App Service Authentication on: it signs in instead of asking for a key, and shows your jobs only.

devhost simulates Easy Auth (``--principal-header``): a browser context's ``X-Devhost-Principal`` header
is the signed-in user; without it the browser is signed out.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.web.console import DOCS_Q, SQL_Q, UI_TIMEOUT_MS, job_id_of


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("web-signin-host")
    proc = DevHostProcess(
        REPO_ROOT, data, env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"}, extra_args=["--principal-header"]
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def bob(browser: Browser, host: DevHostProcess) -> Iterator[Page]:
    context = browser.new_context(
        viewport={"width": 1280, "height": 900},
        base_url=host.base_url,
        extra_http_headers={"X-Devhost-Principal": "bob"},
    )
    context.set_default_timeout(UI_TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == []


def test_signed_out_the_console_offers_sign_in_not_a_key(page: Page) -> None:
    page.goto("/api/ui/")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    expect(page.locator("#key-form")).to_be_hidden()
    expect(page.locator("#auth-user")).to_have_text("Not signed in")
    link = page.get_by_role("link", name="Sign in")
    href = link.get_attribute("href") or ""
    parts = urlsplit(href)
    assert parts.path == "/.auth/login/aad"
    assert parse_qs(parts.query)["post_login_redirect_uri"] == ["/api/ui/"]
    # Signed out is a state, not an error: the lists say to sign in, and no alert is raised.
    expect(page.locator("#jobs-locked")).to_have_text("Sign in (top right) to see your jobs.")
    expect(page.locator("#banner")).to_be_hidden()
    expect(page.get_by_role("alert")).to_have_count(0)


def test_signed_in_the_console_shows_only_your_jobs(bob: Page, host: DevHostProcess) -> None:
    alice = httpx.Client(base_url=host.base_url, headers={"X-Devhost-Principal": "alice"}, timeout=60)
    theirs = alice.post("/api/jobs", json={"question": SQL_Q}).json()["id"]
    bob.goto("/api/ui/")
    bob.wait_for_selector("html[data-ready='true']", state="attached")
    expect(bob.locator("#auth-user")).to_have_text("Signed in as bob")
    expect(bob.get_by_role("link", name="Sign out")).to_be_visible()
    expect(bob.locator("#key-form")).to_be_hidden()
    bob.get_by_label("Question", exact=True).fill(DOCS_Q)
    bob.get_by_role("button", name="Run job").click()
    mine = job_id_of(bob)
    expect(bob.locator("#job-status")).to_have_text("Completed")
    expect(bob.locator(f"#job-list .job-item[data-job-id='{mine}']")).to_have_count(1)
    expect(bob.locator(f"#job-list .job-item[data-job-id='{theirs}']")).to_have_count(0)
    # Alice's job, opened by its address, is not found for bob.
    bob.goto(f"/api/ui/#job={theirs}")
    expect(bob.locator("#detail")).to_contain_text("JOB_NOT_FOUND")


def test_a_key_left_in_local_storage_by_an_older_console_is_removed(page: Page) -> None:
    page.goto("/api/ui/")
    page.wait_for_selector("html[data-ready='true']", state="attached")
    page.evaluate("localStorage.setItem('durable-ai-jobs.function-key', 'old-key')")
    page.reload()
    page.wait_for_selector("html[data-ready='true']", state="attached")
    assert page.evaluate("localStorage.getItem('durable-ai-jobs.function-key')") is None
