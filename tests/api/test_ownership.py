"""Jobs belong to the person who started them (issue 8 §4): the Easy Auth parser, then every endpoint over HTTP.

The HTTP tests run the app on devhost with ``--principal-header``: each request names its user in
``X-Devhost-Principal`` and devhost sets the ``X-MS-CLIENT-PRINCIPAL*`` headers as App Service does.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.auth import Caller, Principal, PrincipalError, caller_of, parse_principal
from api.errors import ApiError
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

SQL_Q = "Which region had the most returns in Q3?"
ADMIN = "carol;Jobs.Admin"


def b64(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.b64encode(raw).decode()


AAD = {
    "auth_typ": "aad",
    "name_typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
    "role_typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    "claims": [
        {"typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress", "val": "alice@contoso.com"},
        {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": "oid-alice"},
        {"typ": "roles", "val": "Jobs.Admin"},
    ],
}

# ----- the pure parser ---------------------------------------------------------------------------


def test_parses_an_entra_principal() -> None:
    p = parse_principal({"X-MS-CLIENT-PRINCIPAL-ID": "oid-alice", "X-MS-CLIENT-PRINCIPAL": b64(AAD)})
    assert p == Principal(id="oid-alice", name="alice@contoso.com", idp="aad", roles=frozenset({"Jobs.Admin"}))


def test_the_id_may_come_from_the_object_id_claim() -> None:
    assert parse_principal({"x-ms-client-principal": b64(AAD)}).id == "oid-alice"


def test_the_id_header_alone_is_enough() -> None:
    p = parse_principal({"x-ms-client-principal-id": "u1", "x-ms-client-principal-name": "Uma"})
    assert (p.id, p.name, p.roles) == ("u1", "Uma", frozenset())


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ms-client-principal-id": "   "},
        {"x-ms-client-principal": "!!!not base64!!!"},
        {"x-ms-client-principal": "YQ"},  # unpadded base64 of "a": decodes, not JSON
        {"x-ms-client-principal": b64(b"\xff\xfe")},
        {"x-ms-client-principal": b64(b"not json")},
        {"x-ms-client-principal": b64([1, 2])},
        {"x-ms-client-principal": b64({"claims": "nope"})},
        {"x-ms-client-principal": b64({"claims": [{"typ": 1}]})},
        {"x-ms-client-principal": b64(b"[" * 100_000)},
        {"x-ms-client-principal": b64({"auth_typ": "aad", "claims": []})},  # valid, but no id anywhere
        {"x-ms-client-principal-id": "mallory", "x-ms-client-principal": b64(AAD)},  # id and oid disagree
        {"x-ms-client-principal-id": "x" * 201},
        {"x-ms-client-principal-id": "u1", "x-ms-client-principal": "A" * 40_000},
    ],
)
def test_malformed_or_missing_principals_are_rejected(headers: dict[str, str]) -> None:
    with pytest.raises(PrincipalError):
        parse_principal(headers)


def test_a_bad_principal_is_a_401_with_a_stable_code() -> None:
    with pytest.raises(ApiError) as err:
        caller_of({"x-ms-client-principal": "%%%"}, easy_auth=True, admin_role="Jobs.Admin")
    assert (err.value.status, err.value.code) == (401, "UNAUTHENTICATED")


def test_without_easy_auth_the_headers_are_not_trusted() -> None:
    spoofed = {"x-ms-client-principal-id": "oid-alice", "x-ms-client-principal": b64(AAD)}
    caller = caller_of(spoofed, easy_auth=False, admin_role="Jobs.Admin")
    assert caller == Caller() and caller.principal is None
    assert caller.sees({"owner": {"id": "someone-else"}})


def test_admin_role_comes_from_the_setting() -> None:
    headers = {"x-ms-client-principal": b64(AAD)}
    assert caller_of(headers, easy_auth=True, admin_role="Jobs.Admin").admin
    assert not caller_of(headers, easy_auth=True, admin_role="Other.Role").admin


def test_who_sees_what() -> None:
    alice = Caller(principal=Principal(id="a", name="a"))
    admin = Caller(principal=Principal(id="c", name="c"), admin=True)
    assert alice.sees({"owner": {"id": "a", "name": "a"}})
    assert not alice.sees({"owner": {"id": "b"}})
    assert not alice.sees({"request": {}})  # no owner: admins only
    assert not alice.sees("garbage")
    assert admin.sees({"owner": {"id": "b"}}) and admin.sees({"request": {}})


# ----- every endpoint over HTTP on devhost --------------------------------------------------------


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("ownership-host")
    proc = DevHostProcess(REPO_ROOT, data, extra_args=["--principal-header"])
    proc.start()
    yield proc
    proc.stop()


class User:
    """Calls the job API as one simulated user (no function key: with Easy Auth the platform signs in)."""

    def __init__(self, host: DevHostProcess, spec: str | None) -> None:
        headers = {"X-Devhost-Principal": spec} if spec else {}
        self.http = httpx.Client(base_url=host.base_url, headers=headers, timeout=60)

    def submit(self, **body: Any) -> httpx.Response:
        return self.http.post("/api/jobs", json={"question": SQL_Q, **body})

    def view(self, job_id: str) -> httpx.Response:
        return self.http.get(f"/api/jobs/{job_id}")

    def listed(self) -> set[str]:
        resp = self.http.get("/api/jobs", params={"limit": 100})
        assert resp.status_code == 200, resp.text
        return {j["id"] for j in resp.json()["jobs"]}

    def answer(self, job_id: str, answer: Any) -> httpx.Response:
        view = self.http.get(f"/api/jobs/{job_id}")
        waiting = view.json().get("waiting") if view.status_code == 200 else None
        # The owner names the question shown; others cannot see it, so they send none (and get 404 first).
        extra = {"question_id": waiting["question_id"]} if waiting else {}
        return self.http.post(f"/api/jobs/{job_id}/feedback", json={"answer": answer, **extra})

    def cancel(self, job_id: str) -> httpx.Response:
        return self.http.post(f"/api/jobs/{job_id}/cancel")

    def waiting(self, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.view(job_id).json()
            if view.get("status") == "waiting_for_user":
                return view
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} never waited for the user: {view}")


@pytest.fixture(scope="module")
def users(host: DevHostProcess) -> dict[str, User]:
    return {
        "alice": User(host, "alice"),
        "bob": User(host, "bob"),
        "admin": User(host, ADMIN),
        "nobody": User(host, None),
    }


@pytest.fixture(scope="module")
def jobs(users: dict[str, User]) -> dict[str, str]:
    """One job per user, each waiting for its owner's SQL approval."""
    out = {}
    for name in ("alice", "bob"):
        resp = users[name].submit(approval={"sql": "always"})
        assert resp.status_code == 202, resp.text
        out[name] = resp.json()["id"]
    for name, job_id in out.items():
        users[name].waiting(job_id)
    return out


