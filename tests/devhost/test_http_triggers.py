"""HTTP triggers end to end on a real ``python -m devhost serve`` process (app: tests/apps/http_basic)."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("http_basic")


def test_startup_lists_every_function_with_methods_and_url(host: DevHostProcess) -> None:
    out = host.output()
    base = f"http://127.0.0.1:{host.port}"
    assert f"        health: [GET] {base}/api/health" in out
    assert f"        echo: [GET,POST,PUT,PATCH,DELETE] {base}/api/echo/{{*rest}}" in out
    assert f"        any_method: [GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS] {base}/api/anymethod" in out
    assert f"        DefaultRoute: [GET] {base}/api/DefaultRoute" in out
    # keys are printed so a developer can call protected functions
    assert "master: test-master-key-0123456789abcdef" in out
    assert "function (default): test-function-key-0123456789abcdef" in out
    assert "system (durabletask_extension): test-system-key-0123456789abcdef" in out


def test_host_status(host: DevHostProcess) -> None:
    resp = host.client.get("/admin/host/status", headers=host.admin_headers)
    assert resp.status_code == 200
    body = resp.json()
    assert body["state"] == "Running"
    assert body["version"] and body["id"]


def test_plain_get_returns_text(host: DevHostProcess) -> None:
    resp = host.client.get("/api/health")
    assert resp.status_code == 200
    assert resp.text == "ok"
    assert resp.headers["content-type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/items/42", {"by": "id", "id": "42"}),
        ("/api/items/abc", {"by": "slug", "slug": "abc"}),
        ("/api/items/special", {"by": "literal"}),
        ("/API/Items/SPECIAL", {"by": "literal"}),
        ("/api/files/report.tar.gz", {"name": "report.tar", "ext": "gz"}),
        ("/api/files/readme", {"name": "readme"}),
    ],
)
def test_routes_constraints_and_precedence(host: DevHostProcess, path: str, expected: dict[str, str]) -> None:
    resp = host.client.get(path)
    assert resp.status_code == 200, resp.text
    assert resp.json() == expected


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/api/guid/6f1c0e2a-1b2c-4d5e-8f90-123456789abc", 200, "6f1c0e2a-1b2c-4d5e-8f90-123456789abc"),
        ("/api/guid/nope", 404, ""),
        ("/api/page/3", 200, "page 3"),
        ("/api/page/0", 404, ""),
        ("/api/items/4x", 404, ""),
        ("/api/opt", 200, "name=<none>"),
        ("/api/opt/bob", 200, "name=bob"),
        ("/api/dflt", 200, "size=10"),
        ("/api/dflt/3", 200, "size=3"),
        ("/api/DefaultRoute", 200, "default route is the function name"),
        ("/api/defaultroute", 200, "default route is the function name"),
        ("/api/no/such/route", 404, ""),
        ("/health", 404, ""),
    ],
)
def test_route_table(host: DevHostProcess, path: str, status: int, text: str) -> None:
    resp = host.client.get(path)
    assert resp.status_code == status
    assert resp.text == text


def test_root_is_a_landing_page_when_no_function_owns_it(host: DevHostProcess) -> None:
    # Like the Functions host's home page, but JSON: where the API is (this app serves no console).
    body = host.client.get("/").json()
    assert body["host"] == "devhost" and body["api"] == "/api/" and body["console"] is None


def test_wrong_method_is_404_like_the_functions_host(host: DevHostProcess) -> None:
    # The Functions host answers 404 (not 405) when the route exists but the method is not allowed
    # (Azure/azure-functions-host#10098); the devhost does the same.
    assert host.client.post("/api/health").status_code == 404
    assert host.client.get("/api/only-post").status_code == 404
    assert host.client.head("/api/health").status_code == 404
    assert host.client.post("/api/only-post").text == "posted"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_route_without_methods_accepts_every_method(host: DevHostProcess, method: str) -> None:
    resp = host.client.request(method, "/api/anymethod")
    assert resp.status_code == 200
    assert resp.text == method


def test_request_mapping(host: DevHostProcess) -> None:
    resp = host.client.post(
        "/api/echo/a/b%20c?x=1&x=2&Flag=yes",
        content=b'{"hello": "world"}',
        headers={"Content-Type": "application/json", "X-Custom-Header": "Value-1"},
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["method"] == "POST"
    # absolute URL exactly as the caller used it, including the raw query
    assert body["url"] == f"http://127.0.0.1:{host.port}/api/echo/a/b%20c?x=1&x=2&Flag=yes"
    assert body["params"] == {"x": "1,2", "Flag": "yes"}
    assert body["route_params"] == {"rest": "a/b c"}
    assert body["headers"]["x-custom-header"] == "Value-1"
    assert body["headers"]["content-type"] == "application/json"
    assert body["body"] == '{"hello": "world"}'


def test_request_headers_are_case_insensitive_in_the_function(host: DevHostProcess) -> None:
    resp = host.client.post("/api/form", data={"a": "1", "b": "two"})
    assert resp.status_code == 200
    assert resp.json() == {"a": "1", "b": "two"}


@pytest.mark.parametrize(
    ("spec", "status", "content_type", "body"),
    [
        ({"body": "created", "status": 201}, 201, "text/plain; charset=utf-8", b"created"),
        ({"body": "{}", "mimetype": "application/json"}, 200, "application/json", b"{}"),
        (
            {"body": "<p>hé</p>", "mimetype": "text/html", "charset": "latin-1"},
            200,
            "text/html; charset=latin-1",
            "<p>hé</p>".encode("latin-1"),
        ),
        ({"body": "x", "headers": {"Content-Type": "application/xml"}}, 200, "application/xml", b"x"),
        ({"status": 204}, 204, None, b""),
        (
            {"body": "teapot", "status": 418, "headers": {"X-Reason": "short and stout"}},
            418,
            "text/plain; charset=utf-8",
            b"teapot",
        ),
    ],
)
def test_response_mapping(
    host: DevHostProcess, spec: dict[str, object], status: int, content_type: str | None, body: bytes
) -> None:
    resp = host.client.post("/api/respond", json=spec)
    assert resp.status_code == status
    assert resp.content == body
    if content_type is not None:
        assert resp.headers["content-type"] == content_type
    if status == 418:
        assert resp.headers["x-reason"] == "short and stout"


def test_binary_body_and_str_return(host: DevHostProcess) -> None:
    resp = host.client.get("/api/binary")
    assert resp.content == bytes(range(256))
    assert resp.headers["content-type"] == "application/octet-stream"
    text = host.client.get("/api/text")
    assert text.status_code == 200
    assert text.text == "plain text ü"
    assert text.headers["content-type"] == "text/plain; charset=utf-8"


def test_repeated_response_headers_are_kept(host: DevHostProcess) -> None:
    resp = host.client.get("/api/cookies")
    assert resp.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]


@pytest.mark.parametrize(
    ("path", "name", "secret"),
    [("/api/boom", "boom", "secret internal detail 42"), ("/api/aboom", "aboom", "async secret detail 43")],
)
def test_unhandled_exception_is_500_without_internals_and_logged(
    host: DevHostProcess, path: str, name: str, secret: str
) -> None:
    resp = host.client.get(path)
    assert resp.status_code == 500
    assert resp.content == b""
    out = host.output()
    match = re.search(rf"Exception while executing function: Functions\.{name} \(Id=([0-9a-f-]+)\)", out)
    assert match, out[-3000:]
    assert secret in out  # the traceback goes to the host log, not to the caller
    assert f"Executed 'Functions.{name}' (Failed, Id={match.group(1)}" in out


def test_unsupported_return_value_is_500(host: DevHostProcess) -> None:
    resp = host.client.get("/api/badreturn")
    assert resp.status_code == 500
    assert resp.content == b""
    assert "must return azure.functions.HttpResponse or str, got dict" in host.output()


def test_sync_functions_run_in_worker_threads_and_async_on_one_loop(host: DevHostProcess) -> None:
    sync = host.client.get("/api/sync-thread").json()
    assert sync["main"] is False
    assert sync["name"].startswith("devhost-fn")
    first = host.client.get("/api/async-loop").json()
    second = host.client.get("/api/async-loop").json()
    assert first["main"] is True
    assert first["loop"] == second["loop"]


def test_async_functions_run_concurrently(host: DevHostProcess) -> None:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: host.client.get("/api/slow/300").text, range(4)))
    assert results == ["slept"] * 4


def test_context_argument(host: DevHostProcess) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    resp = host.client.get("/api/ctx", headers={"traceparent": parent})
    body = resp.json()
    assert re.fullmatch(r"[0-9a-f-]{36}", body["invocation_id"])
    assert body["function_name"] == "with_context"
    assert body["function_directory"] == str(host.app_dir.resolve())
    assert body["trace_parent"] == parent
    assert body["retry_count"] == 0
    assert f"context invocation {body['invocation_id']}" in host.output()
    other = host.client.get("/api/ctx").json()
    assert other["invocation_id"] != body["invocation_id"]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", other["trace_parent"])


def test_invocations_are_logged_with_name_and_id(host: DevHostProcess) -> None:
    host.client.get("/api/health")
    out = host.output()
    assert re.search(r"Executing 'Functions\.health' \(Reason='[^']+', Id=[0-9a-f-]{36}\)", out)
    assert re.search(r"Executed 'Functions\.health' \(Succeeded, Id=[0-9a-f-]{36}, Duration=\d+ms\)", out)


def test_unknown_admin_and_runtime_paths_are_404(host: DevHostProcess) -> None:
    assert host.client.get("/admin/nothing").status_code == 404
    assert host.client.get("/runtime/other").status_code == 404


def test_json_body_round_trip_with_unicode(host: DevHostProcess) -> None:
    payload = {"text": "日本語 ✓", "n": [1, 2, 3]}
    resp = host.client.put("/api/echo/x", content=json.dumps(payload).encode("utf-8"))
    assert json.loads(resp.json()["body"]) == payload


def test_function_timeout_from_host_json_is_a_500(host: DevHostProcess) -> None:
    resp = host.client.get("/api/slow/4000")
    assert resp.status_code == 500
    assert resp.content == b""
    assert "Timeout value of 2 seconds was exceeded by function: Functions.slow" in host.output()


def test_request_body_over_100_mb_is_413(host: DevHostProcess) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", host.port)) as sock:
        sock.sendall(
            b"POST /api/echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 104857601\r\n\r\n"
        )
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413")


def test_none_return_is_an_empty_204(host: DevHostProcess) -> None:
    resp = host.client.get("/api/nothing")
    assert resp.status_code == 204
    assert resp.content == b""
