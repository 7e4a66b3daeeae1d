"""TOOLS_MCP_SERVERS validation and the bounds put on what a server lists (no server needed)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from pydantic import ValidationError

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import ConfigError, McpServer, Settings, load_settings
from shared.tools import mcp as mcp_family
from shared.tools import tools
from shared.tools.base import ToolFailure

GOOD: dict[str, Any] = {"name": "weather", "url": "https://tools.example.com/mcp", "allowed_tools": ["forecast"]}


def test_a_good_entry_and_its_defaults() -> None:
    server = McpServer.model_validate(GOOD)
    assert server.auth == "none" and server.timeout_s == 30.0 and server.headers == {}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"url": "http://tools.example.com/mcp"}, "https"),
        ({"url": "ftp://tools.example.com/mcp"}, "http(s) URL"),
        ({"url": "https://user:pw@tools.example.com/mcp"}, "credentials"),
        ({"allowed_tools": None}, "allowed_tools"),
        ({"allowed_tools": []}, "allowed_tools"),
        ({"allowed_tools": "all"}, "allowed_tools"),
        ({"name": "has.dot"}, "name"),
        ({"headers": {"Host": "SOME_SETTING"}}, "cannot be set"),
        ({"headers": {"X-Key": "not a setting name"}}, "must name an app setting"),
        ({"auth": "managed_identity"}, "needs a scope"),
        ({"auth": "managed_identity", "scope": "api://x/.default", "headers": {"Authorization": "K"}}, "Authorization"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_entries_are_rejected(change: dict[str, Any], why: str) -> None:
    values = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(ValidationError, match=re.escape(why)):
        McpServer.model_validate(values)


def test_plain_http_is_allowed_for_loopback_only() -> None:
    for url in ("http://127.0.0.1:8000/mcp", "http://localhost/mcp", "http://[::1]:9/mcp"):
        assert McpServer.model_validate(GOOD | {"url": url}).url == url


def test_the_environment_variable_errors_name_the_setting_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLS_MCP_SERVERS", json.dumps([GOOD | {"url": "http://example.com/mcp"}]))
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == "TOOLS_MCP_SERVERS"
    assert "(at 0.url)" in str(caught.value) and "example.com" not in str(caught.value)
    monkeypatch.setenv("TOOLS_MCP_SERVERS", "[{not json")
    with pytest.raises(ConfigError, match="TOOLS_MCP_SERVERS: is not valid JSON"):
        load_settings()
    monkeypatch.setenv("TOOLS_MCP_SERVERS", json.dumps([GOOD, GOOD]))
    with pytest.raises(ConfigError, match="its own name"):
        load_settings()


def test_no_servers_no_tools() -> None:
    assert not any(name.startswith("mcp.") for name in tools(Settings(tools_mcp_servers=[])))


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("has space", {"type": "object"}),
        ("x" * 60, {"type": "object"}),  # mcp.s.<60 chars> is over the tool-name bound
        ("ok", {"type": "array"}),
        ("ok", "not a schema"),
        ("ok", {"type": "object", "properties": {"a": {"type": "no-such-type"}}}),
        ("ok", {"type": "object", "description": "x" * 10_000}),
    ],
)
def test_a_listed_tool_that_cannot_be_shown_safely_is_skipped(name: str, schema: Any) -> None:
    assert mcp_family.bounded_tool("s", name, "fine", schema) is None


def test_a_listed_tool_gets_a_description_even_without_one() -> None:
    listed = mcp_family.bounded_tool("s", "ok.v2", None, {"type": "object"})
    assert listed is not None and listed.description == "Tool ok.v2 of the MCP server s."


def test_exposed_keeps_only_allowed_tools() -> None:
    listed = [mcp_family.ListedTool(name=n, description="d", input_schema={"type": "object"}) for n in ("a", "b")]
    server = McpServer.model_validate(GOOD | {"allowed_tools": ["b", "gone"]})
    assert [tool.name for tool in mcp_family.exposed(server, listed)] == ["b"]
    assert mcp_family.exposed(McpServer.model_validate(GOOD | {"allowed_tools": "*"}), listed) == listed


class _Credential:
    """In place of the process's DefaultAzureCredential: tests have no identity, and probing one leaves loopback."""

    def __init__(self, refuse: bool = False) -> None:
        self.scopes: list[str] = []
        self.refuse = refuse

    def get_token(self, scope: str) -> AccessToken:
        self.scopes.append(scope)
        if self.refuse:
            raise ClientAuthenticationError("no identity")
        return AccessToken("tok-123", 0)


def test_managed_identity_sends_the_identitys_token_for_the_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    server = McpServer.model_validate(GOOD | {"auth": "managed_identity", "scope": "api://weather/.default"})
    credential = _Credential()
    monkeypatch.setitem(mcp_family._CREDENTIALS, "client-1", credential)
    assert mcp_family.request_headers(server, "client-1") == {"Authorization": "Bearer tok-123"}
    assert credential.scopes == ["api://weather/.default"]
    monkeypatch.setitem(mcp_family._CREDENTIALS, "client-1", _Credential(refuse=True))
    with pytest.raises(ToolFailure) as caught:
        mcp_family.request_headers(server, "client-1")
    assert caught.value.code == ErrorCode.AUTH_FAILED and "weather" in caught.value.message
