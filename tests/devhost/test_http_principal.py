"""Simulated Easy Auth on real devhost processes: ``--principal`` and ``--principal-header`` on a generic app."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess

# Any app, not the product: the simulation is generic. It echoes what the platform would hand it.
APP = textwrap.dedent(
    """
    import json
    import os

    import azure.functions as func

    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)


    @app.route(route="whoami", methods=["GET", "POST"])
    def whoami(req: func.HttpRequest) -> func.HttpResponse:
        headers = {k.lower(): v for k, v in req.headers.items()}
        body = {"env": os.environ.get("WEBSITE_AUTH_ENABLED"), "headers": headers}
        return func.HttpResponse(json.dumps(body), mimetype="application/json")
    """
)
SPOOF = {
    "X-MS-CLIENT-PRINCIPAL-ID": "mallory",
    "X-MS-CLIENT-PRINCIPAL-NAME": "mallory",
    "X-MS-CLIENT-PRINCIPAL": base64.b64encode(b'{"claims": [{"typ": "roles", "val": "Jobs.Admin"}]}').decode(),
}


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("principal-app")
    (root / "function_app.py").write_text(APP, encoding="utf-8")
    (root / "host.json").write_text('{"version": "2.0"}', encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def fixed(devhost_factory: HostFactory, app_dir: Path) -> DevHostProcess:
    return devhost_factory(app_dir, extra_args=["--principal", "alice;Jobs.Admin,reader"])


@pytest.fixture(scope="module")
def per_request(devhost_factory: HostFactory, app_dir: Path) -> DevHostProcess:
    return devhost_factory(app_dir, extra_args=["--principal-header"])


@pytest.fixture(scope="module")
def plain(devhost_factory: HostFactory, app_dir: Path) -> DevHostProcess:
    return devhost_factory(app_dir, no_auth=True)


def whoami(host: DevHostProcess, headers: dict[str, str] | None = None) -> dict:
    key = {"x-functions-key": host.keys.function} if host.keys else {}
    resp = host.client.get("/api/whoami", headers={**key, **(headers or {})})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def principal_of(seen: dict) -> dict:
    return dict(json.loads(base64.b64decode(seen["headers"]["x-ms-client-principal"])))


def test_fixed_principal_is_injected_with_the_platform_shape(fixed: DevHostProcess) -> None:
    seen = whoami(fixed)
    assert seen["env"] == "True"
    assert seen["headers"]["x-ms-client-principal-id"] == "alice"
    assert seen["headers"]["x-ms-client-principal-name"] == "alice"
    principal = principal_of(seen)
    assert principal["auth_typ"] == "aad" and principal["role_typ"] == "roles"
    roles = {c["val"] for c in principal["claims"] if c["typ"] == principal["role_typ"]}
    assert roles == {"Jobs.Admin", "reader"}


def test_client_sent_principal_headers_are_stripped_like_the_platform(fixed: DevHostProcess) -> None:
    seen = whoami(fixed, SPOOF)
    assert seen["headers"]["x-ms-client-principal-id"] == "alice"
    assert principal_of(seen)["claims"][0] == {"typ": "name", "val": "alice"}


def test_the_dev_header_is_ignored_unless_the_flag_is_given(fixed: DevHostProcess) -> None:
    seen = whoami(fixed, {"X-Devhost-Principal": "bob"})
    assert seen["headers"]["x-ms-client-principal-id"] == "alice"
    assert "x-devhost-principal" not in seen["headers"]


def test_the_banner_says_it_is_not_a_security_boundary(fixed: DevHostProcess) -> None:
    assert "Easy Auth SIMULATED (not a security boundary)" in fixed.output()


def test_auth_me_reports_the_simulated_user(fixed: DevHostProcess) -> None:
    resp = fixed.client.get("/.auth/me")
    assert resp.status_code == 200
    [me] = resp.json()
    assert me["user_id"] == "alice" and me["provider_name"] == "aad"


def test_login_redirects_back_to_a_local_path_only(fixed: DevHostProcess) -> None:
    back = fixed.client.get("/.auth/login/aad", params={"post_login_redirect_uri": "/api/ui/"})
    assert back.status_code == 302 and back.headers["location"] == "/api/ui/"
    away = fixed.client.get("/.auth/login/aad", params={"post_login_redirect_uri": "https://evil.example/"})
    assert away.status_code == 302 and away.headers["location"] == "/"


def test_per_request_header_picks_the_user(per_request: DevHostProcess) -> None:
    seen = whoami(per_request, {"X-Devhost-Principal": "bob;Jobs.Admin", **SPOOF})
    assert seen["env"] == "True"
    assert seen["headers"]["x-ms-client-principal-id"] == "bob"
    assert {c["val"] for c in principal_of(seen)["claims"]} == {"bob", "Jobs.Admin"}
    assert "x-devhost-principal" not in seen["headers"]


def test_without_the_header_the_request_is_signed_out(per_request: DevHostProcess) -> None:
    seen = whoami(per_request, SPOOF)
    assert not any(name.startswith("x-ms-client-principal") for name in seen["headers"])
    assert per_request.client.get("/.auth/me").status_code == 401


def test_a_malformed_dev_header_is_a_400(per_request: DevHostProcess) -> None:
    key = {"x-functions-key": per_request.keys.function} if per_request.keys else {}
    resp = per_request.client.get("/api/whoami", headers={**key, "X-Devhost-Principal": ";admin"})
    assert resp.status_code == 400


def test_the_function_key_is_still_enforced(per_request: DevHostProcess) -> None:
    resp = per_request.client.get("/api/whoami", headers={"X-Devhost-Principal": "bob"})
    assert resp.status_code == 401


def test_without_the_simulation_nothing_is_touched(plain: DevHostProcess) -> None:
    seen = whoami(plain, SPOOF)
    assert seen["env"] is None
    assert seen["headers"]["x-ms-client-principal-id"] == "mallory"
    assert plain.client.get("/.auth/me").status_code == 404


def test_a_bad_principal_option_is_a_usage_error(tmp_path: Path, app_dir: Path) -> None:
    host = DevHostProcess(app_dir, tmp_path / "data", extra_args=["--principal", ";role"])
    code, output = host.run_to_exit()
    assert code == 2 and "--principal" in output
