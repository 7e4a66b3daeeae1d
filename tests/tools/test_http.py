"""The http family against a real HTTP server on loopback (uvicorn + starlette, started here)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpcore
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import ConfigError, HttpToolSetting, Settings, load_settings
from shared.tools import tools
from shared.tools.base import ToolContext, ToolResult, run_tool
from shared.tools.http import MAX_TEXT_CHARS, HttpTool, Resolver, build_tools, is_public_address, system_resolver
from tests.fakes import loopback
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.loopback import LoopbackServer

CTX = ToolContext(job_id="job-1", step_id="s1")
TLS_NAME = "api.tools.test"
HUGE_CHUNKS = 2_000  # 2000 x 64 KiB = 125 MiB if it were all read


async def echo(request: Request) -> Response:
    body = (await request.body()).decode() or None
    return JSONResponse(
        {
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode(),
            "query": request.scope["query_string"].decode(),
            "host": request.headers.get("host"),
            "authorization": request.headers.get("authorization"),
            "api_key": request.headers.get("x-api-key"),
            "accept": request.headers.get("accept"),
            "body": json.loads(body) if body else None,
        }
    )


async def status(request: Request) -> Response:
    code = int(request.path_params["code"])
    headers = {"Retry-After": "7"} if code == 429 else {}
    return PlainTextResponse(f"status {code}: the city is unknown", status_code=code, headers=headers)


async def slow(request: Request) -> Response:
    await asyncio.sleep(5)
    return PlainTextResponse("late")


async def huge(request: Request) -> Response:
    # No count of chunks produced here: once the client has gone, uvicorn's send() returns at once and this
    # generator runs on, writing into the void, so that count says nothing about what the client read.

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(HUGE_CHUNKS):
            yield b"x" * 65_536

    kind = request.query_params.get("type", "text/plain")
    return StreamingResponse(chunks(), media_type=kind)


async def text(request: Request) -> Response:
    return PlainTextResponse("plain words")


async def binary(request: Request) -> Response:
    return Response(b"\x89PNG\r\n", media_type="image/png")


async def redirect(request: Request) -> Response:
    return RedirectResponse(request.query_params["to"], status_code=int(request.query_params.get("code", "302")))


async def location(request: Request) -> Response:
    """A redirect whose Location is exactly ``to`` (RedirectResponse would percent-encode it)."""
    return Response(b"", status_code=302, headers={"location": request.query_params["to"]})


APP = Starlette(
    routes=[
        Route("/v1/echo/{rest:path}", echo, methods=["GET", "POST", "DELETE"]),
        Route("/status/{code}", status),
        Route("/slow", slow),
        Route("/huge", huge),
        Route("/text", text),
        Route("/binary", binary),
        Route("/redirect", redirect),
        Route("/location", location),
        Route("/loop", lambda request: RedirectResponse("/loop")),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(APP, name="http-tools")
    srv.start()
    yield srv
    srv.stop()


def tool(
    server: LoopbackServer | None = None,
    path: str = "/v1/echo/x",
    *,
    credential: StaticTokenCredential | None = None,
    verify: ssl.SSLContext | bool = True,
    resolver: Resolver = system_resolver,
    **declared: Any,
) -> HttpTool:
    """An HttpTool for the loopback server (listed in private_hosts) unless ``declared`` says otherwise."""
    config: dict[str, Any] = {
        "name": "echo",
        "description": "echo",
        "url": f"{server.origin if server else 'https://api.example.com'}{path}",
        "private_hosts": ["127.0.0.1"] if server else [],
        "timeout_s": 2,
        **declared,
    }
    settings = Settings(tools_http=[HttpToolSetting.model_validate(config)])
    factory = (lambda: credential) if credential else None
    built = build_tools(settings, credential=factory, verify=verify, resolver=resolver)
    assert isinstance(built[0], HttpTool)
    return built[0]


def call(t: HttpTool, args: dict[str, Any] | None = None) -> ToolResult:
    return run_tool(t, args or {}, CTX)


class CountingStream(httpcore.NetworkStream):
    """A client connection that counts the bytes the client read from the socket, and whether it was closed."""

    def __init__(self, inner: httpcore.NetworkStream, log: dict[str, int]) -> None:
        self.inner, self.log = inner, log
        log["opened"] += 1

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.inner.read(max_bytes, timeout)
        self.log["read"] += len(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, timeout)

    def close(self) -> None:
        self.log["closed"] += 1
        self.inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return CountingStream(self.inner.start_tls(*args, **kwargs), self.log)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


@pytest.fixture
def client_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Bytes read at the client's transport (every httpx.Client's TCP connections), opened and closed counts."""
    log = {"read": 0, "opened": 0, "closed": 0}
    connect = httpcore.SyncBackend.connect_tcp

    def counting(backend: httpcore.SyncBackend, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return CountingStream(connect(backend, *args, **kwargs), log)

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", counting)
    return log


def failed(result: ToolResult) -> tuple[str, str]:
    assert not result.success and result.error is not None, result
    return result.error.code, result.error.message


CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "q": {"type": "string"}, "lang": {"type": "string"}},
    "required": ["city", "q"],
}


