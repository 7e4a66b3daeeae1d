"""The real LLM provider: Azure OpenAI (v1 endpoint), OpenAI, or any OpenAI-compatible server.

One class, ``OpenAIChatProvider``, talks to all three through the plain ``openai.OpenAI`` client
(Azure OpenAI via ``base_url=<endpoint>/openai/v1/``; no ``api-version``, no Azure-specific client).
``build_llm_provider(settings)`` picks the endpoint, the credential and the API from settings and
makes no network or credential call; the first token is fetched on the first request.

Decisions (documented here because callers depend on them):

- API: Chat Completions by default; the Responses API with ``LLM_API=responses`` (``store=false``,
  stateless, so the two are interchangeable).
- Structured output (``LLM_OUTPUT_MODE``): ``auto`` (default) asks for a JSON schema
  (``response_format``/``text.format`` of type ``json_schema``, ``strict`` when the pydantic schema can
  be made strict, see ``output_schema``); when the endpoint refuses it (judged by the error's content,
  any 4xx/5xx: llama.cpp answers a 500), it falls back, remembered per model of this provider (one
  provider per endpoint): on OpenAI-compatible servers to llama.cpp's grammar-constrained
  ``{"type": "json_object", "schema": ...}``, then to validated JSON mode (``json_object`` plus the
  schema in the system message). ``json_schema`` and ``json_mode``
  force one; ``tool_call`` forces a function call whose parameters are the schema (for servers that
  do tools but not response formats). Whatever the mode, a reply carrying a call to that function
  instead of content is accepted; a call to any other tool is a BAD_REQUEST.
- An agent's output schema (``request.output_schema``, see shaped.py): the same modes carry a schema whose
  text field is that object (``shaped_output_schema``; strict only when the agent's schema requires every
  property), OpenAI-compatible servers also get it in the system message, and the reply's object is checked
  against the agent's schema before its JSON text fills the field. A refusal that blames the schema, or comes
  in a mode this model served before, is ``OUTPUT_SCHEMA_REFUSED`` (not a refused mode: the model keeps it).
- Output that is not valid JSON or does not validate against ``request.output_type`` is a
  ``ProviderError(BAD_REQUEST)``: not retryable, because the same prompt at the same temperature
  mostly repeats the same output; the orchestrator may fall back to another model. Output cut at
  ``max_tokens`` is BAD_REQUEST too, saying so, also when the server hides it behind another
  ``finish_reason`` (llama.cpp says "tool_calls"): unparseable output at the token limit is a cut.
  A failed call's usage rides on the ``ProviderError`` (``usage``, ``model_used``): it was spent.
  A refusal or ``finish_reason=content_filter`` is CONTENT_FILTERED.
- Errors: 429 → RATE_LIMITED (``retry_after_ms`` from ``retry-after-ms``, else ``retry-after``
  seconds or HTTP date); timeouts (the SDK's, a 408, or the call's overall deadline while
  streaming) → MODEL_TIMEOUT; Azure's 400 ``content_filter`` → CONTENT_FILTERED; 401/403 and
  credential failures → AUTH_FAILED; a 404 on the Responses API → CONFIG_ERROR naming the path and
  ``LLM_API=chat``; other 4xx → BAD_REQUEST; 5xx, connection errors (naming the URL and the cause, and
  whether the stream had started; retried no sooner than ``UNREACHABLE_RETRY_MS``, to outlast a restart),
  failed Responses and errors inside a stream → UPSTREAM_ERROR. A chat stream that ends without a finish
  reason (``[DONE]`` or a dropped connection) was cut by the server, not finished by the model: UPSTREAM_ERROR
  (retried), never validated as output; with no chunk at all it is BAD_REQUEST naming the context window
  (llama.cpp's refusal of a too-long prompt).
  The SDK's own retries are off (``max_retries=0``): the orchestrator owns retries.
- ``model_used``: on Azure, the deployment name that was called (Azure reports the underlying model
  name in ``model``, which is not what a user configures or allow-lists); elsewhere the ``model``
  the response reports (for OpenAI a dated snapshot, priced by its prefix), else the requested one.
- Streaming: every call streams (SSE), so giving up (deadline, timeout) closes the connection and a
  single-slot local server stops generating instead of queueing the retry. ``timeout_s`` is the whole call's
  deadline whatever the server sends: keep-alive comments restart httpx's read timeout, so a watchdog cuts the
  connection when it passes (deadline.py). The output is buffered
  and the JSON parsed once, at the end. When the stream reports no usage (llama.cpp ignores
  ``include_usage``), tokens are estimated from the text, calibrated per model (usage.py), and the response
  says so (``usage_estimated``).
  With ``request.on_delta`` set, ``on_delta`` gets prose, like the offline provider's: the decoded text of
  the output type's first ``str`` field (``AnswerResult.answer``) as it arrives, picked out of the
  JSON deltas by an incremental scanner (``JsonTextFieldStream``); output types without a ``str``
  field get the raw JSON deltas. Chat streams ask for usage with ``stream_options.include_usage``.
- Capability fallbacks (each once per provider and model, remembered): refused output modes (in
  "auto" mode, above); ``temperature`` rejected (reasoning models take only the default) → sent no more for
  that model. Both re-send within the same call's deadline; any other 400 is final.
- Token limit parameter: ``max_completion_tokens`` for Azure OpenAI and OpenAI, ``max_tokens`` for
  other OpenAI-compatible servers (Ollama, LM Studio, vLLM, llama.cpp), which know that one best.
"""

from __future__ import annotations

import copy
import email.utils
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import httpx
import openai
from azure.core.exceptions import ClientAuthenticationError
from pydantic import BaseModel, ValidationError

from shared.jobs.contracts import ErrorCode, ProviderError, Usage
from shared.jobs.tokens import estimate_tokens
from shared.providers.interfaces import LLMRequest, LLMResponse, T
from shared.providers.llm.deadline import events_within
from shared.providers.llm.prompts import PromptError, RenderedPrompt, render_prompt
from shared.providers.llm.shaped import check_output_schema, requires_all, shape_reply, wire_schema
from shared.providers.llm.usage import TokenCalibration

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)

AZURE_OPENAI_SCOPE = "https://cognitiveservices.azure.com/.default"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"

