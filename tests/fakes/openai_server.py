"""A fake OpenAI-compatible server on loopback: real HTTP, real SSE, scripted replies.

It speaks the wire protocol of the calls ``shared.providers.llm.openai`` makes, for the real ``openai`` client:
``POST .../chat/completions`` (plain and streamed, with the usage chunk) and ``POST .../responses``
(plain and streamed events), under any prefix (``/v1/...`` like OpenAI, ``/openai/v1/...`` like
Azure OpenAI). Replies are scripted per task: the provider's system message starts with
``prompt: <task>.<version>``, and the fake routes each request by that marker.

    with FakeOpenAI() as fake:
        fake.always(JsonReply({"sql": "SELECT 1", "tables": []}), task="write_sql")
        fake.script(rate_limited(retry_after_ms=50), task="plan")   # one-shot, consumed in order
        fake.always(JsonReply(plan_dict), task="plan")
        ... point the app at fake.base_url (OpenAI-compatible) or fake.endpoint (Azure) ...
        assert fake.failures == []

A ``JsonReply`` adapts to the request: content for ``response_format``/``text.format`` requests, a
call of the forced function for ``tool_choice`` requests, SSE chunks when the request streams, the
Responses shape on ``/responses``. It also checks the request: a JSON schema or JSON mode was asked
for (or what ``expect`` names), and the scripted JSON has the required keys of a sent schema.
Broken expectations are answered with a 400 and listed in ``failures``.

A ``SchemaReply`` answers per the schema the request gave: the response format's (``json_schema``, or
llama.cpp's ``json_object`` with ``schema``), the forced tool's parameters, or in plain JSON mode the schema the
system message carries; it builds a value of that schema (``tests/fakes/schema_instances.py``, ``values`` pins
properties by name) and checks it against the schema in full. A request that gave no schema is a failure.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.providers.llm.prompts import task_of_text
from tests.fakes.loopback import LoopbackServer
from tests.fakes.schema_instances import Unbuildable, build_instance

FormatKind = Literal["json_schema", "json_object", "tool_call", "none"]


# --- Replies -------------------------------------------------------------------------------


@dataclass
class Reply:
    """Base of every scripted reply."""


@dataclass
class JsonReply(Reply):
    """A structured output. ``content`` is a dict, a pydantic model or a JSON string.

    ``usage`` is (prompt_tokens, completion_tokens); by default it is derived from the sizes of
    the request and the reply (about 4 characters a token). ``finish_reason`` "content_filter" or
    "length" ends the reply that way (Responses: status "incomplete"). ``chunks`` is how many SSE
    deltas a streamed reply is cut into; ``chunk_delay_s`` sleeps between them.
    ``expect`` names the output mode the request must use (default: any JSON mode).
    """

    content: Any
    model: str | None = None
    usage: tuple[int, int] | None = None
    finish_reason: str = "stop"
    chunks: int = 4
    chunk_delay_s: float = 0.0
    expect: FormatKind | None = None
    check_schema: bool = True
    # Where a stream that was asked for usage carries it: its own chunk (OpenAI), the finishing chunk (some
    # OpenAI-compatible servers), or nowhere (llama-cpp-python's server).
    usage_chunk: Literal["separate", "final", "none"] = "separate"


@dataclass
class SchemaReply(Reply):
    """A structured output built from the schema the request gave (see the module docstring).

    ``values`` pins properties by name (checked with the rest against the schema); ``expect`` names the output
    mode the request must use; ``chunks`` as for ``JsonReply``.
    """

    values: dict[str, Any] = field(default_factory=dict)
    expect: FormatKind | None = None
    model: str | None = None
    usage: tuple[int, int] | None = None
    chunks: int = 4


# How the provider puts a schema into the system message in JSON mode (``_json_mode_instructions``).
PROMPT_SCHEMA_MARKER = "conforms to this JSON schema:\n"


@dataclass
class TextReply(Reply):
    """Free text as content, with no checks (for invalid-output tests)."""

    text: str
    model: str | None = None
    usage: tuple[int, int] | None = None
    finish_reason: str = "stop"
    chunks: int = 3


@dataclass
class ToolCallReply(Reply):
    """A call of tool ``name`` with ``arguments``, whatever the request asked for."""

    name: str
    arguments: Any
    model: str | None = None
    usage: tuple[int, int] | None = None


@dataclass
class RefusalReply(Reply):
    """The model declines (structured-output refusal): ``refusal`` instead of content."""

    refusal: str = "I'm sorry, I can't help with that."
    model: str | None = None
    usage: tuple[int, int] | None = None


@dataclass
class ErrorReply(Reply):
    """An HTTP error with a JSON body (the OpenAI/Azure ``{"error": {...}}`` shape)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SlowReply(Reply):
    """Wait ``delay_s`` before sending ``then`` (for timeout tests)."""

    delay_s: float
    then: Reply


