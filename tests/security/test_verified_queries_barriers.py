"""Who sees, reuses, edits and retires a verified query, over HTTP on devhost with Easy Auth simulated: each barrier
on its own.

devhost runs with ``--principal-header`` (each request names its user and roles in ``X-Devhost-Principal``, and
devhost sets the ``X-MS-CLIENT-PRINCIPAL*`` headers as App Service does) and the deployment names its own
curator role in ``VERIFIED_QUERIES_SHARED_ROLES``: a curator's queries are everyone's, anyone else's are theirs
alone, the admin role sees all. A job reuses only what its owner may see.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devhost.storage.azurite import Azurite
from shared.jobs.contracts import ExecutionContext, JobOwnerRef
from shared.providers.sql.verified import QueryOwner, Reader, VerifiedQuery, may_change, now, visible
from shared.runtime.settings import Settings
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

CURATOR_ROLE = "Analytics.Curator"
SQL = (
    "SELECT COUNT(*) AS return_count FROM returns r JOIN order_items oi ON oi.order_item_id = r.order_item_id "
    "JOIN orders o ON o.order_id = oi.order_id JOIN regions g ON g.region_id = o.region_id "
    "WHERE g.name = {region} AND r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01'"
)
ORDERS_SQL = (
    "SELECT COUNT(*) AS order_count FROM orders o JOIN regions g ON g.region_id = o.region_id WHERE g.name = {region}"
)
REGIONS = {"region": {"values": ["North", "South", "East", "West"]}}


def spec(query_id: str, question: str, sql: str = SQL) -> dict[str, Any]:
    return {"id": query_id, "name": query_id.replace("-", " "), "question": question, "sql": sql, "variables": REGIONS}


# Alice's (private) and the curator's (shared) answer different questions, so a job's reuse says whose it used.
ALICES = spec("alice-returns", "How many returns did the {region} region have in Q3?")
CURATED = spec("curated-orders", "How many orders did the {region} region get?", ORDERS_SQL)


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "vqauth" + uuid.uuid4().hex[:10],
        "VERIFIED_QUERIES_SHARED_ROLES": f"Other.Role, {CURATOR_ROLE}",
    }
    proc = DevHostProcess(
        REPO_ROOT, tmp_path_factory.mktemp("vq-auth-host"), extra_args=["--principal-header"], env=env
    )
    proc.start(timeout_s=180)
    yield proc
    proc.stop()


class User:
    """One simulated signed-in user (no function key: with Easy Auth the routes are anonymous)."""

    def __init__(self, host: DevHostProcess, principal: str) -> None:
        self.http = httpx.Client(base_url=host.base_url, headers={"X-Devhost-Principal": principal}, timeout=60)

    def listed(self) -> dict[str, dict[str, Any]]:
        resp = self.http.get("/api/verified-queries", params={"retired": "true"})
        assert resp.status_code == 200, resp.text
        return {q["id"]: q for q in resp.json()["verified_queries"]}

    def reused(self, question: str) -> str | None:
        """The id of the verified query the SQL step of this user's job used (None: it wrote its own SQL)."""
        resp = self.http.post("/api/jobs", json={"question": question})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            view = self.http.get(f"/api/jobs/{job_id}").json()
            if view["status"] in ("completed", "failed", "waiting_for_user"):
                break
            time.sleep(0.2)
        assert view["status"] == "completed", view
        [step] = [s for s in view["steps"] if s["kind"] == "execute_azure_sql"]
        used = (step.get("output") or {}).get("verified_query")
        return used["id"] if used else None


@pytest.fixture(scope="module")
def users(host: DevHostProcess) -> dict[str, User]:
    people = {
        "alice": User(host, "alice"),
        "bob": User(host, "bob"),
        "cora": User(host, f"cora;{CURATOR_ROLE}"),
        # The default curator role's name means nothing here: this deployment names its own.
        "dan": User(host, "dan;VerifiedQueries.Curator"),
        "admin": User(host, "carol;Jobs.Admin"),
    }
    for who, body in (("alice", ALICES), ("cora", CURATED), ("dan", spec("dans-returns", "Dan's {region} returns"))):
        saved = people[who].http.post("/api/verified-queries", json=body)
        assert saved.status_code == 201, saved.text
    return people


def not_found(resp: httpx.Response) -> None:
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["code"] == "VERIFIED_QUERY_NOT_FOUND"


def test_the_owner_is_the_principal_and_a_body_cannot_name_one(users: dict[str, User]) -> None:
    listed = users["alice"].listed()["alice-returns"]
    assert listed["owner"] == {"id": "alice", "name": "alice", "roles": []} and listed["approved_by"] == "alice"
    forged = spec("forged", "Forged {region} returns") | {"owner": {"id": "cora", "roles": [CURATOR_ROLE]}}
    resp = users["bob"].http.post("/api/verified-queries", json=forged)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "INVALID_VERIFIED_QUERY", resp.text
    assert resp.json()["error"]["field"] == "owner"