ApiKind = Literal["chat", "responses"]
OutputMode = Literal["auto", "json_schema", "json_mode", "tool_call"]
# What is actually sent: the settings' modes plus llama.cpp's shape of a schema, a ``json_object`` response
# format carrying ``schema`` (grammar-constrained output), tried in "auto" mode on OpenAI-compatible servers.
WireMode = Literal["json_schema", "json_object_schema", "json_mode", "tool_call"]
_AUTO_CHAIN: dict[str, tuple[WireMode, ...]] = {
    "azure_openai": ("json_schema", "json_mode"),
    "openai": ("json_schema", "json_mode"),
    "openai_compatible": ("json_schema", "json_object_schema", "json_mode"),
}
EndpointKind = Literal["azure_openai", "openai", "openai_compatible"]

# Keywords that strict structured output does not accept everywhere (Azure lags OpenAI here);
# pydantic validates them after the call anyway.
_STRICT_DROP = frozenset(
    {
        "default",
        "title",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "examples",
    }
)


# --- Output schemas ------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSchema:
    """The JSON schema sent for an output type, and whether it is sent as strict."""

    name: str
    schema: dict[str, Any]
    strict: bool
    full_schema: dict[str, Any]


class _NotStrict(Exception):
    pass


# Keywords strict mode cannot express at all: a schema using one is sent as non-strict.
_STRICT_UNSUPPORTED = frozenset({"prefixItems", "patternProperties", "propertyNames", "if", "then", "else"})
# What makes a non-object schema typed enough for strict mode.
_STRICT_TYPED = ("type", "anyOf", "allOf", "enum", "const", "$defs")


