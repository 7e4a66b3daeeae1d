"""Auth levels and host keys on real devhost processes (app: tests/apps/http_basic)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DEFAULT_KEYS, DevHostProcess

K = DEFAULT_KEYS


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("http_basic")


@pytest.mark.parametrize(
    ("path", "params", "headers", "status"),
    [
        ("/api/health", {}, {}, 200),
        ("/api/auth/function", {}, {}, 401),
        ("/api/auth/function", {"code": "wrong-key"}, {}, 401),
        ("/api/auth/function", {"code": K.function}, {}, 200),
        ("/api/auth/function", {}, {"x-functions-key": K.function}, 200),
        ("/api/auth/function", {}, {"X-Functions-Key": K.master}, 200),
        ("/api/auth/function", {"code": K.master}, {}, 200),
        ("/api/auth/function", {"code": K.system}, {}, 401),
        ("/api/auth/admin", {}, {}, 401),
        ("/api/auth/admin", {"code": K.function}, {}, 401),
        ("/api/auth/admin", {"code": K.system}, {}, 401),
        ("/api/auth/admin", {"code": K.master}, {}, 200),
        ("/api/auth/admin", {}, {"x-functions-key": K.master}, 200),
        # An admin API on the Functions host: the master key only.
        ("/admin/host/status", {}, {}, 401),
        ("/admin/host/status", {"code": K.function}, {}, 401),
        ("/admin/host/status", {"code": K.system}, {}, 401),
        ("/admin/host/status", {"code": K.master}, {}, 200),
        ("/admin/host/status", {}, {"x-functions-key": K.master}, 200),
        ("/admin/host/ping", {}, {}, 200),
        ("/runtime/webhooks/durabletask/instances/", {}, {}, 401),
        ("/runtime/webhooks/durabletask/instances/", {"code": K.function}, {}, 401),
        ("/runtime/webhooks/durabletask/instances/", {"code": K.system}, {}, 200),
        ("/runtime/webhooks/durabletask/instances/", {}, {"x-functions-key": K.system}, 200),
        ("/runtime/webhooks/durabletask/instances/", {"code": K.master}, {}, 200),
    ],
)
def test_auth_levels(
    host: DevHostProcess, path: str, params: dict[str, str], headers: dict[str, str], status: int
) -> None:
    resp = host.client.get(path, params=params, headers=headers)
    assert resp.status_code == status, resp.text
    if status == 401:
        assert resp.content == b""


def test_unauthorized_request_does_not_run_the_function(host: DevHostProcess) -> None:
    before = host.output().count("Executing 'Functions.auth_admin'")
    assert host.client.get("/api/auth/admin", params={"code": K.function}).status_code == 401
    assert host.output().count("Executing 'Functions.auth_admin'") == before


def test_rpc_listener_needs_no_key_but_only_serves_the_durable_api(host: DevHostProcess) -> None:
    rpc = host.rpc_base_url()
    assert rpc.startswith("http://127.0.0.1:")
    assert httpx.get(rpc + "instances/").status_code == 200
    # function routes and admin endpoints are not reachable through the RPC port
    origin = rpc.removesuffix("/durabletask/")
    assert httpx.get(origin + "/api/health").status_code == 404
    assert httpx.get(origin + "/admin/host/status").status_code == 404


def test_generated_keys_are_persisted_printed_and_stable_across_restarts(
    devhost_factory: HostFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path_factory.mktemp("generated-keys")
    host = devhost_factory("http_basic", data_dir=data, keys=None)
    stored = json.loads((data / "keys.json").read_text(encoding="utf-8"))
    assert (data / "keys.json").stat().st_mode & 0o777 == 0o600
    master = stored["masterKey"]
    function = stored["functionKeys"]["default"]
    system = stored["systemKeys"]["durabletask_extension"]
    assert len({master, function, system}) == 3
    out = host.output()
    assert f"master: {master}" in out and f"function (default): {function}" in out
    assert f"system (durabletask_extension): {system}" in out
    assert host.client.get("/api/auth/function", params={"code": function}).status_code == 200
    assert host.client.get("/api/auth/admin", params={"code": master}).status_code == 200
    assert host.client.get("/api/auth/admin", params={"code": function}).status_code == 401
    host.restart()
    assert json.loads((data / "keys.json").read_text(encoding="utf-8")) == stored
    assert host.client.get("/api/auth/function", params={"code": function}).status_code == 200


def test_no_auth_flag_disables_key_checks(devhost_factory: HostFactory) -> None:
    host = devhost_factory("http_basic", keys=None, no_auth=True)
    assert "Auth: DISABLED" in host.output()
    assert host.client.get("/api/auth/admin").status_code == 200
    assert host.client.get("/api/auth/function").status_code == 200
    assert host.client.get("/runtime/webhooks/durabletask/instances/").status_code == 200
    assert host.client.get("/admin/host/status").status_code == 200


def test_corrupt_keys_file_is_a_clear_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.devhost.hostproc import APPS_DIR

    data = tmp_path_factory.mktemp("bad-keys")
    (data / "keys.json").write_text("{not json", encoding="utf-8")
    proc = DevHostProcess(APPS_DIR / "http_basic", data, keys=None)
    code, out = proc.run_to_exit()
    assert code != 0
    assert "keys.json is not a valid keys file" in out
    assert "delete it to generate new keys" in out
