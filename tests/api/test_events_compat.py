"""api/streams_compat.py: the app's azure.functions routes, served the way the worker serves them once the
HTTP streams extension is imported (a Starlette request in, a Starlette response out), and unchanged otherwise.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import azure.functions as func
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