def not_found(resp: httpx.Response, job_id: str) -> None:
    assert resp.status_code == 404, resp.text
    assert resp.json() == {"error": {"code": "JOB_NOT_FOUND", "message": f"no job with id {job_id!r}"}}


@pytest.mark.parametrize(("me", "other"), [("alice", "bob"), ("bob", "alice")])
def test_the_owner_sees_their_job_and_nobody_else_does(
    users: dict[str, User], jobs: dict[str, str], me: str, other: str
) -> None:
    mine, theirs = jobs[me], jobs[other]
    assert users[me].view(mine).status_code == 200
    not_found(users[me].view(theirs), theirs)
    # Indistinguishable from an id that never existed.
    not_found(users[me].view("0" * 32), "0" * 32)
    listed = users[me].listed()
    assert mine in listed and theirs not in listed


@pytest.mark.parametrize(("me", "other"), [("alice", "bob"), ("bob", "alice")])
def test_nobody_answers_or_cancels_another_users_job(
    users: dict[str, User], jobs: dict[str, str], me: str, other: str
) -> None:
    theirs = jobs[other]
    not_found(users[me].answer(theirs, "reject"), theirs)
    not_found(users[me].cancel(theirs), theirs)
    # The job is untouched: still waiting for its owner.
    assert users[other].view(theirs).json()["status"] == "waiting_for_user"