def _strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        # Strict mode rejects siblings of $ref.
        return {"$ref": node["$ref"]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _STRICT_DROP:
            _strict_entry(out, key, value)
    if out.get("type") == "object" or "properties" in out:
        _close_object(out)
    elif not any(k in out for k in _STRICT_TYPED):
        raise _NotStrict("untyped value")
    return out


def _strict_entry(out: dict[str, Any], key: str, value: Any) -> None:
    """Put one keyword of a schema into ``out`` in its strict form, or raise ``_NotStrict``."""
    if key in _STRICT_UNSUPPORTED:
        raise _NotStrict(key)
    if key in ("properties", "$defs"):
        out[key] = {name: _strictify(sub) for name, sub in value.items()}
    elif key == "items" and isinstance(value, list):
        raise _NotStrict("tuple items")
    elif key in ("items", "anyOf", "allOf", "not"):
        out[key] = _strictify(value)
    elif key == "oneOf":
        out["anyOf"] = _strictify(value)
    else:
        out[key] = value


def _close_object(out: dict[str, Any]) -> None:
    """Make an object schema strict: closed, with every property required; open objects cannot be."""
    extra = out.get("additionalProperties")
    if "properties" not in out or (extra is not None and extra is not False):
        raise _NotStrict("open object")
    out["type"] = "object"
    out["additionalProperties"] = False
    out["required"] = list(out["properties"])


_SCHEMA_CACHE: dict[type[BaseModel], OutputSchema] = {}


def output_schema(output_type: type[BaseModel]) -> OutputSchema:
    """The schema for ``output_type``: strict when every object in it is closed and typed.

    Strict mode needs every property required and no open objects, so optional fields stay
    nullable and fields with a non-null default become required. Types with an open
    ``dict[str, Any]`` (the plan's step inputs) are sent as a non-strict schema.
    """
    cached = _SCHEMA_CACHE.get(output_type)
    if cached is not None:
        return cached
    full = output_type.model_json_schema()
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", output_type.__name__)[:64] or "output"
    try:
        result = OutputSchema(name, _strictify(copy.deepcopy(full)), True, full)
    except _NotStrict:
        result = OutputSchema(name, full, False, full)
    _SCHEMA_CACHE[output_type] = result
    return result


# The name an agent's output schema is sent under (``response_format.json_schema.name``).
SHAPED_SCHEMA_NAME = "agent_output"


def shaped_output_schema(output_type: type[BaseModel], agent_schema: dict[str, Any]) -> OutputSchema:
    """The schema sent when ``output_type``'s text field must hold an object of an agent's output schema.

    Strict only when the agent's schema already requires every property (see ``shaped.requires_all``) and
    strict mode can express it; else sent as non-strict. Raises ``ProviderError(OUTPUT_SCHEMA_REFUSED)``
    for a schema too large or too deep to send.
    """
    check_output_schema(agent_schema)
    field = stream_field(output_type)
    if field is None:
        raise ProviderError(ErrorCode.INVALID_INPUT, f"{output_type.__name__} has no text field for an output schema")
    full = wire_schema(output_type, field, agent_schema)
    if requires_all(agent_schema):
        try:
            return OutputSchema(SHAPED_SCHEMA_NAME, _strictify(copy.deepcopy(full)), True, full)
        except _NotStrict:
            pass
    return OutputSchema(SHAPED_SCHEMA_NAME, full, False, full)


# Item counts a grammar may keep: small ones cost a few rules, and they stop a small model that repeats a list item
# (a plan's step) until max_tokens cuts it.
_GRAMMAR_MAX_ITEMS = 16
# String lengths a grammar may keep (one rule per character): they stop a small model that repeats itself inside a
# string (Gemma 3 270M wrote a plan step's title until max_tokens).
_GRAMMAR_MAX_LENGTH = 400


def _grammar_safe(node: Any) -> Any:
    """The schema without length and pattern bounds, or large counts, for servers that compile it to a grammar.

    llama.cpp expands ``maxLength: 20000`` into 20,000 nested rules and dies on it; pydantic checks the
    bounds after the call anyway. Item counts up to ``_GRAMMAR_MAX_ITEMS`` and lengths up to ``_GRAMMAR_MAX_LENGTH``
    stay.
    """
    if isinstance(node, list):
        return [_grammar_safe(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("minItems", "maxItems") and isinstance(value, int) and 0 <= value <= _GRAMMAR_MAX_ITEMS:
            out[key] = value
            continue
        if key == "maxLength" and isinstance(value, int) and 0 <= value <= _GRAMMAR_MAX_LENGTH:
            out[key] = value
            continue
        if key in _STRICT_DROP or key == "description":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _grammar_safe(sub) for name, sub in value.items()}
        else:
            out[key] = _grammar_safe(value)
    return out


def _json_mode_instructions(schema: OutputSchema) -> str:
    return (
        "\n\nYour whole reply must be one JSON object, with no text around it, that conforms to this "
        f"JSON schema:\n{json.dumps(schema.full_schema, separators=(',', ':'))}"
    )


def _format_instructions(schema: OutputSchema, mode: WireMode, kind: EndpointKind, shaped: bool) -> str:
    """What the system message says about the output's shape, beyond the prompt file."""
    if mode == "json_mode":
        return _json_mode_instructions(schema)
    if shaped and kind == "openai_compatible" and mode in ("json_schema", "json_object_schema"):
        # OpenAI and Azure OpenAI show a json_schema response format to the model; OpenAI-compatible servers
        # (vLLM, Ollama, llama.cpp) only turn it into a grammar, so the model would never read the agent's
        # field names' meaning (descriptions): the schema goes into the prompt as well (it is bounded).
        return _json_mode_instructions(schema)
    # Otherwise the schema is a grammar (json_object_schema) or the server's own structured output: it constrains
    # every token, and the prompt file says the reply's shape in words. Measured on Gemma 3 270M, the plan schema
    # alone was 1,650 of a planning prompt's 4,900 tokens.
    return ""


# Words of an error that blames the schema itself rather than the response format (OpenAI: "Invalid schema for
# response_format 'agent_output': In context=(...), ...").
_BAD_SCHEMA_WORDS = ("invalid schema", "invalid_json_schema", "invalid json schema", "schema is invalid")


def _names_bad_schema(exc: openai.APIStatusError) -> bool:
    code, message = _error_detail(exc)
    text = f"{code} {message}".lower()
    return any(word in text for word in _BAD_SCHEMA_WORDS)


def _schema_refused(exc: openai.APIStatusError) -> ProviderError:
    _code, message = _error_detail(exc)
    return ProviderError(
        ErrorCode.OUTPUT_SCHEMA_REFUSED,
        f"the LLM endpoint refused the output schema ({exc.status_code}): {message}"[:1500],
    )


# --- Error mapping -------------------------------------------------------------------------


def _retry_after_ms(headers: Any) -> int | None:
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0, int(float(raw_ms)))
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(0, int(float(raw) * 1000))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                return None
            return max(0, int((when - datetime.now(UTC)).total_seconds() * 1000))
    return None


def _error_detail(exc: openai.APIError) -> tuple[str | None, str]:
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("innererror")
    inner_code = inner.get("code") if isinstance(inner, dict) else None
    code = exc.code or (str(inner_code) if inner_code else None)
    return code, exc.message


def _is_content_filter(code: str | None, message: str, body: object) -> bool:
    if code and code.lower() in ("content_filter", "responsibleaipolicyviolation", "content_filtered"):
        return True
    if isinstance(body, dict):
        inner = body.get("innererror")
        if isinstance(inner, dict) and str(inner.get("code", "")).lower() == "responsibleaipolicyviolation":
            return True
    return "content management policy" in message.lower()


def _refuses_output_mode(exc: openai.APIStatusError, mode: WireMode) -> bool:
    """Whether an error (any 4xx/5xx: llama.cpp answers a 500) says the server cannot do this output mode.

    Judged by content, not status: the message, the body or ``param`` names the response format (or,
    for tool calls, the tools) the request used.
    """
    if exc.status_code in (401, 403, 408, 429):
        return False
    code, message = _error_detail(exc)
    if _is_content_filter(code, message, exc.body):
        return False
    text = (message + " " + json.dumps(exc.body, default=str)).lower()
    param = (exc.param or "").lower()
    if mode == "tool_call":
        return "tool" in text or param.startswith("tool")
    mentions_format = any(word in text for word in ("json_schema", "response_format", "text.format", "schema"))
    return mentions_format or param in ("response_format", "text.format", "text")


def _rejects_temperature(exc: openai.APIStatusError) -> bool:
    """Whether a 400 says this model takes no ``temperature`` (reasoning models)."""
    return (exc.param or "").lower() == "temperature" or (
        "temperature" in exc.message.lower() and "unsupported" in exc.message.lower()
    )


def _request_url(exc: BaseException) -> str | None:
    """The URL of the request an SDK or httpx error belongs to (None when it has none)."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:  # httpx raises when an error was built without its request
        return None
    url = getattr(request, "url", None)
    return str(url) if url is not None else None


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of a connection failure, e.g. ``ConnectError: [Errno 111] Connection refused``."""
    inner: BaseException = exc
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    text = str(inner) or type(inner).__name__
    return f"{type(inner).__name__}: {text}"


def map_openai_error(
    exc: BaseException, *, model: str, timeout_s: float, api: ApiKind = "chat", started: bool = False
) -> ProviderError:
    """Classify an exception from the openai SDK, httpx (mid-stream) or the credential as a ``ProviderError``.

    ``started``: the response had begun (a stream was open), so a broken connection is the server
    dying or dropping it mid-answer, not an endpoint that cannot be reached.
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ClientAuthenticationError):
        return ProviderError(ErrorCode.AUTH_FAILED, f"could not get a token for Azure OpenAI: {exc.message}")
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return ProviderError(ErrorCode.MODEL_TIMEOUT, f"model {model!r} did not answer within {timeout_s:g}s")
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return _connection_error(exc, started=started)
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc, model=model, api=api)
    if isinstance(exc, openai.APIError):
        return _stream_error(exc)
    if isinstance(exc, httpx.HTTPError):
        return ProviderError(ErrorCode.UPSTREAM_ERROR, f"the LLM call failed: {_root_cause(exc)}"[:1500])
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"LLM call failed: {type(exc).__name__}: {exc}"[:1500])


# The least wait before retrying a server that refused the connection or broke it: a local server that restarts
# (llama.cpp loads a small model in a few seconds) is back before the policy's tries run out (3 tries: 10 s).
UNREACHABLE_RETRY_MS = 5_000


def _connection_error(exc: BaseException, *, started: bool) -> ProviderError:
    """A connection that could not be made, or (``started``) broke while the answer streamed."""
    url = _request_url(exc) or "the LLM endpoint"
    if started:
        message = f"the connection to {url} broke mid-stream ({_root_cause(exc)}); the server may have died"
    else:
        message = f"could not reach the LLM endpoint {url}: {_root_cause(exc)}"
    return ProviderError(ErrorCode.UPSTREAM_ERROR, message[:1500], retry_after_ms=UNREACHABLE_RETRY_MS)


def _status_error(exc: openai.APIStatusError, *, model: str, api: ApiKind) -> ProviderError:
    """An HTTP error status from the endpoint, classified by status and, for 400s, by its content."""
    status = exc.status_code
    code, message = _error_detail(exc)
    if status == 404:
        return _not_found_error(exc, code, message, model=model, api=api)
    detail = f"{status} from the LLM endpoint for {model!r}: {message}"[:1500]
    if status == 429:
        return ProviderError(ErrorCode.RATE_LIMITED, detail, retry_after_ms=_retry_after_ms(exc.response.headers))
    if status in (401, 403):
        return ProviderError(ErrorCode.AUTH_FAILED, detail)
    if status == 408:
        return ProviderError(ErrorCode.MODEL_TIMEOUT, detail)
    if status >= 500:
        return ProviderError(ErrorCode.UPSTREAM_ERROR, detail)
    if _is_content_filter(code, message, exc.body):
        return ProviderError(ErrorCode.CONTENT_FILTERED, detail)
    return ProviderError(ErrorCode.BAD_REQUEST, detail)


def _not_found_error(
    exc: openai.APIStatusError, code: str | None, message: str, *, model: str, api: ApiKind
) -> ProviderError:
    """A 404: a server without the Responses API, or a wrong model name or base URL."""
    url = _request_url(exc) or "the endpoint"
    about_model = any(word in f"{code} {message}".lower() for word in ("deployment", "model"))
    if api == "responses" and not about_model:
        return ProviderError(
            ErrorCode.CONFIG_ERROR,
            f"the LLM endpoint has no Responses API (404 at POST {url}); set LLM_API=chat for servers "
            "that only speak Chat Completions (llama.cpp, Ollama, LM Studio)",
        )
    return ProviderError(
        ErrorCode.BAD_REQUEST,
        f"404 at POST {url} for {model!r}: {message}; check the model name and that OPENAI_BASE_URL "
        "ends with the API root (usually /v1)"[:1500],
    )


def _stream_error(exc: openai.APIError) -> ProviderError:
    """An error sent inside an SSE stream (no HTTP status of its own)."""
    code, message = _error_detail(exc)
    if _is_content_filter(code, message, exc.body):
        return ProviderError(ErrorCode.CONTENT_FILTERED, f"content filter: {message}"[:1500])
    if code and "rate_limit" in code:
        return ProviderError(ErrorCode.RATE_LIMITED, f"rate limited mid-stream: {message}"[:1500])
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"the LLM stream failed: {message}"[:1500])


def _failed_response_error(code: str | None, message: str) -> ProviderError:
    lowered = (code or "").lower()
    if "rate_limit" in lowered:
        return ProviderError(ErrorCode.RATE_LIMITED, f"response failed: {message}")
    if "content_filter" in lowered:
        return ProviderError(ErrorCode.CONTENT_FILTERED, f"response failed: {message}")
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"response failed ({code}): {message}"[:1500])


# --- Streaming the text field ----------------------------------------------------------------


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class JsonTextFieldStream:
    """Feeds the decoded value of one top-level string field of a streamed JSON object to a sink.

    The scanner is incremental (each character is looked at once), so a growing answer reaches the
    user as prose, like the offline provider's, while the JSON is still parsed only once at the end.
    """

    def __init__(self, field: str, sink: Callable[[str], None]) -> None:
        """Stream the value of ``field`` to ``sink``."""
        self.field = field
        self.sink = sink
        self._depth = 0
        self._in_string = False
        self._escape = ""
        self._high_surrogate: int | None = None
        self._expect_key = False
        self._after_colon = False
        self._is_key = False
        self._emitting = False
        self._done = False
        self._key: list[str] = []
        self._current_key: str | None = None
        # The field's value is an object or array (an agent's output schema): its raw JSON text is passed on.
        self._raw_depth = 0
        self._raw_in_string = False
        self._raw_escape = False

    def feed(self, text: str) -> None:
        """Scan one raw delta and pass on any decoded text of the field."""
        out: list[str] = []
        for ch in text:
            if self._raw_depth:
                out.append(ch)
                self._raw_char(ch)
            else:
                self._scan(ch, out)
        if out:
            self.sink("".join(out))

    def _scan(self, ch: str, out: list[str]) -> None:
        """Follow the JSON structure by one character, decoding the field's text into ``out``."""
        if self._in_string:
            self._string_char(ch, out)
        elif ch == '"':
            self._in_string = True
            self._is_key = self._depth == 1 and self._expect_key
            self._emitting = not self._is_key and self._at_value()
            self._after_colon = False
            self._key = []
        elif ch in "{[":
            self._open(ch, out)
        elif ch in "}]":
            self._depth -= 1
        elif self._depth == 1 and ch == ",":
            self._expect_key = True
        elif self._depth == 1 and ch == ":":
            self._expect_key = False
            self._after_colon = True
        elif not ch.isspace():
            self._after_colon = False

    def _open(self, ch: str, out: list[str]) -> None:
        """An object or array starts: the field's own value (passed on raw), or structure to follow."""
        if self._at_value():
            self._raw_depth = 1
            out.append(ch)
            return
        self._depth += 1
        self._expect_key = ch == "{" and self._depth == 1
        self._after_colon = False

    def _at_value(self) -> bool:
        """Whether the scanner stands where the field's value starts."""
        return self._depth == 1 and self._after_colon and self._current_key == self.field and not self._done

    def _raw_char(self, ch: str) -> None:
        """Follow the raw value's strings and brackets, to see where it ends."""
        if self._raw_in_string:
            if self._raw_escape:
                self._raw_escape = False
            elif ch == "\\":
                self._raw_escape = True
            elif ch == '"':
                self._raw_in_string = False
        elif ch == '"':
            self._raw_in_string = True
        elif ch in "{[":
            self._raw_depth += 1
        elif ch in "}]":
            self._raw_depth -= 1
            if not self._raw_depth:
                self._done = True
                self._after_colon = False

    def _string_char(self, ch: str, out: list[str]) -> None:
        if self._escape:
            self._escape += ch
            if self._escape[1] == "u":
                if len(self._escape) < 6:
                    return
                try:
                    code = int(self._escape[2:], 16)
                except ValueError:
                    code = 0xFFFD
                self._escape = ""
                if 0xD800 <= code <= 0xDBFF:
                    self._high_surrogate = code
                    return
                if 0xDC00 <= code <= 0xDFFF and self._high_surrogate is not None:
                    code = 0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)
                self._high_surrogate = None
                self._char(chr(code), out)
                return
            decoded = _ESCAPES.get(self._escape[1], self._escape[1])
            self._escape = ""
            self._char(decoded, out)
        elif ch == "\\":
            self._escape = ch
        elif ch == '"':
            self._in_string = False
            if self._is_key:
                self._current_key = "".join(self._key)
            elif self._emitting:
                self._emitting = False
                self._done = True
        else:
            self._char(ch, out)

    def _char(self, ch: str, out: list[str]) -> None:
        if self._is_key:
            self._key.append(ch)
        elif self._emitting:
            out.append(ch)


