"""The web console: serves the static files of ``web/`` at ``/api/ui/`` (anonymous; the API itself needs a key).

Only regular files under ``web/`` with a known extension are served. A path is refused (404) before it
touches the file system when it holds anything a traversal needs (``..``, ``.`` or empty segments,
backslashes, percent escapes that survived decoding, NUL), and the resolved file must still lie inside
``web/`` (symlinks included). Every answer carries a strict Content-Security-Policy (same origin only);
files are revalidated with an ETag on each load, so a deployment is picked up at once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
INDEX = "index.html"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".txt": "text/plain; charset=utf-8",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
    "manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# Revalidate every time (cheap 304s): a new deployment is never hidden behind a stale app.js.
CACHE_CONTROL = "no-cache"
_FORBIDDEN_CHARS = ("\\", "\x00", "%", ":")
# No console file has a longer path; longer ones are refused before the file system sees them (ENAMETOOLONG).
MAX_PATH_CHARS = 256


def resolve_asset(path: str, root: Path = WEB_ROOT) -> Path | None:
    """The file under ``root`` that ``path`` names, or None when it is not a servable file."""
    if path in ("", "/"):
        path = INDEX
    if len(path) > MAX_PATH_CHARS or any(ch in path for ch in _FORBIDDEN_CHARS) or path.startswith("/"):
        return None
    segments = path.split("/")
    if any(seg in ("", ".", "..") or seg.startswith(".") for seg in segments):
        return None
    if Path(segments[-1]).suffix.lower() not in CONTENT_TYPES:
        return None
    try:
        base = root.resolve()
        candidate = base.joinpath(*segments).resolve()
        if not candidate.is_relative_to(base) or not candidate.is_file():
            return None
    except (OSError, ValueError):  # a name the file system refuses is simply not a console file
        return None
    return candidate


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**SECURITY_HEADERS, **(extra or {})}


def not_found() -> func.HttpResponse:
    """404 with the security headers and nothing about the file system."""
    return func.HttpResponse(
        "not found",
        status_code=404,
        headers=_headers({"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}),
    )


def etag_of(body: bytes) -> str:
    """A strong ETag from the content."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def serve(req: func.HttpRequest, root: Path = WEB_ROOT) -> func.HttpResponse:
    """Answer one request for a console file."""
    path = req.route_params.get("path") or ""
    slash = urlsplit(req.url).path.endswith("/")
    if path and slash:
        return not_found()  # a file is never a folder; hosts may drop the slash from the route value
    if not path and not slash:
        # The page loads app.js and app.css relative to itself, so it must live at ".../ui/".
        return func.HttpResponse(status_code=308, headers=_headers({"Location": "ui/", "Cache-Control": "no-store"}))
    asset = resolve_asset(path, root)
    if asset is None:
        return not_found()
    try:
        body = asset.read_bytes()
    except OSError:  # removed or unreadable since it was resolved
        return not_found()
    etag = etag_of(body)
    headers = _headers({"ETag": etag, "Cache-Control": CACHE_CONTROL})
    if _matches(req.headers.get("if-none-match"), etag):
        return func.HttpResponse(status_code=304, headers=headers)
    headers["Content-Type"] = CONTENT_TYPES[asset.suffix.lower()]
    return func.HttpResponse(body, status_code=200, headers=headers)


def register(bp: df.Blueprint) -> None:
    """Register the console route on the blueprint."""

    @bp.route(route="ui/{*path}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def web_console(req: func.HttpRequest) -> func.HttpResponse:
        """GET /api/ui/{path}: the web console's static files."""
        return serve(req)