def test_listing_shows_your_own_the_shared_ones_and_all_to_the_admin(users: dict[str, User]) -> None:
    assert set(users["alice"].listed()) == {"alice-returns", "curated-orders"}
    assert set(users["bob"].listed()) == {"curated-orders"}
    # A role the deployment did not name shares nothing.
    assert set(users["dan"].listed()) == {"dans-returns", "curated-orders"}
    assert {"alice-returns", "curated-orders", "dans-returns"} <= set(users["admin"].listed())
    shown = users["bob"].listed()["curated-orders"]
    assert shown["shared"] is True and shown["editable"] is False


def test_a_job_reuses_only_what_its_owner_may_see(users: dict[str, User]) -> None:
    question = "How many returns did the South region have in Q3?"  # alice's template, another region
    assert users["alice"].reused(question) == "alice-returns"
    assert users["bob"].reused(question) is None  # alice's is private: bob's job writes its own SQL
    assert users["bob"].reused("How many orders did the West region get?") == "curated-orders"


def test_editing_needs_the_owner_or_an_admin(users: dict[str, User]) -> None:
    edited = ALICES | {"name": "alice's returns, edited"}
    not_found(users["bob"].http.put("/api/verified-queries/alice-returns", json=edited))
    refused = users["bob"].http.put("/api/verified-queries/curated-orders", json=CURATED)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "VERIFIED_QUERY_FORBIDDEN", refused.text
    by_admin = users["admin"].http.put("/api/verified-queries/alice-returns", json=edited)
    assert by_admin.status_code == 200, by_admin.text
    # The admin approved the edit; the query stays alice's (and private to her).
    assert by_admin.json()["owner"]["id"] == "alice" and by_admin.json()["approved_by"] == "carol"
    assert "alice-returns" not in users["bob"].listed()


def test_retiring_needs_the_owner_or_an_admin(users: dict[str, User]) -> None:
    not_found(users["bob"].http.delete("/api/verified-queries/dans-returns"))
    refused = users["bob"].http.delete("/api/verified-queries/curated-orders")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "VERIFIED_QUERY_FORBIDDEN"
    assert users["bob"].listed()["curated-orders"]["retired"] is False
    retired = users["dan"].http.delete("/api/verified-queries/dans-returns")
    assert retired.status_code == 200 and retired.json()["retired"] is True


def test_an_unknown_id_and_another_users_id_answer_alike(users: dict[str, User]) -> None:
    for query_id in ("alice-returns", "no-such-query"):
        not_found(users["bob"].http.delete(f"/api/verified-queries/{query_id}"))
        not_found(users["bob"].http.put(f"/api/verified-queries/{query_id}", json=ALICES | {"id": query_id}))


def test_signed_out_callers_are_refused(host: DevHostProcess) -> None:
    resp = httpx.get(f"{host.base_url}/api/verified-queries", timeout=60)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "UNAUTHENTICATED"


# --- the rules themselves, and where a step's owner may come from -------------------------------------------


def _query(owner: QueryOwner | None) -> VerifiedQuery:
    return VerifiedQuery.model_validate(ALICES | {"owner": owner, "approved_at": now(), "catalog_version": "v"})


def test_visibility_follows_the_settings() -> None:
    on = Settings(website_auth_enabled=True, verified_queries_shared_roles=CURATOR_ROLE)
    alice, bob = Reader(id="alice"), Reader(id="bob")
    private, curated = _query(QueryOwner(id="alice")), _query(QueryOwner(id="cora", roles=(CURATOR_ROLE,)))
    assert visible(private, alice, on) and not visible(private, bob, on) and not visible(private, None, on)
    assert visible(curated, bob, on) and visible(curated, None, on) and not may_change(curated, bob, on)
    assert visible(private, Reader(id="x", roles=frozenset({"Jobs.Admin"})), on)
    assert not visible(_query(None), bob, on)  # saved before Easy Auth: admins only
    # Naming no shared role shares nothing; without Easy Auth the key is the only gate.
    assert not visible(curated, bob, Settings(website_auth_enabled=True, verified_queries_shared_roles=""))
    assert visible(private, bob, Settings()) and may_change(private, None, Settings())


def test_a_step_takes_its_owner_from_the_execution_context_never_the_task() -> None:
    from shared.executors.runner import run_executor
    from shared.providers.clients import Clients

    out = run_executor(
        {
            "task_id": "j:s1:1",
            "executor_type": "execute_azure_sql",
            "task": {"question": "How many returns did the South region have in Q3?", "owner": {"id": "alice"}},
        },
        clients=Clients(Settings()),
    )
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT", out
    # The field the orchestrator writes is typed: roles cannot smuggle anything else in.
    context = ExecutionContext.model_validate({"owner": {"id": "alice", "roles": ["r"]}})
    assert context.owner == JobOwnerRef(id="alice", roles=["r"])