def stream_field(output_type: type[BaseModel]) -> str | None:
    """The field whose text is streamed: the first ``str`` field of the output type (None: none)."""
    for name, info in output_type.model_fields.items():
        if info.annotation is str:
            return name
    return None


def _delta_sink(request: LLMRequest[Any], on_delta: Callable[[str], None]) -> Callable[[str], None]:
    field = stream_field(request.output_type)
    if field is None:
        return on_delta
    return JsonTextFieldStream(field, on_delta).feed


# --- The provider --------------------------------------------------------------------------


@dataclass
class _RawOutput:
    """What came back, before validation."""

    text: str
    finish: str | None = None
    refusal: str | None = None
    tool_name: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    model: str | None = None
    usage_seen: bool = False
    usage_estimated: bool = False
    # Set as the call goes, so a failure mid-call can still count what was spent.
    prompt_text: str = ""
    opened: bool = False
    received: list[str] = field(default_factory=list)

    def estimate_usage(self, calibration: TokenCalibration, model: str) -> None:
        """Count tokens from the text when the server reported none (it ignored ``include_usage``); else learn
        from its count how this model's estimates compare (usage.py)."""
        output = self.text or "".join(self.received)
        if self.usage_seen:
            calibration.learn(model, (self.prompt_text, output), (self.tokens_in, self.tokens_out))
            return
        self.tokens_in = calibration.estimate(model, self.prompt_text)
        self.tokens_out = calibration.estimate(model, output)
        self.usage_estimated = True

    def usage(self) -> Usage:
        """What this call spent, as far as is known."""
        return Usage(tokens_input=self.tokens_in, tokens_output=self.tokens_out, estimated=self.usage_estimated)