def test_a_good_call_returns_the_json_and_the_family_lists_the_setting(
    server: LoopbackServer, monkeypatch: Any
) -> None:
    result = call(tool(server))
    assert result.success, result.error
    assert result.data["method"] == "GET" and result.data["raw_path"] == "/v1/echo/x"
    assert result.data["host"] == f"127.0.0.1:{server.port}"
    declared = [
        {"name": "echo", "description": "d", "url": f"{server.origin}/v1/echo/x", "private_hosts": ["127.0.0.1"]}
    ]
    monkeypatch.setenv("TOOLS_HTTP", json.dumps(declared))
    listed = tools(load_settings())["http.echo"]
    assert listed.spec.family == "http" and listed.spec.input_schema["additionalProperties"] is False
    assert run_tool(listed, {}, CTX).data["raw_path"] == "/v1/echo/x"


def test_arguments_fill_path_and_query_percent_encoded_and_never_change_the_host(server: LoopbackServer) -> None:
    t = tool(server, "/v1/echo/{city}/forecast?q={q}&units=metric&lang={lang}", parameters=CITY)
    data = call(t, {"city": "../admin", "q": "x&admin=1"}).data
    assert data["raw_path"] == "/v1/echo/..%2Fadmin/forecast"
    assert data["query"] == "q=x%26admin%3D1&units=metric"  # the optional lang left out, key and all
    sneaky = call(t, {"city": "a b/c?d#e@evil.example:80", "q": "é", "lang": "de"}).data
    assert sneaky["raw_path"] == "/v1/echo/a%20b%2Fc%3Fd%23e%40evil.example%3A80/forecast"
    assert sneaky["query"] == "q=%C3%A9&units=metric&lang=de"
    assert sneaky["host"] == f"127.0.0.1:{server.port}"
    for dots in (".", ".."):
        code, message = failed(call(t, {"city": dots, "q": "x"}))
        assert code == ErrorCode.INVALID_INPUT and "'..'" in message
    code, message = failed(call(t, {"q": "x"}))
    assert code == ErrorCode.INVALID_INPUT and "city" in message
    code, _ = failed(call(t, {"city": "x", "q": "y", "host": "evil.example"}))
    assert code == ErrorCode.INVALID_INPUT