@dataclass
class StreamErrorReply(Reply):
    """Start a stream, send ``deltas`` text pieces (``chunk_delay_s`` apart), then an error inside the stream."""

    deltas: list[str]
    code: str = "server_error"
    message: str = "The server had an error while processing your request."
    chunk_delay_s: float = 0.0


@dataclass
class CutStreamReply(Reply):
    """Start a chat stream, send ``deltas``, then end it without a finish reason.

    ``ending`` "done": ``data: [DONE]`` (llama.cpp's server when another request interrupts a running one);
    "drop": the connection breaks mid-body; "nothing": no chunk at all, then ``[DONE]`` (llama.cpp's answer to a
    prompt beyond its context window).
    """

    deltas: list[str]
    ending: Literal["done", "drop", "nothing"] = "done"


@dataclass
class PingReply(Reply):
    """Send SSE keep-alive comments (``: ping``) ``every_s`` apart, ``count`` times, then ``then``.

    How many were sent is in ``FakeOpenAI.pings_sent``: fewer than ``count`` means the client went away.
    """

    count: int
    every_s: float
    then: Reply


def _error_body(message: str, *, type_: str | None, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def rate_limited(*, retry_after_ms: int | None = None, retry_after_s: int | None = None) -> ErrorReply:
    """A 429 with ``retry-after-ms`` and/or ``retry-after`` headers, as Azure OpenAI sends them."""
    headers: dict[str, str] = {}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    body = _error_body(
        "Requests to the ChatCompletions_Create Operation have exceeded the rate limit. Please retry later.",
        type_="requests",
        code="429",
    )
    return ErrorReply(429, body, headers)


def server_error(status: int = 500) -> ErrorReply:
    """A 5xx in OpenAI's shape."""
    return ErrorReply(
        status, _error_body("The server had an error while processing your request.", type_="server_error", code=None)
    )


def auth_error(status: int = 401) -> ErrorReply:
    """A 401 (bad key or token) or 403 (no role assignment)."""
    message = "Access denied due to invalid subscription key or wrong API endpoint."
    if status == 403:
        message = "The principal lacks the required data action."
    return ErrorReply(status, _error_body(message, type_=None, code=str(status)))


def bad_request(message: str = "Invalid value for 'messages'.", *, param: str | None = None) -> ErrorReply:
    """A plain 400 invalid_request_error."""
    return ErrorReply(400, _error_body(message, type_="invalid_request_error", code=None, param=param))


def content_filter_error() -> ErrorReply:
    """Azure OpenAI's 400 when the prompt trips the content filter."""
    body = {
        "error": {
            "message": (
                "The response was filtered due to the prompt triggering Azure OpenAI's content management "
                "policy. Please modify your prompt and retry."
            ),
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {
                    "hate": {"filtered": False, "severity": "safe"},
                    "self_harm": {"filtered": False, "severity": "safe"},
                    "sexual": {"filtered": False, "severity": "safe"},
                    "violence": {"filtered": True, "severity": "high"},
                },
            },
        }
    }
    return ErrorReply(400, body)


def temperature_unsupported_error(value: object = 0.0) -> ErrorReply:
    """The 400 a reasoning model gives for any temperature but the default."""
    return ErrorReply(
        400,
        _error_body(
            f"Unsupported value: 'temperature' does not support {value} with this model. "
            "Only the default (1) value is supported.",
            type_="invalid_request_error",
            code="unsupported_value",
            param="temperature",
        ),
    )


def json_schema_unsupported_error() -> ErrorReply:
    """The 400 an older OpenAI-compatible server gives for a ``json_schema`` response format."""
    return ErrorReply(
        400,
        _error_body(
            "response_format type 'json_schema' is not supported by this server",
            type_="invalid_request_error",
            code=None,
            param="response_format",
        ),
    )


