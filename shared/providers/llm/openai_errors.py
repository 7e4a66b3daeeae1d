"""OpenAI SDK and wire errors mapped to the contract's ``ProviderError`` (codes, retry-after, the cause named).

See ``shared.providers.llm.openai`` for the mapping's rules.
"""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import httpx
import openai
from azure.core.exceptions import ClientAuthenticationError

from shared.jobs.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    pass


ApiKind = Literal["chat", "responses"]


OutputMode = Literal["auto", "json_schema", "json_mode", "tool_call"]


# What is actually sent: the settings' modes plus llama.cpp's shape of a schema, a ``json_object`` response
# format carrying ``schema`` (grammar-constrained output), tried in "auto" mode on OpenAI-compatible servers.
WireMode = Literal["json_schema", "json_object_schema", "json_mode", "tool_call"]


EndpointKind = Literal["azure_openai", "openai", "openai_compatible"]


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


def error_detail(exc: openai.APIError) -> tuple[str | None, str]:
    """The error's code and message, from Azure's inner error when it has one."""
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


def refuses_output_mode(exc: openai.APIStatusError, mode: WireMode) -> bool:
    """Whether an error (any 4xx/5xx: llama.cpp answers a 500) says the server cannot do this output mode.

    Judged by content, not status: the message, the body or ``param`` names the response format (or,
    for tool calls, the tools) the request used.
    """
    if exc.status_code in (401, 403, 408, 429):
        return False
    code, message = error_detail(exc)
    if _is_content_filter(code, message, exc.body):
        return False
    text = (message + " " + json.dumps(exc.body, default=str)).lower()
    param = (exc.param or "").lower()
    if mode == "tool_call":
        return "tool" in text or param.startswith("tool")
    mentions_format = any(word in text for word in ("json_schema", "response_format", "text.format", "schema"))
    return mentions_format or param in ("response_format", "text.format", "text")


def rejects_temperature(exc: openai.APIStatusError) -> bool:
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
    code, message = error_detail(exc)
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
    code, message = error_detail(exc)
    if _is_content_filter(code, message, exc.body):
        return ProviderError(ErrorCode.CONTENT_FILTERED, f"content filter: {message}"[:1500])
    if code and "rate_limit" in code:
        return ProviderError(ErrorCode.RATE_LIMITED, f"rate limited mid-stream: {message}"[:1500])
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"the LLM stream failed: {message}"[:1500])


def failed_response_error(code: str | None, message: str) -> ProviderError:
    """A failed Responses API response as a ProviderError by its error code."""
    lowered = (code or "").lower()
    if "rate_limit" in lowered:
        return ProviderError(ErrorCode.RATE_LIMITED, f"response failed: {message}")
    if "content_filter" in lowered:
        return ProviderError(ErrorCode.CONTENT_FILTERED, f"response failed: {message}")
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"response failed ({code}): {message}"[:1500])
