"""The ``mcp`` tool family: the tools of the MCP servers declared in ``TOOLS_MCP_SERVERS``.

Each server is reached over streamable HTTP with the official SDK. Its tools are listed when the family
loads (kept per process for ``TOOLS_MCP_LIST_TTL_SECONDS``; a server that cannot be listed is logged and
skipped, the others stay) and become ``mcp.<server>.<tool>``, with the server's own input schema and a
capped description. Only the tools in the server's ``allowed_tools`` exist here: a model's arguments
choose neither the server nor the tool, and headers and tokens come from configuration alone.

Each call opens its own session on a fresh event loop in the calling (worker) thread: sessions are not
shared between threads, so nothing a call leaves behind reaches another one. MCP outcomes map to the
stable codes: connection faults and timeouts are TRANSIENT, a tool's own error result TOOL_ERROR (the
model is shown it; retrying the same call would fail the same way), protocol errors UPSTREAM_ERROR,
rejected arguments INVALID_INPUT, refused credentials AUTH_FAILED.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import re
import threading
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from pydantic import ValidationError

from shared.jobs.contracts import ErrorCode
from shared.runtime.schema_safety import SchemaLimitExceeded, UnsafeSchema, safe_validator, schema_problems
from shared.tools import register_family
from shared.tools.base import IDEMPOTENCY_HEADER, TOOL_NAME_PATTERN, Tool, ToolContext, ToolFailure, ToolSpec

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

    from shared.runtime.settings import McpServer, Settings

logger = logging.getLogger(__name__)

FAMILY = "mcp"
# What a server may put in front of the model: its text is untrusted, so it is bounded.
MAX_DESCRIPTION_CHARS = 1_000
MAX_SCHEMA_CHARS = 8_000
MAX_TOOLS_PER_SERVER = 128
MAX_LIST_PAGES = 10
# A server's error text shown to the model and the job log.
MAX_ERROR_CHARS = 500
# A server that could not be listed is tried again after this long at most, not on every load.
FAILED_LISTING_RETRY_S = 30.0
# run_tool's deadline is the server's timeout plus this: the call's own deadline fires first, so the
# session is closed here and the failure says what happened.
CALL_GRACE_S = 2.0
_MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

T = TypeVar("T")


@dataclass(frozen=True)
class ListedTool:
    """One tool as a server listed it, already bounded."""

    name: str
    description: str
    input_schema: dict[str, Any] = field(compare=False)
    # Why the tool is left out (an unsafe input schema, say): it is never exposed, only shown in the listing.
    left_out: str | None = None


class McpTool(Tool):
    """A tool of one configured MCP server; calls exactly that server and that tool."""

    def __init__(self, server: McpServer, listed: ListedTool, client_id: str | None = None) -> None:
        self.server = server
        self.remote_name = listed.name
        self._client_id = client_id
        self.spec = ToolSpec(
            name=f"{FAMILY}.{server.name}.{listed.name}",
            family=FAMILY,
            description=listed.description,
            input_schema=listed.input_schema,
            timeout_s=server.timeout_s + CALL_GRACE_S,
            retryable=server.retryable,
        )

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Validate the arguments against the server's schema, call the tool, return its data."""
        _validate(self.spec, args)
        headers = request_headers(self.server, self._client_id)
        if ctx.idempotency_key:
            # On every HTTP request of this call's session: the same key for every attempt of the call.
            headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key
        statuses: list[int] = []

        async def call() -> CallToolResult:
            with anyio.fail_after(self.server.timeout_s):
                async with _session(self.server, headers, statuses) as client:
                    return await client.call_tool(self.remote_name, args, read_timeout_seconds=self.server.timeout_s)

        _import_sdk()
        try:
            result = _run(call)
        except Exception as exc:
            raise classify(exc, self.server, statuses) from exc
        logger.debug("MCP tool %s answered (job %s, step %s)", self.spec.name, ctx.job_id, ctx.step_id)
        return result_data(self.spec.name, result)


def declares(settings: Settings, name: str) -> bool:
    """Whether ``mcp.<server>.<tool>`` names a configured server and one of its allowed tools (no listing)."""
    _, _, rest = name.partition(".")
    server_name, _, tool = rest.partition(".")
    for server in settings.tools_mcp_servers:
        if server.name == server_name and tool:
            return server.allowed_tools == "*" or tool in server.allowed_tools
    return False