# --- Recorded requests ---------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request the fake received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    api: Literal["chat", "responses"]
    task: str | None

    @property
    def stream(self) -> bool:
        """Whether the client asked for SSE."""
        return bool(self.body.get("stream"))

    @property
    def format_kind(self) -> FormatKind:
        """Which output mode the request used."""
        return _format_kind(self.api, self.body)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema the request carried (response format or forced tool parameters)."""
        return _request_schema(self.api, self.body)[0]

    @property
    def strict(self) -> bool | None:
        """The ``strict`` flag sent with the schema."""
        return _request_schema(self.api, self.body)[1]

    @property
    def given_schema(self) -> tuple[str, dict[str, Any]] | None:
        """Where the request gave a schema for its output, and the schema (None: it gave none)."""
        if self.schema is not None:
            return self.format_kind, self.schema
        fmt = self.body.get("response_format") if self.api == "chat" else None
        if isinstance(fmt, dict) and isinstance(fmt.get("schema"), dict):
            return "json_object.schema", fmt["schema"]
        prompt = self.prompt_schema
        return None if prompt is None else ("prompt", prompt)

    @property
    def prompt_schema(self) -> dict[str, Any] | None:
        """The schema the system message carries (JSON mode), if any."""
        text = self.system_text
        at = text.rfind(PROMPT_SCHEMA_MARKER)
        if at < 0:
            return None
        line = text[at + len(PROMPT_SCHEMA_MARKER) :].split("\n", 1)[0]
        try:
            found = json.loads(line)
        except json.JSONDecodeError:
            return None
        return found if isinstance(found, dict) else None

    @property
    def system_text(self) -> str:
        """The system message (chat) or instructions (responses)."""
        if self.api == "responses":
            return str(self.body.get("instructions") or "")
        for message in self.body.get("messages", []):
            if message.get("role") in ("system", "developer"):
                return _message_text(message)
        return ""

    @property
    def user_text(self) -> str:
        """The user message(s)."""
        items = self.body.get("messages", []) if self.api == "chat" else self.body.get("input", [])
        if isinstance(items, str):
            return items
        return "\n".join(_message_text(m) for m in items if isinstance(m, dict) and m.get("role") == "user")


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _format_kind(api: str, body: dict[str, Any]) -> FormatKind:
    if body.get("tool_choice") and body.get("tools"):
        return "tool_call"
    fmt = body.get("response_format") if api == "chat" else (body.get("text") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        return fmt["type"]
    return "none"


def _forced_tool(api: str, body: dict[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return None
    name = (choice.get("function") or {}).get("name") if api == "chat" else choice.get("name")
    for tool in body.get("tools") or []:
        spec = tool.get("function", {}) if api == "chat" else tool
        if spec.get("name") == name:
            return spec
    return None


def _request_schema(api: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, bool | None]:
    tool = _forced_tool(api, body)
    if tool is not None:
        return tool.get("parameters"), tool.get("strict")
    if api == "chat":
        fmt = body.get("response_format") or {}
        spec = fmt.get("json_schema") or {} if fmt.get("type") == "json_schema" else {}
    else:
        fmt = (body.get("text") or {}).get("format") or {}
        spec = fmt if fmt.get("type") == "json_schema" else {}
    if not spec:
        return None, None
    return spec.get("schema"), spec.get("strict")


# --- The server ----------------------------------------------------------------------------


class FakeOpenAI:
    """Start with ``with FakeOpenAI() as fake:``; see the module docstring for scripting."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        supports_json_schema: bool = True,
        supports_temperature: bool = True,
        response_model: str | None = None,
        models: list[str] | None = None,
    ) -> None:
        """``api_key``: require ``Authorization: Bearer <key>`` (or ``api-key``); ``response_model``:
        the ``model`` every reply reports (default: echo the requested one);
        ``supports_temperature=False``: reject any ``temperature``, like reasoning models do."""
        self.api_key = api_key
        self.supports_json_schema = supports_json_schema
        self.supports_temperature = supports_temperature
        self.response_model = response_model
        # What ``GET /v1/models`` lists (OpenAI and OpenAI-compatible servers such as Ollama answer it).
        self.models = models if models is not None else ["gpt-4.1-mini"]
        self.requests: list[RecordedRequest] = []
        self.failures: list[str] = []
        self._queue: list[tuple[str | None, Reply]] = []
        self._defaults: dict[str | None, Reply] = {}
        self._lock = threading.Lock()
        self._loopback: LoopbackServer | None = None
        self.port = 0
        self._counter = 0
        # Keep-alive comments sent by ``PingReply`` replies.
        self.pings_sent = 0

    # --- lifecycle ---

    @property
    def endpoint(self) -> str:
        """Root URL, like an Azure OpenAI resource endpoint (the client appends ``/openai/v1/``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (``.../v1``), for ``OPENAI_BASE_URL``."""
        return f"{self.endpoint}/v1"

    def start(self) -> FakeOpenAI:
        """Listen on a free loopback port, in a background thread."""
        app = Starlette(routes=[Route("/{path:path}", self._dispatch, methods=["GET", "POST"])])
        self._loopback = LoopbackServer(app, name="fake-openai")
        self._loopback.start()
        self.port = self._loopback.port
        return self

    def stop(self) -> None:
        """Stop the server and wait for its thread."""
        if self._loopback is not None:
            self._loopback.stop()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- scripting ---

    def script(self, *replies: Reply, task: str | None = None) -> None:
        """Queue one-shot replies for ``task`` (None: any task), used in order before any default."""
        with self._lock:
            self._queue.extend((task, reply) for reply in replies)

    def always(self, reply: Reply, *, task: str | None = None) -> None:
        """The reply for ``task`` (None: any task) whenever no queued reply matches."""
        with self._lock:
            self._defaults[task] = reply

    def script_job(
        self, *, plan: Any = None, write_sql: Any = None, write_answer: Any = None, supervise: Any = None
    ) -> None:
        """Default ``JsonReply``s for the tasks of a whole job (dicts or pydantic models)."""
        for task, content in (
            ("plan", plan),
            ("write_sql", write_sql),
            ("write_answer", write_answer),
            ("supervise", supervise),
        ):
            if content is not None:
                self.always(content if isinstance(content, Reply) else JsonReply(content), task=task)

    def reset(self) -> None:
        """Forget scripts, defaults, requests and failures (to reuse one server across tests)."""
        with self._lock:
            self._queue.clear()
            self._defaults.clear()
            self.requests.clear()
            self.failures.clear()

    def requests_for(self, task: str) -> list[RecordedRequest]:
        """Requests whose prompt marker names ``task``."""
        with self._lock:
            return [r for r in self.requests if r.task == task]

    def _take(self, task: str | None) -> Reply | None:
        with self._lock:
            for index, (wanted, reply) in enumerate(self._queue):
                if wanted is None or wanted == task:
                    del self._queue[index]
                    return reply
            return self._defaults.get(task) or self._defaults.get(None)

    def _fail(self, message: str) -> JSONResponse:
        with self._lock:
            self.failures.append(message)
        return JSONResponse(
            _error_body(f"fake: {message}", type_="invalid_request_error", code="fake_expectation"), 400
        )

    # --- request handling ---

    def _authorized(self, headers: dict[str, str]) -> bool:
        given = headers.get("api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        return self.api_key is None or given == self.api_key

    def _list_models(self, request: Request) -> Response:
        """``GET /v1/models``: the OpenAI list shape."""
        if not self._authorized({k.lower(): v for k, v in request.headers.items()}):
            return _error_response(auth_error(401))
        data = [{"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _dispatch(self, request: Request) -> Response:
        path = request.url.path
        if request.method == "GET" and path.rstrip("/").endswith("/models"):
            return self._list_models(request)
        if path.endswith("/chat/completions"):
            api: Literal["chat", "responses"] = "chat"
        elif path.endswith("/responses"):
            api = "responses"
        else:
            return JSONResponse(_error_body(f"fake: no route {path}", type_="invalid_request_error", code="404"), 404)
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return self._fail("request body is not JSON")
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = RecordedRequest(path, headers, body, api, task_of_text(_all_text(api, body)))
        with self._lock:
            self.requests.append(recorded)
        if not self._authorized(headers):
            return _error_response(auth_error(401))
        if not self.supports_temperature and "temperature" in body:
            return _error_response(temperature_unsupported_error(body["temperature"]))
        if not self.supports_json_schema and recorded.format_kind == "json_schema" and not _forced_tool(api, body):
            return _error_response(json_schema_unsupported_error())
        reply = self._take(recorded.task)
        if reply is None:
            with self._lock:
                self.failures.append(f"no scripted reply for task {recorded.task!r}")
            return JSONResponse(_error_body(f"fake: unscripted task {recorded.task!r}", type_=None, code="fake"), 500)
        while isinstance(reply, SlowReply):
            await asyncio.sleep(reply.delay_s)
            reply = reply.then
        return self._respond(recorded, reply)

    def _respond(self, req: RecordedRequest, reply: Reply) -> Response:
        if isinstance(reply, ErrorReply):
            return _error_response(reply)
        if isinstance(reply, StreamErrorReply):
            return _sse(_stream_error_events(req, reply))
        if isinstance(reply, CutStreamReply):
            return _sse(_cut_stream(req, reply))
        if isinstance(reply, PingReply):
            return _sse(self._pings(req, reply))
        if isinstance(reply, SchemaReply):
            built = self._from_schema(req, reply)
            if isinstance(built, str):
                return self._fail(built)
            reply = built
        if isinstance(reply, JsonReply):
            problem = self._check(req, reply)
            if problem:
                return self._fail(problem)
        out = self._output(req, reply)
        if req.stream:
            events = _chat_stream(req, out) if req.api == "chat" else _responses_stream(req, out)
            return _sse(events)
        body = _chat_body(req, out) if req.api == "chat" else _responses_body(req, out)
        return JSONResponse(body)

    async def _pings(self, req: RecordedRequest, reply: PingReply) -> AsyncIterator[str]:
        """Keep-alive comments, then the reply's own events (streamed replies only)."""
        for _ in range(reply.count):
            yield ": ping\n\n"
            with self._lock:
                self.pings_sent += 1
            await asyncio.sleep(reply.every_s)
        then = self._respond(req, reply.then)
        assert isinstance(then, StreamingResponse)
        async for event in then.body_iterator:
            yield event if isinstance(event, str) else bytes(event).decode()

    def _from_schema(self, req: RecordedRequest, reply: SchemaReply) -> JsonReply | str:
        """The reply as a ``JsonReply`` of a value built from the request's schema, or what went wrong."""
        if reply.expect is not None and req.format_kind != reply.expect:
            return f"expected output mode {reply.expect}, the request used {req.format_kind}"
        given = req.given_schema
        if given is None:
            return "the request gave no schema (response format, tool parameters or system message)"
        try:
            content = build_instance(given[1], reply.values)
        except Unbuildable as exc:
            return f"cannot answer per the {given[0]} schema: {exc}"
        return JsonReply(content, model=reply.model, usage=reply.usage, chunks=reply.chunks, check_schema=False)

    def _check(self, req: RecordedRequest, reply: JsonReply) -> str | None:
        kind = req.format_kind
        if reply.expect is not None and kind != reply.expect:
            return f"expected output mode {reply.expect}, the request used {kind}"
        if reply.expect is None and kind == "none":
            return "the request asked for no JSON output mode (no response_format, text.format or tool_choice)"
        schema = req.schema
        content = _content_dict(reply.content)
        if reply.check_schema and schema is not None and isinstance(content, dict):
            missing = [k for k in schema.get("required", []) if k not in content]
            if missing:
                return f"scripted JSON lacks required keys {missing} of schema"
            if schema.get("additionalProperties") is False:
                extra = [k for k in content if k not in schema.get("properties", {})]
                if extra:
                    return f"scripted JSON has keys {extra} the strict schema does not allow"
        return None

    def _output(self, req: RecordedRequest, reply: Reply) -> _Out:
        with self._lock:
            self._counter += 1
            ident = self._counter
        model = getattr(reply, "model", None) or self.response_model or str(req.body.get("model", "fake-model"))
        tool_name: str | None = None
        if isinstance(reply, ToolCallReply):
            text = _as_text(reply.arguments)
            tool_name = reply.name
        elif isinstance(reply, JsonReply):
            text = _as_text(reply.content)
            forced = _forced_tool(req.api, req.body)
            tool_name = forced.get("name") if forced else None
        elif isinstance(reply, TextReply):
            text = reply.text
        elif isinstance(reply, RefusalReply):
            text = ""
        else:
            raise TypeError(f"unknown reply {reply!r}")
        usage = getattr(reply, "usage", None) or (
            max(1, len(json.dumps(req.body)) // 4),
            max(1, len(text) // 4),
        )
        return _Out(
            refusal=reply.refusal if isinstance(reply, RefusalReply) else None,
            ident=ident,
            model=model,
            text=text,
            tool_name=tool_name,
            finish=getattr(reply, "finish_reason", "stop"),
            usage=usage,
            chunks=max(1, getattr(reply, "chunks", 3)),
            chunk_delay_s=getattr(reply, "chunk_delay_s", 0.0),
            usage_chunk=getattr(reply, "usage_chunk", "separate"),
        )


@dataclass
class _Out:
    refusal: str | None
    ident: int
    model: str
    text: str
    tool_name: str | None
    finish: str
    usage: tuple[int, int]
    chunks: int
    chunk_delay_s: float
    usage_chunk: str = "separate"

    def pieces(self) -> list[str]:
        size = max(1, -(-len(self.text) // self.chunks))
        return [self.text[i : i + size] for i in range(0, len(self.text), size)] or [""]


def _all_text(api: str, body: dict[str, Any]) -> str:
    parts: list[str] = []
    if api == "responses":
        parts.append(str(body.get("instructions") or ""))
        items = body.get("input")
        if isinstance(items, str):
            parts.append(items)
        elif isinstance(items, list):
            parts.extend(_message_text(m) for m in items if isinstance(m, dict))
    else:
        parts.extend(_message_text(m) for m in body.get("messages", []) if isinstance(m, dict))
    return "\n".join(parts)


def _content_dict(content: Any) -> Any:
    if isinstance(content, BaseModel):
        return content.model_dump(mode="json")
    if isinstance(content, str):
        try:
            return json.loads(content)
        except json.JSONDecodeError:
            return content
    return content


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, BaseModel):
        return content.model_dump_json()
    return json.dumps(content)


def _error_response(reply: ErrorReply) -> JSONResponse:
    return JSONResponse(reply.body, reply.status, headers=reply.headers)


def _sse(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers={"cache-control": "no-cache"})


def _event(data: dict[str, Any], name: str | None = None) -> str:
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


# --- Chat Completions shapes ---


def _chat_usage(out: _Out) -> dict[str, int]:
    return {"prompt_tokens": out.usage[0], "completion_tokens": out.usage[1], "total_tokens": sum(out.usage)}


def _chat_body(req: RecordedRequest, out: _Out) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": out.text or None, "refusal": out.refusal}
    finish = out.finish
    if out.tool_name is not None:
        message["content"] = None
        message["tool_calls"] = [
            {"id": f"call_{out.ident}", "type": "function", "function": {"name": out.tool_name, "arguments": out.text}}
        ]
        finish = "tool_calls" if finish == "stop" else finish
    if finish == "content_filter":
        message["content"] = None
    return {
        "id": f"chatcmpl-fake{out.ident}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": out.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _chat_usage(out),
    }


def _chunk(
    out: _Out, delta: dict[str, Any], finish: str | None = None, usage: bool = False, choices: bool = True
) -> str:
    data: dict[str, Any] = {
        "id": f"chatcmpl-fake{out.ident}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": out.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}] if choices else [],
    }
    if usage:
        data["usage"] = _chat_usage(out)
    return _event(data)


async def _chat_stream(req: RecordedRequest, out: _Out) -> AsyncIterator[str]:
    yield _chunk(out, {"role": "assistant", "content": ""})
    finish = out.finish
    if out.refusal is not None:
        yield _chunk(out, {"refusal": out.refusal})
    elif finish != "content_filter":
        for index, piece in enumerate(out.pieces()):
            if out.chunk_delay_s:
                await asyncio.sleep(out.chunk_delay_s)
            if out.tool_name is not None:
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if index == 0:
                    call.update(id=f"call_{out.ident}", type="function")
                    call["function"]["name"] = out.tool_name
                yield _chunk(out, {"tool_calls": [call]})
            else:
                yield _chunk(out, {"content": piece})
    if out.tool_name is not None and finish == "stop":
        finish = "tool_calls"
    asked = bool((req.body.get("stream_options") or {}).get("include_usage"))
    yield _chunk(out, {}, finish, usage=asked and out.usage_chunk == "final")
    if asked and out.usage_chunk == "separate":
        yield _chunk(out, {}, usage=True, choices=False)
    yield "data: [DONE]\n\n"


# --- Responses shapes ---


def _responses_item(out: _Out) -> dict[str, Any]:
    if out.refusal is not None:
        return {
            "type": "message",
            "id": f"msg_{out.ident}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": out.refusal}],
        }
    if out.tool_name is not None:
        return {
            "type": "function_call",
            "id": f"fc_{out.ident}",
            "call_id": f"call_{out.ident}",
            "name": out.tool_name,
            "arguments": out.text,
            "status": "completed",
        }
    return {
        "type": "message",
        "id": f"msg_{out.ident}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": out.text, "annotations": [], "logprobs": []}],
    }


