"""The console's verified queries page: lists what the server gives, edits (PUT) and retires (DELETE) through the API;
signed in, another user's shared query is shown without Edit and Retire (the server says it is not theirs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.web.console import UI_TIMEOUT_MS, open_console, start_host

SQL = "SELECT COUNT(*) AS order_count FROM orders o JOIN regions g ON g.region_id = o.region_id WHERE g.name = {region}"
REGIONS = {"region": {"values": ["North", "South", "East", "West"]}}


def spec(query_id: str, question: str) -> dict[str, Any]:
    return {"id": query_id, "name": query_id.replace("-", " "), "question": question, "sql": SQL, "variables": REGIONS}


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "webvqm" + uuid.uuid4().hex[:10]}
    proc = start_host(tmp_path_factory.mktemp("web-verified-manage"), env)
    yield proc
    proc.stop()


def row(page: Page, query_id: str) -> Any:
    return page.locator(f"tr.vq-row[data-id='{query_id}']")


def test_list_edit_and_retire_from_the_console(page: Page, host: DevHostProcess, jobs: JobClient, shots: Path) -> None:
    for body in (spec("orders-by-region", "How many orders did the {region} region get?"),
                 spec("orders-in-region", "Orders placed in the {region} region?")):  # fmt: skip
        assert jobs.http.post("/api/verified-queries", json=body).status_code == 201
    open_console(page, host, "#verified-queries")
    expect(page.locator("#vq-view")).to_be_visible()
    expect(page.locator("main.layout")).to_be_hidden()
    expect(row(page, "orders-by-region")).to_contain_text("How many orders did the {region} region get?")
    expect(row(page, "orders-in-region")).to_contain_text("live")
    expect(page.get_by_role("link", name="Verified queries")).to_have_attribute("aria-current", "page")

    # Edit: the form holds the server's query; a statement the guard refuses is refused with its code and field.
    row(page, "orders-by-region").get_by_role("button", name="Edit").click()
    form = page.locator("form.vq-edit")
    expect(form.get_by_label("Slot values (name: value, value)")).to_have_value("region: North, South, East, West")
    form.get_by_label("Name", exact=True).fill("orders per region, edited")
    statement = form.get_by_label("Statement (the same slots)")
    statement.fill("DELETE FROM orders WHERE {region} = 1")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".alert")).to_contain_text("INVALID_VERIFIED_QUERY")
    statement.fill(SQL)
    form.get_by_role("button", name="Save").click()
    expect(page.locator(".vq-flash")).to_contain_text("Saved “orders-by-region”")
    expect(row(page, "orders-by-region").locator(".vq-name")).to_have_text("orders per region, edited")
    listed = {q["id"]: q for q in jobs.http.get("/api/verified-queries").json()["verified_queries"]}
    assert listed["orders-by-region"]["name"] == "orders per region, edited"

    # Retire: confirmed in the page, then the server has it retired and the row says so, without the buttons.
    page.once("dialog", lambda dialog: dialog.accept())
    row(page, "orders-in-region").get_by_role("button", name="Retire").click()
    expect(page.locator(".vq-flash")).to_contain_text("Retired “orders-in-region”")
    expect(row(page, "orders-in-region").locator(".vq-retired")).to_have_text("retired")
    expect(row(page, "orders-in-region").get_by_role("button", name="Edit")).to_have_count(0)
    live = {q["id"] for q in jobs.http.get("/api/verified-queries").json()["verified_queries"]}
    assert "orders-in-region" not in live and "orders-by-region" in live
    page.screenshot(path=str(shots / "verified-queries-page.png"), full_page=True)

    # Back to the jobs page by the nav: this page steps aside.
    page.get_by_role("link", name="Jobs").click()
    expect(page.locator("main.layout")).to_be_visible()
    expect(page.locator("#vq-view")).to_be_hidden()


@pytest.fixture(scope="module")
def signed_in_host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "webvqs" + uuid.uuid4().hex[:10],
        "VERIFIED_QUERIES_SHARED_ROLES": "Analytics.Curator",
    }
    data = tmp_path_factory.mktemp("web-verified-signin")
    proc = DevHostProcess(REPO_ROOT, data, env=env, extra_args=["--principal-header"]).start()
    yield proc
    proc.stop()


def test_signed_in_a_shared_query_of_someone_else_has_no_edit(browser: Browser, signed_in_host: DevHostProcess) -> None:
    def user(principal: str) -> httpx.Client:
        return httpx.Client(base_url=signed_in_host.base_url, headers={"X-Devhost-Principal": principal}, timeout=60)

    curated = spec("curated-orders", "How many orders did the {region} region get?")
    assert user("cora;Analytics.Curator").post("/api/verified-queries", json=curated).status_code == 201
    private = spec("alices-orders", "Alice's {region} orders")
    assert user("alice").post("/api/verified-queries", json=private).status_code == 201
    mine = spec("bobs-orders", "Bob's {region} orders")
    assert user("bob").post("/api/verified-queries", json=mine).status_code == 201

    context = browser.new_context(
        viewport={"width": 1280, "height": 900},
        base_url=signed_in_host.base_url,
        extra_http_headers={"X-Devhost-Principal": "bob"},
    )
    context.set_default_timeout(UI_TIMEOUT_MS)
    bob = context.new_page()
    try:
        bob.goto("/api/ui/#verified-queries")
        bob.wait_for_selector("html[data-verified='ready']", state="attached")
        expect(row(bob, "curated-orders").locator(".vq-shared")).to_have_text("shared")
        expect(row(bob, "curated-orders").get_by_role("button", name="Edit")).to_have_count(0)
        expect(row(bob, "bobs-orders").get_by_role("button", name="Edit")).to_have_count(1)
        expect(row(bob, "bobs-orders").locator(".vq-private")).to_have_text("private")
        expect(row(bob, "alices-orders")).to_have_count(0)  # alice's private query is not even listed
    finally:
        context.close()