def _with_raw_control_characters(text: str, exc: ValidationError) -> Any | None:
    """The JSON a grammar let through with raw control characters (a newline) inside strings, parsed; else None.

    llama-cpp-python's JSON grammar allows them and Gemma 3 270M wrote one into an answer; they are content, not
    structure, so the reply is read as Python's lenient parser reads it. Any other invalid JSON stays invalid.
    """
    if not any(err["type"] == "json_invalid" and "control character" in err["msg"] for err in exc.errors()):
        return None
    try:
        return json.loads(text, strict=False)
    except ValueError:
        return None


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = re.sub(r"^```[a-zA-Z]*\s*", "", stripped)
        stripped = re.sub(r"\s*```$", "", stripped)
    return stripped


def _timed_out(model: str, timeout_s: float) -> Callable[[], ProviderError]:
    """The error of a call whose overall deadline passed while its answer streamed."""
    return lambda: ProviderError(ErrorCode.MODEL_TIMEOUT, f"model {model!r} did not finish within {timeout_s:g}s")


class OpenAIChatProvider:
    """An ``LLMProvider`` over the ``openai`` SDK (Chat Completions or Responses)."""

    def __init__(
        self,
        client: openai.OpenAI,
        *,
        default_model: str,
        endpoint_kind: EndpointKind,
        api: ApiKind = "chat",
        output_mode: OutputMode = "auto",
    ) -> None:
        """Wrap a configured client; ``client.max_retries`` should be 0."""
        self.client = client
        self.default_model = default_model
        self.endpoint_kind = endpoint_kind
        self.name = "azure_openai" if endpoint_kind == "azure_openai" else "openai"
        self.api = api
        self.output_mode = output_mode
        self.token_param = "max_tokens" if endpoint_kind == "openai_compatible" else "max_completion_tokens"
        # Output modes this endpoint refused, per model ("auto" mode); later calls skip them. The provider
        # is built per endpoint, so the key is (endpoint, model).
        self.refused_modes: dict[str, set[WireMode]] = {}
        # Output modes the endpoint accepted, per model: a later refusal in such a mode, for an agent's output
        # schema, is about that schema (OUTPUT_SCHEMA_REFUSED), not a mode to give up for the model.
        self.served_modes: dict[str, set[WireMode]] = {}
        # Reasoning models (o-series, gpt-5) reject any temperature but the default.
        self.no_temperature_models: set[str] = set()
        # How each model's token counts compare with the text estimate, for calls whose server reports none.
        self.calibration = TokenCalibration()

    @property
    def json_schema_unsupported(self) -> bool:
        """Whether the endpoint refused ``json_schema`` for any model."""
        return any("json_schema" in modes for modes in self.refused_modes.values())

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """Render the task's prompt, call the model, and validate its output."""
        model = request.model or self.default_model
        try:
            rendered = render_prompt(request.task, request.inputs)
        except (PromptError, ValueError) as exc:
            raise ProviderError(ErrorCode.INVALID_INPUT, f"cannot build the {request.task} prompt: {exc}") from exc
        if request.output_schema is None:
            schema = output_schema(request.output_type)
        else:
            schema = shaped_output_schema(request.output_type, request.output_schema)
        deadline = time.monotonic() + request.timeout_s
        raw: _RawOutput | None = None
        # At most one adjustment per capability (each refused output mode, temperature), then the error stands.
        for _ in range(5):
            mode = self._mode(model)
            holder = _RawOutput(text="")
            try:
                raw = self._call(request, rendered, schema, mode, model, deadline, holder)
                self.served_modes.setdefault(model, set()).add(mode)
                break
            except openai.APIStatusError as exc:
                self._adjust(exc, request, mode, model, holder)
            except (openai.OpenAIError, httpx.HTTPError, ClientAuthenticationError, ProviderError) as exc:
                raise self._failed(exc, request, model, holder) from exc
        if raw is None:
            raise ProviderError(ErrorCode.BAD_REQUEST, f"the LLM endpoint kept rejecting the request for {model!r}")
        model_used = model if self.endpoint_kind == "azure_openai" else (raw.model or model)
        raw.estimate_usage(self.calibration, model)
        if raw.usage_estimated:
            logger.info("the LLM endpoint reported no usage for %s; tokens are estimated from the text", model_used)
        try:
            output = self._validate(raw, request, schema, model)
        except ProviderError as exc:
            # The output was generated (and billed) even though it is unusable.
            exc.usage = raw.usage()
            exc.model_used = model_used
            raise
        return LLMResponse(
            output=output,
            tokens_input=raw.tokens_in,
            tokens_output=raw.tokens_out,
            model_used=model_used,
            usage_estimated=raw.usage_estimated,
        )

    def _adjust(
        self, exc: openai.APIStatusError, request: LLMRequest[Any], mode: WireMode, model: str, holder: _RawOutput
    ) -> None:
        """Learn from a refused call what to send next time (an output mode, no temperature), or raise its error."""
        chain = _AUTO_CHAIN[self.endpoint_kind]
        if request.output_schema is not None and self._refuses_schema(exc, mode, model):
            raise self._failed(_schema_refused(exc), request, model, holder) from exc
        if self.output_mode == "auto" and mode != chain[-1] and _refuses_output_mode(exc, mode):
            logger.warning(
                "LLM endpoint refused %s output for %s (%s %s); falling back from now on",
                mode,
                model,
                exc.status_code,
                exc.message[:200],
            )
            self.refused_modes.setdefault(model, set()).add(mode)
        elif exc.status_code == 400 and _rejects_temperature(exc) and model not in self.no_temperature_models:
            logger.warning("model %s accepts no temperature; sending none from now on", model)
            self.no_temperature_models.add(model)
        else:
            raise self._failed(exc, request, model, holder) from exc

    def _refuses_schema(self, exc: openai.APIStatusError, mode: WireMode, model: str) -> bool:
        """Whether a refusal is about an agent's output schema rather than the output mode.

        Only modes that send the schema can be refused for it. The endpoint blames the schema in so many words,
        or it has served this mode for this model before (so the mode itself works): either way, giving up the
        mode would not help, and another schema would work. Otherwise it counts as a refused mode, as usual.
        """
        if mode == "json_mode" or not _refuses_output_mode(exc, mode):
            return False
        return _names_bad_schema(exc) or mode in self.served_modes.get(model, set())

    def _failed(self, exc: BaseException, request: LLMRequest[Any], model: str, holder: _RawOutput) -> ProviderError:
        """Map a failed call and attach what it spent: a stream that opened had its prompt read."""
        error = map_openai_error(exc, model=model, timeout_s=request.timeout_s, api=self.api, started=holder.opened)
        if holder.opened and error.usage is None:
            holder.estimate_usage(self.calibration, model)
            error.usage = holder.usage()
            error.model_used = holder.model or model
        return error

    def _mode(self, model: str) -> WireMode:
        if self.output_mode != "auto":
            return self.output_mode
        refused = self.refused_modes.get(model, set())
        chain = _AUTO_CHAIN[self.endpoint_kind]
        return next((mode for mode in chain if mode not in refused), chain[-1])

    def _validate(self, raw: _RawOutput, request: LLMRequest[T], schema: OutputSchema, model: str) -> T:
        if raw.refusal:
            raise ProviderError(ErrorCode.CONTENT_FILTERED, f"the model refused: {raw.refusal}"[:1500])
        if raw.finish == "content_filter":
            raise ProviderError(ErrorCode.CONTENT_FILTERED, f"the output of {model!r} was blocked by a content filter")
        if raw.tool_name is not None and raw.tool_name != _tool_name(request):
            raise ProviderError(ErrorCode.BAD_REQUEST, f"the model called an unknown tool {raw.tool_name!r}")
        cut = f"the output of {model!r} was cut at max_tokens={request.max_tokens}; raise constraints.max_tokens"
        if raw.finish == "length":
            raise ProviderError(ErrorCode.BAD_REQUEST, cut)
        text = _strip_fences(raw.text)
        if request.output_schema is not None:
            text = _shaped_text(text, request, request.output_schema, model)
        if not text:
            raise ProviderError(ErrorCode.BAD_REQUEST, f"{model!r} returned no output for {request.task}")
        try:
            return request.output_type.model_validate_json(text)
        except ValidationError as exc:
            relaxed = _with_raw_control_characters(text, exc)
            if relaxed is not None:
                try:
                    return request.output_type.model_validate(relaxed)
                except ValidationError:
                    pass
            errors = exc.errors(include_url=False)
            ended_early = any(err["type"] == "json_invalid" and "EOF" in err["msg"] for err in errors)
            # Some servers (llama.cpp) report finish_reason "tool_calls" or "stop" for an output that hit
            # the limit: the token count tells. Without usage the count is an estimate, so JSON that ends
            # early near the limit counts as cut.
            # (characters/4 undercounts JSON on small-vocabulary models by up to half).
            at_limit = raw.tokens_out >= request.max_tokens
            if (raw.usage_seen and at_limit) or (ended_early and raw.tokens_out >= request.max_tokens * 0.5):
                raise ProviderError(
                    ErrorCode.BAD_REQUEST, cut + f" (the JSON ends early after ~{raw.tokens_out} tokens)"
                ) from exc
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in errors[:3]
            )
            raise ProviderError(
                ErrorCode.BAD_REQUEST,
                f"{model!r} returned output that is not a valid {schema.name}: {problems}"[:1500],
                output=text,
            ) from exc

    def _call(
        self,
        request: LLMRequest[T],
        rendered: RenderedPrompt,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        deadline: float,
        holder: _RawOutput,
    ) -> _RawOutput:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProviderError(ErrorCode.MODEL_TIMEOUT, f"no time left for {model!r} within {request.timeout_s:g}s")
        shaped = request.output_schema is not None
        # The Responses API has no place for llama.cpp's schema: it sends plain JSON mode, the prompt the schema.
        shown: WireMode = "json_mode" if mode == "json_object_schema" and self.api == "responses" else mode
        system = rendered.system + _format_instructions(schema, shown, self.endpoint_kind, shaped)
        holder.prompt_text = system + "\n" + rendered.user
        # Every call streams, even when nobody watches the text: giving up (deadline, timeout) then closes
        # the connection, and a server that notices (llama.cpp) stops generating instead of making the
        # retry queue behind an abandoned request.
        sink = _delta_sink(request, request.on_delta) if request.on_delta is not None else _ignore
        if self.api == "responses":
            return self._responses(
                request, system, rendered.user, schema, mode, model, remaining, deadline, holder, sink
            )
        return self._chat(request, system, rendered.user, schema, mode, model, remaining, deadline, holder, sink)

    # --- Chat Completions ---

    def _chat(
        self,
        request: LLMRequest[T],
        system: str,
        user: str,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        timeout: float,
        deadline: float,
        holder: _RawOutput,
        sink: Callable[[str], None],
    ) -> _RawOutput:
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            self.token_param: request.max_tokens,
            "timeout": timeout,
        }
        if model not in self.no_temperature_models:
            kwargs["temperature"] = request.temperature
        if mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": schema.schema, "strict": schema.strict},
            }
        elif mode == "json_object_schema":
            # llama.cpp's shape: the server compiles the schema to a grammar that constrains sampling.
            kwargs["response_format"] = {"type": "json_object", "schema": _grammar_safe(schema.full_schema)}
        elif mode == "json_mode":
            kwargs["response_format"] = {"type": "json_object"}
        elif mode == "tool_call":
            name = _tool_name(request)
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"Return the result of the {request.task} task.",
                        "parameters": schema.schema,
                        "strict": schema.strict,
                    },
                }
            ]
            kwargs["tool_choice"] = {"type": "function", "function": {"name": name}}
        stream = self.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
        holder.opened = True
        return _read_chat_stream(stream, sink, deadline, model, request, holder)

    # --- Responses ---

    def _responses(
        self,
        request: LLMRequest[T],
        system: str,
        user: str,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        timeout: float,
        deadline: float,
        holder: _RawOutput,
        sink: Callable[[str], None],
    ) -> _RawOutput:
        kwargs: dict[str, Any] = {
            "model": model,
            "instructions": system,
            "input": [{"role": "user", "content": user}],
            "max_output_tokens": request.max_tokens,
            "store": False,
            "timeout": timeout,
        }
        if model not in self.no_temperature_models:
            kwargs["temperature"] = request.temperature
        if mode == "json_schema":
            kwargs["text"] = {
                "format": {"type": "json_schema", "name": schema.name, "schema": schema.schema, "strict": schema.strict}
            }
        elif mode in ("json_mode", "json_object_schema"):
            kwargs["text"] = {"format": {"type": "json_object"}}
        elif mode == "tool_call":
            name = _tool_name(request)
            kwargs["tools"] = [
                {
                    "type": "function",
                    "name": name,
                    "description": f"Return the result of the {request.task} task.",
                    "parameters": schema.schema,
                    "strict": schema.strict,
                }
            ]
            kwargs["tool_choice"] = {"type": "function", "name": name}
        stream = self.client.responses.create(stream=True, **kwargs)
        holder.opened = True
        return _read_responses_stream(stream, sink, deadline, model, request.timeout_s, holder)


