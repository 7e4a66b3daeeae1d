"""Tools with side effects: every HTTP and MCP call carries an idempotency key from durable ids, the same for
every attempt of one call, and a tool entry may declare itself non-retryable (its failures are final)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.executors.runner import run_executor
from shared.jobs.contracts import ExecutorOutput
from shared.providers.clients import Clients
from shared.runtime.settings import HttpToolSetting, McpServer, Settings
from shared.tools import mcp as mcp_family
from shared.tools.base import IDEMPOTENCY_HEADER, ToolContext, run_tool
from shared.tools.http import build_tools
from tests.fakes.loopback import LoopbackServer
from tests.tools.test_mcp import mcp_url

__all__ = ["mcp_url"]


class KeyedApi:
    """Records the Idempotency-Key of every request; /fail answers 500."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []
        routes = [Route("/ok", self.ok, methods=["GET", "POST"]), Route("/fail", self.fail, methods=["POST"])]
        self.server = LoopbackServer(Starlette(routes=routes), name="keyed-api")

    async def ok(self, request: Request) -> Response:
        self.keys.append(request.headers.get("idempotency-key"))
        return JSONResponse({"ok": True})

    async def fail(self, request: Request) -> Response:
        self.keys.append(request.headers.get("idempotency-key"))
        return JSONResponse({"error": "boom"}, status_code=500)


@pytest.fixture(scope="module")
def api() -> Iterator[KeyedApi]:
    keyed = KeyedApi()
    keyed.server.start()
    yield keyed
    keyed.server.stop()


@pytest.fixture(autouse=True)
def _fresh(api: KeyedApi) -> None:
    api.keys.clear()
    mcp_family.clear_listings()


def entry(api: KeyedApi, path: str, **declared: Any) -> dict[str, Any]:
    config = {"name": path.strip("/"), "description": "d", "url": f"{api.server.origin}{path}", "method": "POST"}
    return config | {"private_hosts": ["127.0.0.1"], "timeout_s": 5} | declared


def settings_with(*entries: dict[str, Any]) -> Settings:
    return Settings(llm_provider="offline", tools_http=[HttpToolSetting.model_validate(e) for e in entries])


def test_the_http_tool_sends_the_key_it_is_given(api: KeyedApi) -> None:
    (tool,) = build_tools(settings_with(entry(api, "/ok")))
    assert run_tool(tool, {}, ToolContext(job_id="j", step_id="t1", idempotency_key="j:t1:1")).success
    assert run_tool(tool, {}, ToolContext(job_id="j", step_id="t1")).success
    assert api.keys == ["j:t1:1", None]


def test_a_tool_declared_non_retryable_fails_for_good(api: KeyedApi) -> None:
    retried, final = build_tools(settings_with(entry(api, "/fail"), entry(api, "/fail", name="once", retryable=False)))
    assert retried.spec.retryable and not final.spec.retryable
    first, second = run_tool(retried, {}, ToolContext()), run_tool(final, {}, ToolContext())
    assert first.error is not None and first.error.code == "UPSTREAM_ERROR" and first.error.retryable
    assert second.error is not None and second.error.code == "UPSTREAM_ERROR" and not second.error.retryable


def call_tool(settings: Settings, tool: str, context: dict[str, Any]) -> ExecutorOutput:
    payload = {
        "task_id": "job-7:t3:2",
        "executor_type": "call_tool",
        "task": {"tool": tool, "arguments": {}},
        "execution_context": {"job_id": "job-7", "step_id": "t3", "allowed_tools": [tool], **context},
    }
    return ExecutorOutput.model_validate(run_executor(payload, expected_type="call_tool", clients=Clients(settings)))


def test_call_tool_derives_the_key_from_the_job_and_the_call(api: KeyedApi) -> None:
    settings = settings_with(entry(api, "/ok"))
    # Two attempts of one call (the second after a retry or a crash) send one key; a new call another.
    for attempt in (1, 2):
        assert call_tool(settings, "http.ok", {"call_id": "t3:1", "attempt": attempt}).status == "success"
    assert call_tool(settings, "http.ok", {"call_id": "t3:3", "attempt": 3}).status == "success"
    # An input from before call ids (a job in flight across the upgrade) falls back to the step id.
    assert call_tool(settings, "http.ok", {}).status == "success"
    assert api.keys == ["job-7:t3:1", "job-7:t3:1", "job-7:t3:3", "job-7:t3"]


def test_call_tool_marks_a_non_retryable_failure_final(api: KeyedApi) -> None:
    settings = settings_with(entry(api, "/fail"), entry(api, "/fail", name="once", retryable=False))
    retried = call_tool(settings, "http.fail", {"call_id": "t3:1"})
    final = call_tool(settings, "http.once", {"call_id": "t3:1"})
    assert retried.error is not None and retried.error.code == "UPSTREAM_ERROR" and retried.error.retryable
    assert final.error is not None and final.error.code == "UPSTREAM_ERROR" and not final.error.retryable
    assert final.result is not None and final.result["error"]["retryable"] is False


def test_the_mcp_tool_sends_the_key_on_its_session(mcp_url: str) -> None:
    server = McpServer.model_validate({"name": "t", "url": mcp_url, "allowed_tools": ["request_key"], "timeout_s": 5})
    tools = mcp_family.load_mcp_tools(Settings(tools_mcp_servers=[server]))
    (tool,) = [t for t in tools if t.spec.name == "mcp.t.request_key"]
    result = run_tool(tool, {}, ToolContext(job_id="j", step_id="t2", idempotency_key="j:t2:1"))
    assert result.success, result.error
    assert "j:t2:1" in json.dumps(result.data)
    once = McpServer.model_validate(server.model_dump() | {"retryable": False})
    (final,) = [t for t in mcp_family.load_mcp_tools(Settings(tools_mcp_servers=[once])) if t.spec.name.endswith("key")]
    assert final.spec.retryable is False and IDEMPOTENCY_HEADER == "Idempotency-Key"