def test_post_sends_the_other_arguments_as_json_body(server: LoopbackServer) -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "note": {"type": "string"}, "tags": {"type": "array"}},
        "required": ["id"],
    }
    data = call(tool(server, "/v1/echo/items/{id}", method="POST", parameters=schema), {"id": 7, "tags": ["a"]}).data
    assert data["method"] == "POST" and data["raw_path"] == "/v1/echo/items/7" and data["body"] == {"tags": ["a"]}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (500, ErrorCode.UPSTREAM_ERROR),
        (503, ErrorCode.UPSTREAM_ERROR),
        (401, ErrorCode.AUTH_FAILED),
        (403, ErrorCode.AUTH_FAILED),
        (404, ErrorCode.BAD_REQUEST),
        (422, ErrorCode.BAD_REQUEST),
        (429, ErrorCode.RATE_LIMITED),
    ],
)
def test_error_statuses_map_to_stable_codes(server: LoopbackServer, code: int, expected: str) -> None:
    result = call(tool(server, f"/status/{code}"))
    got, message = failed(result)
    assert got == expected and f"HTTP {code}: status {code}: the city is unknown" in message
    assert result.error is not None and result.error.retryable == (code >= 429)
    if code == 429:
        assert "retry after 7 s" in message


def test_a_slow_endpoint_times_out_as_transient(server: LoopbackServer) -> None:
    result = call(tool(server, "/slow", timeout_s=0.3))
    code, message = failed(result)
    assert code == ErrorCode.TRANSIENT and "0.3 s" in message and result.duration_ms < 2000


def test_a_huge_body_is_cut_while_streaming(server: LoopbackServer, client_reads: dict[str, int]) -> None:
    result = call(tool(server, "/huge", max_response_bytes=100_000))
    assert result.success and not result.truncated  # cut by the tool, so the envelope keeps its labelled object
    assert result.data["truncated"] is True and len(result.data["text"]) == MAX_TEXT_CHARS
    # The tool stopped reading at its cap (plus at most one 64 KiB socket read and the headers) and closed the
    # connection, instead of draining the 125 MiB body: counted at the client's socket, so no race with the server.
    assert client_reads["opened"] == client_reads["closed"] == 1
    assert 100_000 <= client_reads["read"] < 100_000 + 2 * 65_536
    cut_json = call(tool(server, "/huge?type=application/json", max_response_bytes=2048)).data
    assert cut_json["truncated"] is True and cut_json["content_type"] == "application/json"


def test_text_and_binary_bodies(server: LoopbackServer) -> None:
    assert call(tool(server, "/text")).data == {
        "status": 200,
        "content_type": "text/plain",
        "text": "plain words",
        "truncated": False,
    }
    assert call(tool(server, "/binary")).data["note"] == "binary body not shown"


def test_a_redirect_is_followed_only_to_an_allowed_public_host(server: LoopbackServer) -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}
    same = tool(server, "/redirect?to={to}", parameters=schema)
    assert call(same, {"to": "/v1/echo/landed"}).data["raw_path"] == "/v1/echo/landed"
    for target in ("http://169.254.169.254/metadata", "http://10.0.0.1/", "http://evil.example/", "javascript:x(1)"):
        code, message = failed(call(same, {"to": target}))
        assert code == ErrorCode.BAD_REQUEST and "not allowed (redirect)" in message
    # localhost is allowed as a redirect target, but not as a private one: it resolves to loopback.
    listed = tool(server, "/redirect?to={to}", parameters=schema, allowed_hosts=[f"http://localhost:{server.port}"])
    code, message = failed(call(listed, {"to": f"http://localhost:{server.port}/v1/echo/x"}))
    assert code == ErrorCode.BAD_REQUEST and "non-public address (127.0.0.1)" in message
    code, message = failed(call(tool(server, "/redirect?to=/redirect%3Fto%3D/loop")))  # /loop redirects to itself
    assert code == ErrorCode.BAD_REQUEST and "more than 3 redirects" in message


@pytest.fixture(scope="module")
def other_port() -> Iterator[LoopbackServer]:
    """A second loopback server: the same host as ``server``, another port (another service)."""
    hits: list[str] = []

    async def secret(request: Request) -> Response:
        hits.append(request.url.path)
        return JSONResponse({"service": "the other port", "path": request.url.path})

    srv = LoopbackServer(Starlette(routes=[Route("/{rest:path}", secret)]), name="http-tools-other")
    srv.hits = hits  # type: ignore[attr-defined]
    srv.start()
    yield srv
    srv.stop()