def _responses_body(req: RecordedRequest, out: _Out, *, status: str | None = None) -> dict[str, Any]:
    incomplete = None
    if out.finish == "content_filter":
        incomplete = {"reason": "content_filter"}
    elif out.finish == "length":
        incomplete = {"reason": "max_output_tokens"}
    final_status = status or ("incomplete" if incomplete else "completed")
    output = [] if out.finish == "content_filter" or final_status == "in_progress" else [_responses_item(out)]
    return {
        "id": f"resp_fake{out.ident}",
        "object": "response",
        "created_at": int(time.time()),
        "status": final_status,
        "model": out.model,
        "output": output,
        "incomplete_details": incomplete,
        "error": None,
        "parallel_tool_calls": True,
        "tool_choice": req.body.get("tool_choice", "auto"),
        "tools": req.body.get("tools", []),
        "temperature": req.body.get("temperature"),
        "text": req.body.get("text"),
        "store": False,
        "usage": None
        if final_status == "in_progress"
        else {
            "input_tokens": out.usage[0],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": out.usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(out.usage),
        },
    }


async def _responses_stream(req: RecordedRequest, out: _Out) -> AsyncIterator[str]:
    seq = 0

    def ev(data: dict[str, Any]) -> str:
        nonlocal seq
        seq += 1
        data["sequence_number"] = seq
        return _event(data, data["type"])

    yield ev({"type": "response.created", "response": _responses_body(req, out, status="in_progress")})
    if out.refusal is not None:
        item = _responses_item(out)
        yield ev({"type": "response.output_item.added", "output_index": 0, "item": dict(item, content=[])})
        yield ev(
            {
                "type": "response.refusal.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": out.refusal,
            }
        )
        yield ev({"type": "response.output_item.done", "output_index": 0, "item": item})
    elif out.finish != "content_filter":
        item = _responses_item(out)
        item_id = item["id"]
        started = dict(item, status="in_progress")
        if out.tool_name is not None:
            started["arguments"] = ""
        else:
            started["content"] = []
        yield ev({"type": "response.output_item.added", "output_index": 0, "item": started})
        delta_type = (
            "response.function_call_arguments.delta" if out.tool_name is not None else "response.output_text.delta"
        )
        for piece in out.pieces():
            if out.chunk_delay_s:
                await asyncio.sleep(out.chunk_delay_s)
            data: dict[str, Any] = {"type": delta_type, "item_id": item_id, "output_index": 0, "delta": piece}
            if out.tool_name is None:
                data.update(content_index=0, logprobs=[])
            yield ev(data)
        yield ev({"type": "response.output_item.done", "output_index": 0, "item": item})
    final = _responses_body(req, out)
    kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
    yield ev({"type": kind, "response": final})


