"""HTTP streams (azurefunctions-extensions-http-fastapi) on devhost: the same function code streams locally."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("http_stream")


def test_a_streaming_response_reaches_the_client_while_the_function_still_produces_it(host: DevHostProcess) -> None:
    with httpx.Client(base_url=host.base_url, timeout=30) as http, http.stream("GET", "/api/stream/ada") as resp:
        assert resp.status_code == 200
        assert resp.headers["x-stream"] == "yes" and resp.headers["content-type"].startswith("text/plain")
        lines = resp.iter_lines()
        # The first chunk arrives although the body cannot go on until this client releases it.
        assert next(lines) == "hello ada"
        assert http.post("/api/release").text == "released"
        assert list(lines) == ["chunk 0", "chunk 1", "chunk 2"]


def test_the_function_gets_the_live_request_body_query_and_headers(host: DevHostProcess) -> None:
    resp = host.client.post("/api/upload?q=1", content=b"x" * 100_000, headers={"X-Test": "t"})
    assert resp.status_code == 201
    assert resp.json() == {"size": 100_000, "q": "1", "h": "t"}


def test_a_streams_function_takes_a_durable_client_binding(host: DevHostProcess) -> None:
    resp = host.client.get("/api/durable-stream")
    assert resp.status_code == 200
    assert resp.text == "client=DurableOrchestrationClient found=False\n"