def test_the_admin_role_sees_every_job(users: dict[str, User], jobs: dict[str, str]) -> None:
    assert set(jobs.values()) <= users["admin"].listed()
    listed = users["admin"].http.get("/api/jobs", params={"limit": 100}).json()["jobs"]
    assert {j["id"]: j["owner"] for j in listed if j["id"] in jobs.values()} == {v: k for k, v in jobs.items()}
    for job_id in jobs.values():
        assert users["admin"].view(job_id).status_code == 200
    assert jobs["alice"] not in users["bob"].listed()


def test_a_request_without_a_principal_is_401(users: dict[str, User], jobs: dict[str, str]) -> None:
    nobody = users["nobody"]
    job_id = jobs["alice"]
    for resp in (
        nobody.submit(),
        nobody.http.get("/api/jobs"),
        nobody.view(job_id),
        nobody.answer(job_id, "approve"),
        nobody.cancel(job_id),
    ):
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["code"] == "UNAUTHENTICATED"


def test_client_sent_principal_headers_are_not_believed(users: dict[str, User], jobs: dict[str, str]) -> None:
    spoof = {"X-MS-CLIENT-PRINCIPAL-ID": "alice", "X-MS-CLIENT-PRINCIPAL": b64({"claims": []})}
    assert users["nobody"].http.get(f"/api/jobs/{jobs['alice']}", headers=spoof).status_code == 401
    not_found(users["bob"].http.get(f"/api/jobs/{jobs['alice']}", headers=spoof), jobs["alice"])


def test_the_owner_answers_and_cancels(users: dict[str, User], jobs: dict[str, str]) -> None:
    alice, bob = users["alice"], users["bob"]
    assert alice.answer(jobs["alice"], "reject").status_code == 202
    resp = bob.cancel(jobs["bob"])
    assert resp.status_code == 202, resp.text


def test_the_admin_may_cancel_any_job(users: dict[str, User]) -> None:
    resp = users["alice"].submit(approval={"sql": "always"})
    job_id = resp.json()["id"]
    users["alice"].waiting(job_id)
    not_found(users["bob"].cancel(job_id), job_id)
    assert users["admin"].cancel(job_id).status_code == 202


def test_the_body_cannot_choose_the_owner(users: dict[str, User]) -> None:
    resp = users["bob"].submit(owner={"id": "alice"})
    assert resp.status_code == 400


# ----- without Easy Auth: the function key is the only gate ---------------------------------------


@pytest.fixture(scope="module")
def key_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("ownership-key-host"))
    proc.start()
    yield proc
    proc.stop()


def test_without_easy_auth_every_key_holder_sees_every_job(key_host: DevHostProcess) -> None:
    assert key_host.keys is not None
    key = {"x-functions-key": key_host.keys.function}
    # Principal headers sent by clients mean nothing without Easy Auth in front: they are not trusted.
    as_alice = {**key, "X-MS-CLIENT-PRINCIPAL-ID": "alice"}
    as_bob = {**key, "X-MS-CLIENT-PRINCIPAL-ID": "bob", "X-MS-CLIENT-PRINCIPAL": "not even base64"}
    http = key_host.client
    resp = http.post("/api/jobs", json={"question": SQL_Q, "approval": {"sql": "always"}}, headers=as_alice)
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    assert http.get(f"/api/jobs/{job_id}", headers=as_bob).status_code == 200
    listed = {j["id"] for j in http.get("/api/jobs", headers=as_bob).json()["jobs"]}
    assert job_id in listed
    assert http.post(f"/api/jobs/{job_id}/cancel", headers=as_bob).status_code == 202
    # And without the key nothing is reachable (the host answers 401 before the app runs).
    assert http.get("/api/jobs").status_code == 401


def test_costs_are_owner_scoped_as_the_job_list(users: dict[str, User], jobs: dict[str, str]) -> None:
    def groups(user: User) -> dict[str, dict[str, Any]]:
        resp = user.http.get("/api/costs", params={"group_by": "user"})
        assert resp.status_code == 200, resp.text
        return {g["key"]: g for g in resp.json()["groups"]}

    alice = groups(users["alice"])
    # The same jobs as the owner-scoped list (every job of this host is from the last 7 days).
    assert set(alice) == {"alice"} and alice["alice"]["jobs"] == len(users["alice"].listed()) >= 1
    assert set(groups(users["bob"])) == {"bob"}
    seen = groups(users["admin"])
    assert {"alice", "bob"} <= set(seen)
    assert users["nobody"].http.get("/api/costs").status_code == 401