def _shaped_text(text: str, request: LLMRequest[Any], agent_schema: dict[str, Any], model: str) -> str:
    """The reply with the agent's object checked and put in the text field as JSON (see ``shaped.py``).

    Text that is not a JSON object is left as it is: the output type's validation reports it (cut or invalid).
    """
    try:
        data = json.loads(text)
    except ValueError:
        return text
    field = stream_field(request.output_type)
    if not isinstance(data, dict) or field is None:
        return text
    return json.dumps(shape_reply(data, field, agent_schema, model, text), ensure_ascii=False)


def _ignore(_delta: str) -> None:
    """The sink of a call nobody watches (it still streams, see ``_call``)."""


def _tool_name(request: LLMRequest[Any]) -> str:
    return f"return_{request.task.value}"


@dataclass
class _ChatParts:
    """The pieces of a chat stream's first choice, gathered as the chunks come."""

    content: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)


def _read_chat_stream(
    stream: Any,
    on_delta: Callable[[str], None],
    deadline: float,
    model: str,
    request: LLMRequest[Any],
    raw: _RawOutput,
) -> _RawOutput:
    timeout_s, max_tokens = request.timeout_s, request.max_tokens
    parts = _ChatParts()
    chunks = 0
    with stream:
        for chunk in events_within(stream, deadline, _timed_out(model, timeout_s)):
            chunks += 1
            if chunk.model:
                raw.model = chunk.model
            if chunk.usage is not None:
                _take_chat_usage(raw, chunk.usage)
            for choice in chunk.choices:
                if choice.index == 0:
                    _read_chat_choice(choice, parts, on_delta, raw)
    raw.text = "".join(parts.content) or "".join(parts.arguments)
    if parts.content:
        raw.tool_name = None
    raw.refusal = "".join(parts.refusal) or None
    if raw.finish is None:
        raise _unfinished(raw, chunks, model, max_tokens)
    return raw


