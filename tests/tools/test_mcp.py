"""The MCP tool family against a real MCP server (tests/tools/mcp_server.py) started on loopback."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import McpServer, Settings
from shared.tools import ToolContext, run_tool, tools
from shared.tools import mcp as mcp_family
from shared.tools.base import ToolFailure

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("mcp_server.py")
ALLOWED = ["add", "lookup", "explode", "nap", "whoami", "paint"]
CTX = ToolContext(job_id="job-1", step_id="s1")


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start the test MCP server on a port the OS picks; its URL, read from uvicorn's start line."""
    log = tmp_path_factory.mktemp("mcp") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(SERVER)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
            if found:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the MCP test server did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        yield f"{found.group(1)}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _fresh_listings() -> Iterator[None]:
    mcp_family.clear_listings()
    yield
    mcp_family.clear_listings()


def _server(url: str, **kw: Any) -> McpServer:
    values: dict[str, Any] = {"name": "t", "url": url, "allowed_tools": ALLOWED, "timeout_s": 5.0} | kw
    return McpServer.model_validate(values)


def _settings(*servers: McpServer, ttl: float = 300.0) -> Settings:
    return Settings(tools_mcp_servers=list(servers), tools_mcp_list_ttl_seconds=ttl)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_the_allowed_tools_are_listed_with_the_servers_schema_and_description(mcp_url: str) -> None:
    found = tools(_settings(_server(mcp_url)))
    names = {name for name in found if name.startswith("mcp.")}
    assert names == {f"mcp.t.{name}" for name in ALLOWED}
    spec = found["mcp.t.add"].spec
    assert spec.family == "mcp"
    assert spec.description == "Add two numbers."
    assert spec.input_schema["required"] == ["a", "b"]
    assert spec.input_schema["properties"]["a"]["type"] == "number"
    assert spec.timeout_s > 5.0  # run_tool's deadline leaves the call's own deadline room to fire first


def test_a_tool_outside_allowed_tools_is_neither_listed_nor_callable(mcp_url: str) -> None:
    found = tools(_settings(_server(mcp_url, allowed_tools=["add"])))
    assert [name for name in found if name.startswith("mcp.")] == ["mcp.t.add"]
    assert "mcp.t.secret" not in found
    # The only tool object there is calls its own tool; arguments never choose another one.
    result = run_tool(found["mcp.t.add"], {"a": 1, "b": 2, "name": "secret"}, CTX)
    assert result.success and result.data == {"total": 3.0}


def test_star_exposes_every_listed_tool_that_fits_a_tool_name(mcp_url: str) -> None:
    found = tools(_settings(_server(mcp_url, allowed_tools="*")))
    assert {"mcp.t.secret", "mcp.t.chatty", "mcp.t.add"} <= set(found)


def test_a_call_returns_the_structured_result(mcp_url: str) -> None:
    tool = tools(_settings(_server(mcp_url)))["mcp.t.add"]
    result = run_tool(tool, {"a": 1.5, "b": 2}, CTX)
    assert result.success, result.error
    assert result.data == {"total": 3.5}


def test_a_text_only_result_is_returned_as_text(mcp_url: str) -> None:
    tool = tools(_settings(_server(mcp_url)))["mcp.t.lookup"]
    result = run_tool(tool, {"key": "kiwi"}, CTX)
    assert result.success and result.data == "a green fruit"


def test_a_tool_error_is_a_final_tool_error_with_the_tools_message(mcp_url: str) -> None:
    tool = tools(_settings(_server(mcp_url)))["mcp.t.explode"]
    result = run_tool(tool, {"message": "the warehouse is closed"}, CTX)
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.TOOL_ERROR and not result.error.retryable
    assert "the warehouse is closed" in result.error.message


def test_a_call_over_the_servers_timeout_is_transient(mcp_url: str) -> None:
    tool = tools(_settings(_server(mcp_url, timeout_s=1.0)))["mcp.t.nap"]
    started = time.monotonic()
    result = run_tool(tool, {"seconds": 5}, CTX)
    assert time.monotonic() - started < 3.5
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.TRANSIENT and result.error.retryable
    assert "did not answer within 1 s" in result.error.message


def test_arguments_are_checked_against_the_servers_schema_before_any_call(mcp_url: str) -> None:
    tool = tools(_settings(_server(mcp_url)))["mcp.t.paint"]
    ok = run_tool(tool, {"color": "red", "coats": 2}, CTX)
    assert ok.success and ok.data == {"result": "2 coat(s) of red"}
    for args, where in [
        ({"color": "blue"}, "color"),  # not in the enum: only a full JSON Schema check sees it
        ({"coats": 2}, "color"),  # missing
        ({"color": "red", "coats": "two"}, "coats"),  # wrong type
        (["red"], "object"),  # not an object at all
    ]:
        result = run_tool(tool, args, CTX)
        assert not result.success and result.error is not None, args
        assert result.error.code == ErrorCode.INVALID_INPUT and not result.error.retryable
        assert where in result.error.message