def test_a_redirect_to_another_port_of_an_allowed_host_is_refused(
    server: LoopbackServer, other_port: LoopbackServer
) -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}
    elsewhere = f"http://127.0.0.1:{other_port.port}/admin"
    hits: list[str] = other_port.hits  # type: ignore[attr-defined]
    hits.clear()
    # The url's host is a private host, and the redirect stays on that host: another port is another origin.
    for allowed in ([], ["127.0.0.1"]):  # a bare host name allows only its standard ports
        code, message = failed(
            call(tool(server, "/redirect?to={to}", parameters=schema, allowed_hosts=allowed), {"to": elsewhere})
        )
        assert code == ErrorCode.BAD_REQUEST
        assert message == f"http.echo: http://127.0.0.1:{other_port.port} is not allowed (redirect)"
    # Another scheme on the same host and port is another origin too.
    https = f"https://127.0.0.1:{server.port}/v1/echo/x"
    code, message = failed(call(tool(server, "/redirect?to={to}", parameters=schema), {"to": https}))
    assert code == ErrorCode.BAD_REQUEST and f"https://127.0.0.1:{server.port} is not allowed (redirect)" in message
    assert hits == []  # the other service never saw a request
    # Listed as an origin, it is followed.
    listed = tool(server, "/redirect?to={to}", parameters=schema, allowed_hosts=[f"http://127.0.0.1:{other_port.port}"])
    assert call(listed, {"to": elsewhere}).data == {"service": "the other port", "path": "/admin"}
    assert hits == ["/admin"]


def test_allowed_hosts_are_host_names_or_origins() -> None:
    def declared(**extra: Any) -> HttpToolSetting:
        return HttpToolSetting.model_validate({"name": "x", "description": "d", "url": "https://a.example/", **extra})

    assert declared(allowed_hosts=["B.example", "HTTPS://C.example:8443/", "[::1]"]).allowed_hosts == [
        "b.example",
        "https://c.example:8443",
        "::1",
    ]
    for bad in ["b.example:8443", "ftp://b.example", "https://b.example/path", "https://u@b.example", "http://b:x/"]:
        with pytest.raises(ValueError, match="allowed_hosts entry"):
            declared(allowed_hosts=[bad])
    with pytest.raises(ValueError, match="private_hosts entry"):
        declared(private_hosts=["https://a.example"])


@pytest.mark.parametrize(
    "location",
    ["http://[::1", "http://x:abc/", "http://[zz]/", "http://127.0.0.1:1:80/", "http://127.0.0.1/\x7f"],
)
def test_a_malformed_location_fails_the_call_for_good_with_a_clear_message(
    server: LoopbackServer, location: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}
    result = call(tool(server, "/location?to={to}", parameters=schema), {"to": location})
    code, message = failed(result)
    assert result.error is not None and not result.error.retryable
    assert code == ErrorCode.TOOL_ERROR
    assert (
        message.startswith("http.echo: the server answered HTTP 302 with a malformed Location")
        and "not followed" in message
    )
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no traceback: an expected failure


def test_a_host_not_listed_is_refused(server: LoopbackServer) -> None:
    # The loopback server's address without private_hosts: public addresses only.
    code, message = failed(call(tool(server, private_hosts=[])))
    assert code == ErrorCode.CONFIG_ERROR and "non-public address (127.0.0.1)" in message
    with pytest.raises(ConfigError, match="TOOLS_HTTP: entry 'echo': every host in private_hosts"):
        tool(server, private_hosts=["127.0.0.1", "10.0.0.1"])


def test_a_name_resolving_to_loopback_is_refused_unless_listed(server: LoopbackServer) -> None:
    by_name = f"http://localhost:{server.port}/v1/echo/x"
    code, message = failed(call(tool(url=by_name)))
    assert code == ErrorCode.CONFIG_ERROR and "localhost resolves to a non-public address" in message
    listed = call(tool(url=by_name, private_hosts=["localhost"]))
    assert listed.success and listed.data["host"] == f"localhost:{server.port}"