@register_family(FAMILY, declares=declares)
def load_mcp_tools(settings: Settings) -> list[Tool]:
    """The allowed tools of every configured MCP server that could be listed."""
    if not settings.tools_mcp_servers:
        return []
    listings = _LISTINGS.get(settings.tools_mcp_servers, settings.tools_mcp_list_ttl_seconds, settings.azure_client_id)
    found: list[Tool] = []
    for server in settings.tools_mcp_servers:
        for listed in exposed(server, listings.get(server.name, [])):
            found.append(McpTool(server, listed, settings.azure_client_id))
    return found


def exposed(server: McpServer, listed: list[ListedTool]) -> list[ListedTool]:
    """The listed tools the server's ``allowed_tools`` lets the Executor see."""
    usable = [tool for tool in listed if tool.left_out is None]
    if server.allowed_tools == "*":
        return usable
    allowed = set(server.allowed_tools)
    return [tool for tool in usable if tool.name in allowed]


def left_out_tools(settings: Settings) -> list[dict[str, str]]:
    """The tools the configured servers list that are left out, each with why (the cached listings; no call)."""
    listings = _LISTINGS.get(settings.tools_mcp_servers, settings.tools_mcp_list_ttl_seconds, settings.azure_client_id)
    return [
        {"name": f"{FAMILY}.{server.name}.{tool.name}", "server": server.name, "reason": tool.left_out}
        for server in settings.tools_mcp_servers
        for tool in listings.get(server.name, [])
        if tool.left_out is not None and (server.allowed_tools == "*" or tool.name in server.allowed_tools)
    ]


def clear_listings() -> None:
    """Forget every cached tool list (tests, or to pick up a server's new tools at once)."""
    _LISTINGS.clear()


# --- Listing ---------------------------------------------------------------------------------------


class _Listings:
    """Tool lists per server configuration, each kept until it expires; one refresh at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, list[ListedTool] | None]] = {}

    def get(self, servers: list[McpServer], ttl_s: float, client_id: str | None) -> dict[str, list[ListedTool]]:
        with self._lock:
            now = time.monotonic()
            stale = [s for s in servers if (e := self._entries.get(_key(s))) is None or e[0] <= now]
            if stale:
                fetched = list_servers(stale, client_id)
                done = time.monotonic()
                for server in stale:
                    got = fetched[server.name]
                    if isinstance(got, ToolFailure):
                        logger.warning("MCP server %s skipped: %s: %s", server.name, got.code, got.message)
                        self._entries[_key(server)] = (done + min(ttl_s, FAILED_LISTING_RETRY_S), None)
                    else:
                        self._entries[_key(server)] = (done + ttl_s, got)
                        _warn_missing(server, got)
            return {s.name: listed for s in servers if (listed := self._entries[_key(s)][1]) is not None}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_LISTINGS = _Listings()


def _warn_missing(server: McpServer, listed: list[ListedTool]) -> None:
    # Once per listing, not per load: an allowed tool the server does not (or no longer) offer.
    if server.allowed_tools != "*":
        missing = set(server.allowed_tools) - {tool.name for tool in listed}
        if missing:
            logger.warning("MCP server %s does not list allowed tools %s", server.name, sorted(missing))


def _key(server: McpServer) -> str:
    # The whole entry: a changed URL, header or allow-list is another server as far as the cache goes.
    return server.model_dump_json()


def list_servers(servers: list[McpServer], client_id: str | None) -> dict[str, list[ListedTool] | ToolFailure]:
    """List the tools of these servers side by side; each one's failure is its own entry, never raised."""
    results: dict[str, list[ListedTool] | ToolFailure] = {}
    headers: dict[str, dict[str, str]] = {}
    for server in servers:
        try:
            headers[server.name] = request_headers(server, client_id)
        except ToolFailure as exc:
            results[server.name] = exc

    async def one(server: McpServer) -> None:
        statuses: list[int] = []
        try:
            with anyio.fail_after(server.timeout_s):
                async with _session(server, headers[server.name], statuses) as client:
                    results[server.name] = await _list_tools(server, client)
        except Exception as exc:
            results[server.name] = classify(exc, server, statuses)

    async def all_of_them() -> None:
        async with anyio.create_task_group() as group:
            for server in servers:
                if server.name in headers:
                    group.start_soon(one, server)

    _import_sdk()
    _run(all_of_them)
    return results


async def _list_tools(server: McpServer, client: Client) -> list[ListedTool]:
    listed: dict[str, ListedTool] = {}
    kept = {True: 0, False: 0}  # usable, left out: each bounded, so junk tools cannot crowd out good ones
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            checked = checked_tool(server.name, tool.name, tool.description, tool.input_schema)
            usable = checked.left_out is None
            if checked.name not in listed and kept[usable] < MAX_TOOLS_PER_SERVER:
                listed[checked.name] = checked
                kept[usable] += 1
        cursor = page.next_cursor
        if not cursor:
            break
    return list(listed.values())