def test_a_server_that_is_down_is_skipped_and_the_others_stay(mcp_url: str, caplog: pytest.LogCaptureFixture) -> None:
    down = _server(f"http://127.0.0.1:{_free_port()}/mcp", name="down", allowed_tools="*")
    with caplog.at_level(logging.WARNING, logger="shared.tools.mcp"):
        found = tools(_settings(down, _server(mcp_url)))
    assert "mcp.t.add" in found and not any(name.startswith("mcp.down.") for name in found)
    assert "MCP server down skipped: TRANSIENT" in caplog.text
    assert str(down.url) not in caplog.text  # messages name the server, not where it is


def test_a_server_going_down_after_listing_makes_calls_transient(mcp_url: str) -> None:
    port = _free_port()
    listed = mcp_family.ListedTool(name="add", description="Add.", input_schema={"type": "object"})
    tool = mcp_family.McpTool(_server(f"http://127.0.0.1:{port}/mcp"), listed)
    result = run_tool(tool, {}, CTX)
    assert result.error is not None and result.error.code == ErrorCode.TRANSIENT
    assert "cannot be reached" in result.error.message


def test_headers_come_from_the_app_settings_they_name(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_MCP_CALLER", "job-runner")
    server = _server(mcp_url, headers={"X-Caller": "TEST_MCP_CALLER"})
    result = run_tool(tools(_settings(server))["mcp.t.whoami"], {}, CTX)
    assert result.success and result.data == {"result": "job-runner"}


def test_a_missing_header_setting_is_a_config_error(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_MCP_UNSET", raising=False)
    server = _server(mcp_url, headers={"X-Caller": "TEST_MCP_UNSET"})
    assert not any(name.startswith("mcp.") for name in tools(_settings(server)))
    failure = mcp_family.list_servers([server], None)["t"]
    assert isinstance(failure, ToolFailure) and failure.code == ErrorCode.CONFIG_ERROR
    assert "TEST_MCP_UNSET" in failure.message


def test_refused_credentials_and_a_wrong_path_have_their_own_codes(
    mcp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_MCP_CALLER", "forbidden")
    refused = _server(mcp_url, name="refused", headers={"X-Caller": "TEST_MCP_CALLER"})
    wrong = _server(mcp_url.replace("/mcp", "/elsewhere"), name="wrong")
    got = mcp_family.list_servers([refused, wrong], None)
    assert isinstance(got["refused"], ToolFailure) and got["refused"].code == ErrorCode.AUTH_FAILED
    assert isinstance(got["wrong"], ToolFailure) and got["wrong"].code == ErrorCode.CONFIG_ERROR


def test_a_servers_description_is_capped_and_cleaned(mcp_url: str) -> None:
    spec = tools(_settings(_server(mcp_url, allowed_tools=["chatty"])))["mcp.t.chatty"].spec
    assert len(spec.description) <= mcp_family.MAX_DESCRIPTION_CHARS
    assert spec.description.startswith("Chatty.") and "\x1b" not in spec.description


def test_listings_are_kept_for_the_ttl(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    real = mcp_family.list_servers

    def counting(servers: list[McpServer], client_id: str | None) -> Any:
        calls.append([s.name for s in servers])
        return real(servers, client_id)

    monkeypatch.setattr(mcp_family, "list_servers", counting)
    settings = _settings(_server(mcp_url))
    assert tools(settings).keys() == tools(settings).keys()
    assert calls == [["t"]]
    # Another configuration of the server is another entry.
    tools(_settings(_server(mcp_url, allowed_tools=["add"])))
    assert len(calls) == 2
    # A TTL of 0 lists on every load.
    mcp_family.clear_listings()
    calls.clear()
    uncached = _settings(_server(mcp_url), ttl=0)
    tools(uncached)
    tools(uncached)
    assert calls == [["t"], ["t"]]


def test_an_async_caller_gets_the_tools_too(mcp_url: str) -> None:
    async def load() -> dict[str, Any]:
        # A thread with a running loop cannot block on another: the family lists from a worker thread then.
        return dict(tools(_settings(_server(mcp_url))))

    assert "mcp.t.add" in asyncio.run(load())


def test_an_allowed_tool_the_server_lacks_is_logged_once_per_listing(
    mcp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(_server(mcp_url, allowed_tools=["add", "gone"]))
    with caplog.at_level(logging.WARNING, logger="shared.tools.mcp"):
        tools(settings)
        tools(settings)
    assert caplog.text.count("does not list allowed tools ['gone']") == 1
