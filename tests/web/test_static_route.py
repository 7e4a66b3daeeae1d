"""The console's static route over plain HTTP: content types, security headers, caching, traversal, 404s."""

from __future__ import annotations

import fnmatch
import http.client
from pathlib import Path

import pytest

from api.ui import CONTENT_SECURITY_POLICY, WEB_ROOT, resolve_asset
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess


def raw_get(host: DevHostProcess, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """GET with the path sent byte for byte (no client-side normalisation of dot segments or escapes)."""
    assert host.port is not None
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=30)
    conn.putrequest("GET", path, skip_accept_encoding=True)
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    conn.endheaders()
    resp = conn.getresponse()
    resp.body = resp.read()  # type: ignore[attr-defined]
    conn.close()
    return resp


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("index.html", "text/html; charset=utf-8"),
        ("app.js", "text/javascript; charset=utf-8"),
        ("app.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ],
)
def test_files_are_served_with_their_content_type(host: DevHostProcess, name: str, content_type: str) -> None:
    resp = raw_get(host, f"/api/ui/{name}")
    assert resp.status == 200
    assert resp.getheader("Content-Type") == content_type
    assert resp.body == (WEB_ROOT / name).read_bytes()  # type: ignore[attr-defined]


def test_index_has_a_strict_csp_and_security_headers(host: DevHostProcess) -> None:
    resp = raw_get(host, "/api/ui/")
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/html; charset=utf-8"
    assert b'<script type="module" src="app.js"></script>' in resp.body  # type: ignore[attr-defined]
    csp = resp.getheader("Content-Security-Policy") or ""
    assert csp == CONTENT_SECURITY_POLICY
    directives = {d.split()[0]: d.split()[1:] for d in csp.split("; ")}
    assert directives["default-src"] == ["'none'"]
    for name in ("script-src", "style-src", "connect-src"):
        assert directives[name] == ["'self'"], name
    # Images also from blob: URLs the page makes itself (a step's PNG artifacts, fetched with the key).
    assert directives["img-src"] == ["'self'", "blob:"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in csp
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    assert resp.getheader("X-Frame-Options") == "DENY"
    assert resp.getheader("Referrer-Policy") == "no-referrer"


def test_the_console_needs_no_key_but_the_api_does(host: DevHostProcess) -> None:
    assert raw_get(host, "/api/ui/app.js").status == 200
    assert raw_get(host, "/api/jobs").status == 401


def test_without_the_trailing_slash_it_redirects(host: DevHostProcess) -> None:
    resp = raw_get(host, "/api/ui")
    assert resp.status == 308 and resp.getheader("Location") == "ui/"
    assert host.client.get("/api/ui", follow_redirects=True).url.path == "/api/ui/"


def test_revalidation_with_the_etag_answers_304(host: DevHostProcess) -> None:
    first = raw_get(host, "/api/ui/app.js")
    etag = first.getheader("ETag")
    assert etag and first.getheader("Cache-Control") == "no-cache"
    again = raw_get(host, "/api/ui/app.js", {"If-None-Match": etag})
    assert again.status == 304 and again.body == b""  # type: ignore[attr-defined]
    assert again.getheader("ETag") == etag
    changed = raw_get(host, "/api/ui/app.js", {"If-None-Match": '"something-else"'})
    assert changed.status == 200


@pytest.mark.parametrize(
    "path",
    [
        "/api/ui/nope.js",
        "/api/ui/index.htm",
        "/api/ui/sub/",
        "/api/ui/app.js/",
        "/api/ui/.gitignore",
        "/api/ui/README.md",
    ],
)
def test_unknown_files_are_404(host: DevHostProcess, path: str) -> None:
    resp = raw_get(host, path)
    assert resp.status == 404
    assert resp.getheader("Content-Security-Policy") == CONTENT_SECURITY_POLICY


# host.json and function_app.py sit one level above web/: each of these would reach them if a
# traversal got through.
TRAVERSALS = [
    "/api/ui/../host.json",
    "/api/ui/..%2fhost.json",
    "/api/ui/..%2Fhost.json",
    "/api/ui/..%2f..%2fapi%2fui.py",
    "/api/ui/%2e%2e/host.json",
    "/api/ui/%2e%2e%2fhost.json",
    "/api/ui/.%2e/host.json",
    "/api/ui/%252e%252e%252fhost.json",
    "/api/ui/..%5chost.json",
    "/api/ui/..\\host.json",
    "/api/ui/./../host.json",
    "/api/ui//etc/passwd",
    "/api/ui/%2fetc%2fpasswd",
    "/api/ui/app.js%00.html",
    "/api/ui/..;/host.json",
    "/api/ui/%c0%ae%c0%ae/host.json",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_traversal_attempts_are_404(host: DevHostProcess, path: str) -> None:
    resp = raw_get(host, path)
    assert resp.status in (400, 404), (path, resp.status)
    body = resp.body  # type: ignore[attr-defined]
    assert b"extensionBundle" not in body and b"root:" not in body and b"def register" not in body


@pytest.mark.parametrize(
    "path",
    ["../host.json", "..", ".", "a/../index.html", "./index.html", "/etc/passwd", "..\\x.js", "%2e%2e/x.js", "a//b.js"],
)
def test_resolve_asset_refuses_traversal_shapes(path: str) -> None:
    assert resolve_asset(path) is None


def test_resolve_asset_refuses_symlinks_leaving_the_root(tmp_path: Path) -> None:
    root = tmp_path / "web"
    root.mkdir()
    (root / "ok.js").write_text("ok")
    secret = tmp_path / "secret.js"
    secret.write_text("secret")
    (root / "leak.js").symlink_to(secret)
    assert resolve_asset("ok.js", root) == (root / "ok.js").resolve()
    assert resolve_asset("leak.js", root) is None
    assert resolve_asset("", root) is None  # no index.html in this root


def test_web_is_deployed() -> None:
    """.funcignore must not exclude the console's files from the deployment package."""
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".funcignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for file in ("web/index.html", "web/app.js", "web/app.css", "api/ui.py"):
        prefixes = ["/".join(file.split("/")[: i + 1]) for i in range(file.count("/") + 1)]
        for pattern in patterns:
            bare = pattern.rstrip("/")
            hits = [p for p in prefixes if fnmatch.fnmatch(p, bare) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], bare)]
            assert not hits, f".funcignore pattern {pattern!r} excludes {file}"
