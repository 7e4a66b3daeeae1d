"""CORS and the local port from local.settings.json ``Host``, as Core Tools applies them."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from devhost.functions.http.server import CorsPolicy
from tests.conftest import HostFactory
from tests.devhost.hostproc import APPS_DIR, DEFAULT_KEYS, REPO_ROOT

UI = "http://ui.example:3000"


LOCAL_SETTINGS = """{
  "IsEncrypted": false,
  "Values": {"FUNCTIONS_WORKER_RUNTIME": "python", "CORS_TEST_GREETING": "hi from settings"},
  "Host": {"CORS": "http://ui.example:3000, https://other.example", "CORSCredentials": true}
}"""


def test_cors_from_local_settings(devhost_factory: HostFactory, tmp_path: Path) -> None:
    # local.settings.json is git-ignored (it holds secrets in real apps), so the test writes it into a copy.
    app = tmp_path / "http_cors"
    shutil.copytree(APPS_DIR / "http_cors", app)
    (app / "local.settings.json").write_text(LOCAL_SETTINGS, encoding="utf-8")
    host = devhost_factory(app)
    assert "CORS: http://ui.example:3000, https://other.example (with credentials)" in host.output()
    code = {"code": DEFAULT_KEYS.function}
    simple = host.client.get("/api/greeting", params=code, headers={"Origin": UI})
    assert simple.text == "hi from settings"
    assert simple.headers["access-control-allow-origin"] == UI
    assert simple.headers["access-control-allow-credentials"] == "true"
    preflight = host.client.options(
        "/api/greeting",
        headers={
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-functions-key",
        },
    )
    # preflight needs no key and never reaches the function
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == UI
    assert preflight.headers["access-control-allow-methods"] == "POST"
    assert preflight.headers["access-control-allow-headers"] == "x-functions-key"
    denied = host.client.get("/api/greeting", params=code, headers={"Origin": "http://evil.example"})
    assert denied.status_code == 200
    assert "access-control-allow-origin" not in denied.headers
    no_origin = host.client.get("/api/greeting", params=code)
    assert "access-control-allow-origin" not in no_origin.headers
    unauthorized = host.client.get("/api/greeting", headers={"Origin": UI})
    assert unauthorized.status_code == 401
    assert unauthorized.headers["access-control-allow-origin"] == UI


def test_cors_policy_rules() -> None:
    assert CorsPolicy.parse(None) is None
    assert CorsPolicy.parse(" , ") is None
    star = CorsPolicy.parse("*")
    assert star is not None and star.headers("http://a.example")["Access-Control-Allow-Origin"] == "*"
    star_credentials = CorsPolicy.parse("*", credentials=True)
    assert star_credentials is not None
    assert star_credentials.headers("http://a.example")["Access-Control-Allow-Origin"] == "http://a.example"
    listed = CorsPolicy.parse("HTTP://A.example/")
    assert listed is not None and listed.allowed("http://a.example") and not listed.allowed("http://b.example")


def test_port_defaults_to_local_settings_local_http_port(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    source = APPS_DIR / "http_noprefix"
    (app / "function_app.py").write_text((source / "function_app.py").read_text(encoding="utf-8"), encoding="utf-8")
    (app / "host.json").write_text((source / "host.json").read_text(encoding="utf-8"), encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (app / "local.settings.json").write_text(
        f'{{"Values": {{}}, "Host": {{"LocalHttpPort": {port}}}}}', encoding="utf-8"
    )
    log = (tmp_path / "host.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "devhost", "serve", "--app", str(app), "--no-auth"],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/hello/There", timeout=2).text == "hello There":
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, (tmp_path / "host.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "host.log").read_text()
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert f"Host started on http://127.0.0.1:{port}" in (tmp_path / "host.log").read_text()