def _unfinished(raw: _RawOutput, chunks: int, model: str, max_tokens: int) -> ProviderError:
    """A chat stream that ended without a finish reason: the server stopped the response, the model did not.

    With chunks sent, the answer was cut (llama.cpp's server ends a running stream with ``[DONE]`` and no finish
    reason whenever another request arrives, its default ``interrupt_requests``; a proxy or a dying server may
    drop it): an upstream failure, retried, never judged as the model's output. With nothing sent, the server
    refused the request before generating (llama.cpp does when the prompt plus max_tokens exceeds its context
    window, and says so only in its log): the same request fails the same way, so it is final.
    """
    if not chunks:
        return ProviderError(
            ErrorCode.BAD_REQUEST,
            f"the LLM server ended the response for {model!r} without output or a finish reason; see the "
            f"server's log (a prompt of ~{estimate_tokens(raw.prompt_text)} tokens, plus max_tokens={max_tokens}, "
            "may exceed the model's context window)",
        )
    return ProviderError(
        ErrorCode.UPSTREAM_ERROR,
        f"the LLM server ended the stream for {model!r} without a finish reason after {len(raw.text)} characters: "
        "the response was cut upstream (llama.cpp's server does this to a running request when another one "
        "arrives, unless started with --interrupt_requests false), not finished by the model",
    )


def _take_chat_usage(raw: _RawOutput, usage: Any) -> None:
    """Record the token counts a chat completion (or its last stream chunk) reported."""
    raw.tokens_in = usage.prompt_tokens or 0
    raw.tokens_out = usage.completion_tokens or 0
    raw.usage_seen = True


def _read_chat_choice(choice: Any, parts: _ChatParts, on_delta: Callable[[str], None], raw: _RawOutput) -> None:
    """Add one streamed delta of the first choice: its text, refusal, tool call and finish reason."""
    delta = choice.delta
    if delta.content:
        parts.content.append(delta.content)
        raw.received.append(delta.content)
        on_delta(delta.content)
    if delta.refusal:
        parts.refusal.append(delta.refusal)
    for call in delta.tool_calls or []:
        function = call.function
        if function is None:
            continue
        if function.name:
            raw.tool_name = raw.tool_name or function.name
        if function.arguments:
            parts.arguments.append(function.arguments)
            raw.received.append(function.arguments)
            on_delta(function.arguments)
    if choice.finish_reason:
        raw.finish = choice.finish_reason