def bounded_tool(server: str, name: str, description: str | None, schema: Any) -> ListedTool | None:
    """A listed tool made safe to show a model, or None (logged) when it cannot be."""
    checked = checked_tool(server, name, description, schema)
    return checked if checked.left_out is None else None


def checked_tool(server: str, name: str, description: str | None, schema: Any) -> ListedTool:
    """A listed tool made safe to show a model, or one marked ``left_out`` with the reason (logged)."""
    problem = _tool_problem(server, name, schema)
    if problem is not None:
        logger.warning("MCP server %s: tool %r skipped: %s", server, name[:80], problem)
        return ListedTool(name=name[:80], description="", input_schema={}, left_out=problem)
    text = _plain(description or "") or f"Tool {name} of the MCP server {server}."
    return ListedTool(name=name, description=_cap(text, MAX_DESCRIPTION_CHARS), input_schema=schema)


def _tool_problem(server: str, name: str, schema: Any) -> str | None:
    full_name = f"{FAMILY}.{server}.{name}"
    if not _MCP_TOOL_NAME.fullmatch(name) or not re.fullmatch(TOOL_NAME_PATTERN, full_name):
        return "its name does not fit a tool name"
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its input schema is not an object schema"
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        return f"its input schema is over {MAX_SCHEMA_CHARS} chars"
    # A remote or file $ref, a pattern RE2 cannot run, a schema past the bounds: untrusted code is not run.
    problems = schema_problems(schema)
    if problems:
        kind = "invalid" if problems[0].invalid else "unsafe"
        return _cap(f"{kind} input schema: {problems[0].at('inputSchema')}: {problems[0].message}", 300)
    return None


def _plain(text: str) -> str:
    # Control and format characters (escapes, bidi overrides) say nothing a model needs and can hide text.
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" or ch in "\n\t" else " " for ch in text)
    return kept.strip()


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- Calling ---------------------------------------------------------------------------------------


def _validate(spec: ToolSpec, args: dict[str, Any]) -> None:
    """The full JSON Schema check of the server's schema (run_tool checks only keys and basic types)."""
    try:
        error = safe_validator(spec.input_schema).first_error(args)
    except UnsafeSchema as exc:
        raise ToolFailure(
            ErrorCode.CONFIG_ERROR, _cap(f"{spec.name}: its input schema cannot be run: {exc}", MAX_ERROR_CHARS)
        ) from None
    except SchemaLimitExceeded as exc:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT, _cap(f"{spec.name}: the arguments cannot be checked: {exc}", MAX_ERROR_CHARS)
        ) from None
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise ToolFailure(ErrorCode.INVALID_INPUT, _cap(f"{spec.name}: {where}: {error.message}", MAX_ERROR_CHARS))


def result_data(name: str, result: CallToolResult) -> Any:
    """The data of a tool result: its structured content, else its text; an error result raises ToolFailure."""
    if result.is_error:
        text = _plain(_text_of(result)) or "no details"
        raise ToolFailure(ErrorCode.TOOL_ERROR, _cap(f"{name} failed: {text}", MAX_ERROR_CHARS))
    if result.structured_content is not None:
        return result.structured_content
    return _text_of(result)


