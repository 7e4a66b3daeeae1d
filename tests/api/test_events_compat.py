"""api/streams_compat.py: the app's azure.functions routes, served the way the worker serves them once the
HTTP streams extension is imported (a Starlette request in, a Starlette response out), and unchanged otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import azure.functions as func
import pytest
from starlette.requests import Request
from starlette.responses import Response

from api import blueprint
from api.streams_compat import adapt, takes_streams_request


def _request(body: bytes, path: str = "/api/jobs/j1/feedback", query: bytes = b"a=1&a=2&b=x") -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "scheme": "https",
        "server": ("app.example", 443),
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": [(b"host", b"app.example"), (b"x-ms-client-principal-name", b"ada"), (b"content-type", b"a/b")],
        "path_params": {"job_id": "j1"},
    }
    return Request(scope, receive)


def _echo(req: func.HttpRequest, client: str) -> func.HttpResponse:
    body = {
        "method": req.method,
        "url": req.url,
        "params": dict(req.params),
        "route": dict(req.route_params),
        "principal": req.headers.get("X-MS-CLIENT-PRINCIPAL-NAME"),
        "body": req.get_body().decode(),
        "client": client,
    }
    return func.HttpResponse(json.dumps(body), status_code=202, mimetype="application/json", headers={"X-A": "1"})


def test_a_starlette_request_reaches_an_azure_functions_handler_and_its_response_goes_back() -> None:
    async def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        return _echo(req, client)

    wrapped = adapt(handler, "req")
    response = asyncio.run(wrapped(req=_request(b'{"answer": "approve"}'), client="durable-json"))
    assert isinstance(response, Response) and response.status_code == 202
    assert response.headers["x-a"] == "1" and response.headers["content-type"].startswith("application/json")
    assert json.loads(bytes(response.body)) == {
        "method": "POST",
        "url": "https://app.example/api/jobs/j1/feedback?a=1&a=2&b=x",
        "params": {"a": "1,2", "b": "x"},
        "route": {"job_id": "j1"},
        "principal": "ada",
        "body": '{"answer": "approve"}',
        "client": "durable-json",
    }


def test_an_http_request_passes_through_unchanged_and_sync_handlers_still_run() -> None:
    wrapped = adapt(_echo, "req")
    given = func.HttpRequest(method="GET", url="http://h/api/x", body=b"", params={}, route_params={})
    result = asyncio.run(wrapped(req=given, client="c"))
    assert isinstance(result, func.HttpResponse) and result.status_code == 202


def test_every_route_of_the_app_but_the_event_stream_is_wrapped() -> None:
    http = [b._function for b in blueprint._function_builders if b._function.get_trigger().type == "httpTrigger"]
    names = {f.get_function_name(): f for f in http}
    assert "job_events" in names and "get_job" in names
    for name, function in names.items():
        user = function.get_user_function()
        streams = takes_streams_request(user, function.get_trigger().name)
        assert streams == (name == "job_events"), name
        assert getattr(user, "streams_compat", False) != streams, name


def _sent(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """What the server sends for a response: status, the raw header lines, the body bytes."""
    messages: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)

    asyncio.run(response({"type": "http", "method": "GET", "headers": []}, receive, send))
    start = next(m for m in messages if m["type"] == "http.response.start")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]]
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], headers, body


def _serve(handler: Any, request: Request) -> tuple[int, list[tuple[str, str]], bytes]:
    result = asyncio.run(adapt(handler, "req")(req=request, client="c"))
    assert isinstance(result, Response)
    return _sent(result)


# The first bytes of a PNG: not UTF-8, with a NUL and a CR LF that text handling would mangle.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"


def test_binary_bodies_go_through_byte_for_byte_both_ways() -> None:
    received: list[bytes] = []

    def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        received.append(req.get_body())
        # As api/artifacts.py answers an image.
        headers = {"Content-Disposition": 'inline; filename="chart.png"', "X-Content-Type-Options": "nosniff"}
        return func.HttpResponse(PNG, status_code=200, mimetype="image/png", headers=headers)

    status, headers, body = _serve(handler, _request(PNG[::-1]))
    assert received == [PNG[::-1]]
    assert (status, body) == (200, PNG)
    assert ("content-type", "image/png") in headers and ("content-length", str(len(PNG))) in headers
    assert ("content-disposition", 'inline; filename="chart.png"') in headers


@pytest.mark.parametrize("code", [200, 201, 202, 204, 304, 400, 404, 409, 413, 429, 503])
def test_status_codes_go_back_as_they_are(code: int) -> None:
    def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        return func.HttpResponse(status_code=code) if code in (204, 304) else func.HttpResponse("x", status_code=code)

    status, headers, body = _serve(handler, _request(b""))
    assert status == code
    assert body == (b"" if code in (204, 304) else b"x")


def test_a_header_set_twice_is_sent_twice_and_the_handlers_own_length_is_not_doubled() -> None:
    def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        response = func.HttpResponse("ok", headers={"Content-Length": "2", "Vary": "Origin"})
        response.headers.add_header("Set-Cookie", "a=1; Path=/; HttpOnly")
        response.headers.add_header("Set-Cookie", "b=2; Path=/; Secure")
        return response

    _, headers, _ = _serve(handler, _request(b""))
    assert [v for k, v in headers if k.lower() == "set-cookie"] == ["a=1; Path=/; HttpOnly", "b=2; Path=/; Secure"]
    assert [v for k, v in headers if k.lower() == "content-length"] == ["2"]
    assert [v for k, v in headers if k.lower() == "content-type"] == ["text/plain; charset=utf-8"]
    assert ("vary", "Origin") in [(k.lower(), v) for k, v in headers]


def test_repeated_request_headers_are_joined_not_dropped() -> None:
    seen: dict[str, str] = {}

    def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        seen.update({k: req.headers[k] for k in ("x-forwarded-for", "accept")})
        return func.HttpResponse("")

    request = _request(b"")
    request.scope["headers"] += [
        (b"x-forwarded-for", b"10.0.0.1"),
        (b"x-forwarded-for", b"10.0.0.2"),
        (b"accept", b"text/html"),
    ]
    _serve(handler, request)
    assert seen == {"x-forwarded-for": "10.0.0.1,10.0.0.2", "accept": "text/html"}


def test_query_strings_route_values_and_the_function_key_reach_the_handler_unchanged() -> None:
    seen: list[func.HttpRequest] = []

    def handler(req: func.HttpRequest, client: str) -> func.HttpResponse:
        seen.append(req)
        return func.HttpResponse("")

    query = b"code=k3y%2Fwith%3D%3D&q=caf%C3%A9+au+lait&tag=a&tag=b&empty="
    request = _request(b"", path="/api/jobs/j%201/artifacts/r-2", query=query)
    request.scope["path_params"] = {"job_id": "j 1", "ref": "r-2"}
    request.scope["headers"] += [(b"x-functions-key", b"hostkey==")]
    _serve(handler, request)
    (req,) = seen
    assert dict(req.params) == {"code": "k3y/with==", "q": "café au lait", "tag": "a,b", "empty": ""}
    assert dict(req.route_params) == {"job_id": "j 1", "ref": "r-2"}
    assert req.headers["x-functions-key"] == "hostkey=="
    assert req.url == f"https://app.example/api/jobs/j%201/artifacts/r-2?{query.decode()}"