async def _stream_error_events(req: RecordedRequest, reply: StreamErrorReply) -> AsyncIterator[str]:
    model = str(req.body.get("model", "fake-model"))
    if req.api == "chat":
        for piece in reply.deltas:
            if reply.chunk_delay_s:
                await asyncio.sleep(reply.chunk_delay_s)
            yield _event(
                {
                    "id": "chatcmpl-fake-err",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                }
            )
        yield _event({"error": {"message": reply.message, "type": "server_error", "code": reply.code}})
        return
    seq = 0
    for piece in reply.deltas:
        seq += 1
        if reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
        yield _event(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_err",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
                "sequence_number": seq,
            },
            "response.output_text.delta",
        )
    yield _event(
        {"type": "error", "code": reply.code, "message": reply.message, "param": None, "sequence_number": seq + 1},
        "error",
    )


async def _cut_stream(req: RecordedRequest, reply: CutStreamReply) -> AsyncIterator[str]:
    model = str(req.body.get("model", "fake-model"))

    def chunk(delta: dict[str, Any]) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        data = {"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 0, "model": model}
        return _event(data | {"choices": [choice]})

    if reply.ending != "nothing":
        yield chunk({"role": "assistant", "content": ""})
        for piece in reply.deltas:
            yield chunk({"content": piece})
    if reply.ending == "drop":
        raise ConnectionResetError("fake: the connection drops mid-stream")
    yield "data: [DONE]\n\n"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running ``FakeOpenAI`` (import this fixture into a conftest to use it)."""
    with FakeOpenAI() as fake:
        yield fake
