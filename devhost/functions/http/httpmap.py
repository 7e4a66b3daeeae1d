"""Mapping between the wire (Starlette) and ``azure.functions`` HTTP objects.

Mirrors what the Functions host + Python worker do: the request URL is absolute (the durable client
rewrites management URLs to its origin), query values are one string per key (repeats joined with
commas, as the host's ``StringValues.ToString()`` does), headers are case-insensitive; a returned
``HttpResponse`` keeps status/headers/body and gets ``content-type`` from mimetype/charset when it has
none, a ``str`` becomes a 200 ``text/plain`` response.
"""

from __future__ import annotations

from typing import Any

import azure.functions as func
from starlette.requests import Request
from starlette.responses import Response


class UnsupportedReturn(TypeError):
    """The HTTP function returned something the host cannot turn into a response."""


def absolute_url(request: Request) -> str:
    """The absolute URL the caller used (scheme, Host header, raw path and query)."""
    scheme = request.url.scheme
    host = request.headers.get("host")
    if not host:
        server = request.scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    raw_path = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else request.url.path
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{scheme}://{host}{path}" + (f"?{query}" if query else "")


def origin_of(request: Request) -> str:
    """``scheme://host[:port]`` of the request, as the caller addressed the host."""
    scheme = request.url.scheme
    host = request.headers.get("host")
    if not host:
        server = request.scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


def query_dict(request: Request) -> dict[str, str]:
    """Query parameters, one value per key; repeated keys are joined with ',' like the host does."""
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


def header_dict(request: Request) -> dict[str, str]:
    """Request headers; repeated headers are joined with ', '."""
    out: dict[str, str] = {}
    for key, value in request.headers.items():
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def to_func_request(
    request: Request, body: bytes, route_params: dict[str, str], *, headers: dict[str, str] | None = None
) -> func.HttpRequest:
    """Build the ``azure.functions.HttpRequest`` the worker would hand to the function.

    ``headers`` replaces the request's own (the simulated Easy Auth rewrites the principal headers).
    """
    return func.HttpRequest(
        method=request.method.upper(),
        url=absolute_url(request),
        headers=header_dict(request) if headers is None else headers,
        params=query_dict(request),
        route_params=route_params,
        body=body,
    )


def from_func_result(result: Any) -> Response:
    """Turn a function's return value into a Starlette response (HttpResponseConverter.encode semantics)."""
    if isinstance(result, str):
        return Response(
            result.encode("utf-8"),
            status_code=200,
            media_type=None,
            headers={"content-type": "text/plain; charset=utf-8"},
        )
    if result is None:
        # The worker sends no $return; the host then answers an empty 204.
        return Response(b"", status_code=204)
    if isinstance(result, func.HttpResponse):
        raw: list[tuple[bytes, bytes]] = []
        has_ct = False
        # Headers.items() yields repeated headers (e.g. several Set-Cookie) one by one.
        for name, value in result.headers.items():
            if name.lower() in ("content-length", "transfer-encoding"):
                continue
            has_ct = has_ct or name.lower() == "content-type"
            raw.append((name.lower().encode("latin-1"), str(value).encode("latin-1")))
        if not has_ct:
            mimetype = result.mimetype or "text/plain"
            ct = f"{mimetype}; charset={result.charset}" if mimetype.startswith("text/") else mimetype
            raw.append((b"content-type", ct.encode("latin-1")))
        response = Response(result.get_body() or b"", status_code=int(result.status_code))
        keep = [(k, v) for k, v in response.raw_headers if k == b"content-length"]
        response.raw_headers = keep + raw
        return response
    raise UnsupportedReturn(
        f"an HTTP function must return azure.functions.HttpResponse or str, got {type(result).__name__}"
    )