def _responses_output(response: Any) -> _RawOutput:
    raw = _RawOutput(text="", model=getattr(response, "model", None) or None)
    usage = getattr(response, "usage", None)
    if usage is not None:
        raw.tokens_in = usage.input_tokens or 0
        raw.tokens_out = usage.output_tokens or 0
        raw.usage_seen = True
    status = getattr(response, "status", None)
    if status == "failed":
        error = getattr(response, "error", None)
        raise _failed_response_error(getattr(error, "code", None), getattr(error, "message", "unknown error"))
    if status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        raw.finish = "content_filter" if reason == "content_filter" else "length"
    texts: list[str] = []
    refusals: list[str] = []
    for item in _items(getattr(response, "output", None)):
        if item.type == "message":
            for part in _items(getattr(item, "content", None)):
                if part.type == "output_text":
                    texts.append(part.text)
                elif part.type == "refusal":
                    refusals.append(part.refusal)
        elif item.type == "function_call" and raw.tool_name is None:
            raw.tool_name = item.name
            raw.text = item.arguments
    if texts:
        raw.text = "".join(texts)
        raw.tool_name = None
    raw.refusal = "".join(refusals) or None
    return raw


def _items(value: Iterable[Any] | None) -> Iterable[Any]:
    return value or ()


def _read_responses_stream(
    stream: Any, on_delta: Callable[[str], None], deadline: float, model: str, timeout_s: float, holder: _RawOutput
) -> _RawOutput:
    text: list[str] = []
    arguments: list[str] = []
    final: _RawOutput | None = None
    tool_name: str | None = None
    with stream:
        for event in events_within(stream, deadline, _timed_out(model, timeout_s)):
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                text.append(event.delta)
                holder.received.append(event.delta)
                on_delta(event.delta)
            elif kind == "response.function_call_arguments.delta":
                arguments.append(event.delta)
                holder.received.append(event.delta)
                on_delta(event.delta)
            elif kind == "response.output_item.added" and getattr(event.item, "type", "") == "function_call":
                tool_name = tool_name or event.item.name
            elif kind == "response.refusal.delta":
                continue
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final = _responses_output(event.response)
            elif kind == "error":
                raise _failed_response_error(getattr(event, "code", None), getattr(event, "message", "stream error"))
    if final is None:
        raise ProviderError(ErrorCode.UPSTREAM_ERROR, "the Responses stream ended without a final response")
    # The buffered deltas are the output; the final event is only read for usage and status.
    if text:
        final.text = "".join(text)
        final.tool_name = None
    elif arguments:
        final.text = "".join(arguments)
        final.tool_name = final.tool_name or tool_name
    final.prompt_text = holder.prompt_text
    final.opened = True
    final.received = holder.received
    return final


# --- Building from settings ----------------------------------------------------------------


def azure_v1_base_url(endpoint: str) -> str:
    """``https://<resource>.openai.azure.com`` (with or without the path) → ``.../openai/v1/``."""
    base = endpoint.strip().rstrip("/")
    if base.endswith("/openai/v1"):
        return base + "/"
    if base.endswith("/openai"):
        return base + "/v1/"
    return base + "/openai/v1/"


def build_llm_provider(settings: Settings, *, credential: TokenCredential | None = None) -> OpenAIChatProvider:
    """The provider for ``settings.llm_provider`` ("azure_openai" or "openai"); no network at build.

    Azure OpenAI uses ``AZURE_OPENAI_API_KEY`` when set, else a bearer-token provider over
    ``credential`` (default: ``DefaultAzureCredential``, with ``AZURE_CLIENT_ID`` as the managed
    identity). "openai" with ``OPENAI_BASE_URL`` is any OpenAI-compatible server (a key is optional).
    Raises ``ProviderError(CONFIG_ERROR)`` when a required setting is missing.
    """
    if settings.llm_provider == "azure_openai":
        if not settings.azure_openai_endpoint:
            raise ProviderError(ErrorCode.CONFIG_ERROR, "LLM_PROVIDER=azure_openai needs AZURE_OPENAI_ENDPOINT")
        api_key: str | Callable[[], str]
        if settings.azure_openai_api_key is not None:
            api_key = settings.azure_openai_api_key.get_secret_value()
            auth = "api key"
        else:
            from azure.identity import get_bearer_token_provider

            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
            api_key = get_bearer_token_provider(credential, AZURE_OPENAI_SCOPE)
            auth = f"Entra ID token ({type(credential).__name__})"
        base_url = azure_v1_base_url(settings.azure_openai_endpoint)
        client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0)
        logger.info(
            "LLM: Azure OpenAI at %s, deployment %s, auth %s, api %s",
            base_url,
            settings.azure_openai_chat_deployment,
            auth,
            settings.llm_api,
        )
        return OpenAIChatProvider(
            client,
            default_model=settings.azure_openai_chat_deployment,
            endpoint_kind="azure_openai",
            api=settings.llm_api,
            output_mode=settings.llm_output_mode,
        )
    if settings.llm_provider == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key is not None else None
        if settings.openai_base_url:
            # Local servers (Ollama, LM Studio, vLLM, llama.cpp) ignore the key, but the SDK needs one.
            client = openai.OpenAI(api_key=key or "not-needed", base_url=settings.openai_base_url, max_retries=0)
            kind: EndpointKind = "openai_compatible"
        else:
            if key is None:
                raise ProviderError(
                    ErrorCode.CONFIG_ERROR, "LLM_PROVIDER=openai needs OPENAI_API_KEY or OPENAI_BASE_URL"
                )
            client = openai.OpenAI(api_key=key, base_url=OPENAI_DEFAULT_BASE_URL, max_retries=0)
            kind = "openai"
        logger.info("LLM: %s at %s, model %s, api %s", kind, client.base_url, settings.openai_model, settings.llm_api)
        return OpenAIChatProvider(
            client,
            default_model=settings.openai_model,
            endpoint_kind=kind,
            api=settings.llm_api,
            output_mode=settings.llm_output_mode,
        )
    raise ProviderError(
        ErrorCode.CONFIG_ERROR,
        f"LLM_PROVIDER={settings.llm_provider} is not served by the OpenAI provider (use the offline LLM)",
    )