def _text_of(result: CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        resource_text = getattr(getattr(block, "resource", None), "text", None)
        if isinstance(text, str):
            parts.append(text)
        elif isinstance(resource_text, str):
            parts.append(resource_text)
        else:
            # Images, audio and links mean nothing to the Executor's text model: say they were left out.
            parts.append(f"[{getattr(block, 'type', 'content')} omitted]")
    return "\n".join(parts)


# --- Sessions and errors ---------------------------------------------------------------------------


def request_headers(server: McpServer, client_id: str | None) -> dict[str, str]:
    """The headers configuration gives this server: values of the named app settings, and the identity's token."""
    headers: dict[str, str] = {}
    for header, setting in server.headers.items():
        value = os.environ.get(setting)
        if not value:
            raise ToolFailure(
                ErrorCode.CONFIG_ERROR, f"MCP server {server.name}: app setting {setting} (header {header}) is not set"
            )
        headers[header] = value
    if server.auth == "managed_identity" and server.scope:
        headers["Authorization"] = f"Bearer {_token(server.name, server.scope, client_id)}"
    return headers


_CREDENTIALS: dict[str | None, Any] = {}
_CREDENTIALS_LOCK = threading.Lock()


def _token(server: str, scope: str, client_id: str | None) -> str:
    from azure.core.exceptions import AzureError
    from azure.identity import DefaultAzureCredential

    with _CREDENTIALS_LOCK:
        # One credential per identity and process: it caches and refreshes its tokens itself.
        credential = _CREDENTIALS.get(client_id)
        if credential is None:
            credential = _CREDENTIALS[client_id] = DefaultAzureCredential(managed_identity_client_id=client_id)
    try:
        return str(credential.get_token(scope).token)
    except AzureError as exc:
        raise ToolFailure(
            ErrorCode.AUTH_FAILED, f"MCP server {server}: no token for its scope: {type(exc).__name__}"
        ) from exc


def _import_sdk() -> None:
    """Import the MCP SDK (seconds on a loaded machine) before a server's deadline starts, not inside it."""
    import httpx2  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
    import mcp.types  # noqa: F401
    from mcp import Client  # noqa: F401


@asynccontextmanager
async def _session(server: McpServer, headers: dict[str, str], statuses: list[int]) -> AsyncIterator[Client]:
    """One MCP session on one HTTP client; ``statuses`` collects the HTTP error statuses it met."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    async def record(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            statuses.append(response.status_code)

    http = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(server.timeout_s), event_hooks={"response": [record]}
    )
    async with http:
        transport = streamable_http_client(server.url, http_client=http)
        info = Implementation(name="durable-ai-jobs", version="1")
        async with Client(transport, cache=None, client_info=info, read_timeout_seconds=server.timeout_s) as client:
            # The SDK would check a result against the server's outputSchema with jsonschema's defaults
            # (Python's backtracking re): a server's schema is untrusted code. The result is data for the
            # model, checked by nothing that relies on its shape, so that check is not run.
            client.session.validate_tool_result = _no_output_check  # type: ignore[method-assign]
            yield client


async def _no_output_check(name: str, result: Any) -> None:
    """Stands in for the SDK's output-schema check of a tool result (see ``_session``)."""


def classify(exc: BaseException, server: McpServer, statuses: list[int]) -> ToolFailure:
    """The stable code of an MCP failure, its message naming the server (never its URL or headers)."""
    import httpx2
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED, INVALID_PARAMS, REQUEST_TIMEOUT

    leaf = _leaf(exc)
    who = f"MCP server {server.name}"
    if isinstance(leaf, ToolFailure):
        return leaf
    if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
        return ToolFailure(ErrorCode.TRANSIENT, f"{who} did not answer within {server.timeout_s:g} s")
    if isinstance(leaf, MCPError) and leaf.code == INVALID_PARAMS:
        return ToolFailure(
            ErrorCode.INVALID_INPUT, _cap(f"{who} rejected the arguments: {leaf.message}", MAX_ERROR_CHARS)
        )
    if isinstance(leaf, MCPError) and leaf.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
        return ToolFailure(ErrorCode.TRANSIENT, f"{who}: {_cap(leaf.message, 200)}")
    if statuses:
        return _from_status(who, statuses[-1])
    if isinstance(leaf, httpx2.TransportError):
        return ToolFailure(ErrorCode.TRANSIENT, f"{who} cannot be reached ({type(leaf).__name__})")
    if isinstance(leaf, MCPError):
        return ToolFailure(
            ErrorCode.UPSTREAM_ERROR, _cap(f"{who} answered with an error: {leaf.message}", MAX_ERROR_CHARS)
        )
    if isinstance(leaf, ValidationError):
        return ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{who} answered with a malformed message")
    logger.warning("%s failed unexpectedly", who, exc_info=exc)
    return ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{who} failed: {type(leaf).__name__}")


def _from_status(who: str, status: int) -> ToolFailure:
    if status in (401, 403):
        return ToolFailure(ErrorCode.AUTH_FAILED, f"{who} refused the credentials (HTTP {status})")
    if status == 404:
        return ToolFailure(ErrorCode.CONFIG_ERROR, f"{who} has no MCP endpoint at its configured url (HTTP 404)")
    if status == 429:
        return ToolFailure(ErrorCode.RATE_LIMITED, f"{who} is throttling calls (HTTP 429)")
    if status in (408, 502, 503, 504):
        return ToolFailure(ErrorCode.TRANSIENT, f"{who} is unavailable (HTTP {status})")
    return ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{who} answered HTTP {status}")


def _leaf(exc: BaseException) -> BaseException:
    # The SDK runs its transport in task groups: the cause is the first exception inside the groups.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine function to its end from sync code, on a fresh event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    # Called from inside an event loop (an async host): its thread cannot block on another loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp") as pool:
        return pool.submit(anyio.run, fn).result()