def test_dns_is_resolved_once_and_the_checked_address_is_the_one_connected(server: LoopbackServer) -> None:
    asked: list[tuple[str, int]] = []

    def rebinding(host: str, port: int) -> list[str]:
        # First answer: loopback (where the server is); any later answer would point elsewhere.
        asked.append((host, port))
        return ["127.0.0.1"] if len(asked) == 1 else ["10.9.9.9"]

    url = f"http://api.internal.test:{server.port}/v1/echo/x"
    result = call(tool(url=url, private_hosts=["api.internal.test"], resolver=rebinding))
    assert result.success and result.data["host"] == f"api.internal.test:{server.port}"
    assert asked == [("api.internal.test", server.port)]


def test_public_address_check() -> None:
    refused = [
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "127.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "168.63.129.16",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::1",
        "2001:db8::1",
    ]
    public = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
    assert [a for a in refused if is_public_address(a)] == []
    assert all(is_public_address(a) for a in public)


def test_a_secret_header_comes_from_the_named_app_setting(server: LoopbackServer, monkeypatch: Any) -> None:
    t = tool(server, headers={"X-Api-Key": {"setting": "WEATHER_API_KEY"}, "Accept-Language": "en"})
    monkeypatch.delenv("WEATHER_API_KEY", raising=False)
    code, message = failed(call(t))
    assert code == ErrorCode.CONFIG_ERROR and "WEATHER_API_KEY" in message
    monkeypatch.setenv("WEATHER_API_KEY", "k-123\r\nX-Injected: 1")
    code, message = failed(call(t))
    assert code == ErrorCode.CONFIG_ERROR and "WEATHER_API_KEY" in message and "k-123" not in message
    monkeypatch.setenv("WEATHER_API_KEY", "k-123")
    assert call(t).data["api_key"] == "k-123"


def test_credentials_never_follow_a_redirect_to_another_origin(server: LoopbackServer, monkeypatch: Any) -> None:
    monkeypatch.setenv("WEATHER_API_KEY", "k-123")
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}
    t = tool(
        server,
        "/redirect?to={to}",
        parameters=schema,
        headers={"X-Api-Key": {"setting": "WEATHER_API_KEY"}},
        allowed_hosts=[f"http://localhost:{server.port}"],
        private_hosts=["127.0.0.1", "localhost"],
    )
    same = call(t, {"to": "/v1/echo/same"}).data
    other = call(t, {"to": f"http://localhost:{server.port}/v1/echo/other"}).data
    assert same["api_key"] == "k-123" and other["api_key"] is None and other["raw_path"] == "/v1/echo/other"


def test_managed_identity_token_from_the_credential(server: LoopbackServer) -> None:
    fake = StaticTokenCredential("entra-token-1")
    scope = "api://weather/.default"
    data = call(tool(server, auth="managed_identity", scope=scope, credential=fake)).data
    assert data["authorization"] == "Bearer entra-token-1" and fake.scopes == [(scope,)]
    refusing = StaticTokenCredential(error=RuntimeError("no identity endpoint at 169.254.169.254"))
    code, message = failed(call(tool(server, auth="managed_identity", scope=scope, credential=refusing)))
    assert code == ErrorCode.AUTH_FAILED and scope in message and "169.254" not in message


def name_only_certificate(directory: Path, name: str = "fake") -> tuple[Path, Path]:
    """A self-signed certificate valid for TLS_NAME only (not for 127.0.0.1), as LoopbackServer's certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_tls_goes_to_the_checked_address_and_verifies_the_name(monkeypatch: Any) -> None:
    monkeypatch.setattr(loopback, "make_certificate", name_only_certificate)
    srv = LoopbackServer(APP, name="http-tools-tls", tls=True)
    srv.start()
    try:
        assert srv.ca_file is not None
        trust = ssl.create_default_context(cafile=srv.ca_file)
        fake = StaticTokenCredential("entra-token-2")
        declared: dict[str, Any] = {
            "private_hosts": [TLS_NAME],
            "auth": "managed_identity",
            "scope": "api://x/.default",
        }
        by_name = f"https://{TLS_NAME}:{srv.port}/v1/echo/tls"

        def resolve(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

        ok = call(tool(url=by_name, credential=fake, verify=trust, resolver=resolve, **declared))
        assert ok.success, ok.error
        assert ok.data["authorization"] == "Bearer entra-token-2" and ok.data["host"] == f"{TLS_NAME}:{srv.port}"
        # The certificate names TLS_NAME, not the address: verification follows the name, not the IP connected to.
        by_ip = {**declared, "private_hosts": ["127.0.0.1"]}
        assert not call(tool(url=f"https://127.0.0.1:{srv.port}/", credential=fake, verify=trust, **by_ip)).success
        # And the system CAs do not know the test certificate.
        untrusted = call(tool(url=by_name, credential=fake, resolver=resolve, **declared))
        assert failed(untrusted)[0] in (ErrorCode.TRANSIENT, ErrorCode.UPSTREAM_ERROR)
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"url": "ftp://x.example/"}, "http(s) URL"),
        ({"url": "https://user:pw@x.example/"}, "without credentials"),
        ({"url": "https://{host}.example/"}, "without credentials or {placeholders}"),
        ({"headers": {"Authorization": "Bearer abc"}}, "carries a credential"),
        ({"headers": {"X-Api-Key": "abc"}}, "carries a credential"),
        ({"headers": {"Host": "evil.example"}}, "cannot be set"),
        ({"auth": "managed_identity"}, "needs a scope"),
        ({"url": "http://x.example/", "auth": "managed_identity", "scope": "s"}, "need an https url"),
        ({"url": "http://x.example/", "headers": {"X-Api-Key": {"setting": "K"}}}, "need an https url"),
        ({"timeout_s": 0}, "greater than 0"),
        ({"parameters": {"type": "array"}}, "JSON Schema object"),
        ({"parameters": {"properties": {"a": "string"}}}, "each of parameters.properties"),
        ({"parameters": {"properties": {}, "required": ["a"]}}, "parameters.required"),
    ],
)
def test_bad_declarations_fail_the_settings_naming_it(monkeypatch: Any, entry: dict[str, Any], why: str) -> None:
    declared = {"name": "w", "description": "d", "url": "https://x.example/", **entry}
    monkeypatch.setenv("TOOLS_HTTP", json.dumps([declared]))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "TOOLS_HTTP" and why in str(info.value)
    assert "abc" not in str(info.value)


def test_duplicate_names_and_bad_json_fail_the_settings(monkeypatch: Any) -> None:
    one = {"name": "w", "description": "d", "url": "https://x.example/"}
    monkeypatch.setenv("TOOLS_HTTP", json.dumps([one, one]))
    with pytest.raises(ConfigError, match="TOOLS_HTTP: .*own name"):
        load_settings()
    monkeypatch.setenv("TOOLS_HTTP", "[{")
    with pytest.raises(ConfigError, match="TOOLS_HTTP: is not valid JSON"):
        load_settings()


@pytest.mark.parametrize(
    ("path", "parameters", "method", "why"),
    [
        ("/a/{city}", {"type": "object", "properties": {}}, "GET", "{city} must be a parameter"),
        ("/a/{city}", {"type": "object", "properties": {"city": {"type": "string"}}}, "GET", "required parameter"),
        ("/a/{c}", {"type": "object", "properties": {"c": {"type": "array"}}, "required": ["c"]}, "GET", "type"),
        ("/a?{k}=1", {"type": "object", "properties": {"k": {"type": "string"}}}, "GET", "query keys"),
        ("/a/{x", {"type": "object", "properties": {}}, "GET", "brace"),
        ("/a", {"type": "object", "properties": {"extra": {"type": "string"}}}, "GET", "'extra' is not in the url"),
    ],
)
def test_url_templates_that_cannot_work_are_config_errors(
    path: str, parameters: dict[str, Any], method: str, why: str
) -> None:
    with pytest.raises(ConfigError, match="TOOLS_HTTP") as info:
        tool(None, path, parameters=parameters, method=method)
    assert why in str(info.value)
