"""The one interface every Executor tool implements, whatever its family (function, HTTP, MCP).

A tool is called with arguments a model wrote: untrusted data. ``run_tool`` validates them against the
tool's schema, bounds the call by its timeout and turns every outcome into the one envelope the model
sees, ``{success, data, error{code, message}}``; it never raises. What a tool may reach (hosts,
servers, functions) is fixed by configuration and by the job's allowed tools, never by its arguments.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode

logger = logging.getLogger(__name__)

# What a tool may hand back to the model: larger results are cut and labelled as cut.
MAX_RESULT_CHARS = 16_000
# Tool names as the OpenAI tools API accepts them: family prefix, a dot, the member's name.
TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,15}\.[A-Za-z0-9_.-]{1,48}$"


class ToolError(BaseModel):
    """Why a tool call failed, as the model and the job log are shown it."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=64)
    message: str = Field(max_length=2000)
    retryable: bool = False


class ToolResult(BaseModel):
    """The envelope of every tool result: what the model sees and the job view shows."""

    model_config = ConfigDict(extra="forbid")

    success: bool
    data: Any = None
    error: ToolError | None = None
    # True when ``data`` was cut to MAX_RESULT_CHARS: the model must not conclude from what is missing.
    truncated: bool = False
    duration_ms: int = Field(default=0, ge=0)


class ToolFailure(Exception):
    """Raised by a tool for a classified failure; ``run_tool`` puts it in the envelope."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(message)
        self.code = str(code)
        self.message = message


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool, and its bounds."""

    name: str
    family: str
    description: str
    # JSON Schema of the arguments (an object); for typed tools it comes from their pydantic model.
    input_schema: dict[str, Any]
    timeout_s: float = 30.0
    input_model: type[BaseModel] | None = field(default=None, compare=False)
    # False for a tool whose call must not be repeated by the retry policy (its entry says "retryable": false):
    # a failure is shown as final whatever its code. A call in flight when the host dies still runs again.
    retryable: bool = True


@dataclass(frozen=True)
class ToolContext:
    """Who calls: the job and step, for logs and per-job sessions. Never widens what the tool may reach."""

    job_id: str = ""
    step_id: str = ""
    # The same for every attempt of one call, new for a new call ("<job id>:<call id>"): HTTP and MCP tools
    # send it as the Idempotency-Key header, so a server can tell a repeated call from a new one.
    idempotency_key: str = ""


IDEMPOTENCY_HEADER = "Idempotency-Key"


class Tool(ABC):
    """One tool of a family."""

    spec: ToolSpec

    @abstractmethod
    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Run the call with validated arguments; return JSON-able data or raise ToolFailure."""


def _check_args(spec: ToolSpec, args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise ToolFailure(ErrorCode.INVALID_INPUT, f"the arguments of {spec.name} must be a JSON object")
    if spec.input_model is not None:
        try:
            return spec.input_model.model_validate(args).model_dump(mode="json")
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
            raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: {where}: {err.get('msg')}") from exc
    return _check_against_schema(spec, args)


def _check_against_schema(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """The checks of a declared schema that decide whether a call makes sense: required and known keys, types."""
    props: dict[str, Any] = spec.input_schema.get("properties") or {}
    missing = [k for k in spec.input_schema.get("required") or [] if k not in args]
    if missing:
        raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: missing argument {missing[0]!r}")
    if spec.input_schema.get("additionalProperties") is False:
        unknown = sorted(k for k in args if k not in props)
        if unknown:
            raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: unknown argument {unknown[0]!r}")
    types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "object": dict,
        "array": list,
    }
    for name, value in args.items():
        expected = (props.get(name) or {}).get("type")
        python_type = types.get(expected) if isinstance(expected, str) else None
        wrong_bool = isinstance(value, bool) and expected in ("integer", "number")
        if python_type is not None and (not isinstance(value, python_type) or wrong_bool):
            raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: argument {name!r} must be of type {expected}")
    _check_full_schema(spec, args)
    return args


def _check_full_schema(spec: ToolSpec, args: dict[str, Any]) -> None:
    """The rest of the declared schema (patterns, bounds, enums), on the one validator for untrusted schemas."""
    from shared.runtime.schema_safety import SchemaLimitExceeded, UnsafeSchema, safe_validator

    try:
        error = safe_validator(spec.input_schema).first_error(args)
    except UnsafeSchema as exc:
        raise ToolFailure(ErrorCode.CONFIG_ERROR, f"{spec.name}: its input schema cannot be run: {exc}"[:500]) from None
    except SchemaLimitExceeded as exc:
        raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: the arguments cannot be checked: {exc}") from None
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise ToolFailure(ErrorCode.INVALID_INPUT, f"{spec.name}: {where}: {error.message}"[:500])


def _bounded(data: Any) -> tuple[Any, bool]:
    # NaN and infinities are not JSON: the model's API and Durable's history would refuse the envelope.
    text = json.dumps(data, default=str, allow_nan=False)
    if len(text) <= MAX_RESULT_CHARS:
        return json.loads(text), False
    return text[:MAX_RESULT_CHARS], True


def failure(code: ErrorCode | str, message: str, started: float | None = None, *, may_retry: bool = True) -> ToolResult:
    """A failed envelope; retryable when the code is one the policy retries and the tool may be called again."""
    elapsed = 0 if started is None else int((time.monotonic() - started) * 1000)
    retryable = may_retry and code in RETRYABLE_CODES
    return ToolResult(
        success=False,
        error=ToolError(code=str(code)[:64], message=message[:2000], retryable=retryable),
        duration_ms=elapsed,
    )


def run_tool(tool: Tool, args: Any, ctx: ToolContext) -> ToolResult:
    """Call a tool under its timeout and return the envelope; never raises."""
    spec = tool.spec
    started = time.monotonic()
    try:
        checked = _check_args(spec, args)
        # A worker thread bounds the wall time even of a tool that blocks; a late result is dropped.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tool-{spec.family}")
        try:
            data = pool.submit(tool.invoke, checked, ctx).result(timeout=spec.timeout_s)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    except concurrent.futures.TimeoutError:
        late = f"{spec.name} did not answer within {spec.timeout_s:g} s"
        return failure(ErrorCode.TRANSIENT, late, started, may_retry=spec.retryable)
    except ToolFailure as exc:
        return failure(exc.code, exc.message, started, may_retry=spec.retryable)
    except Exception:
        logger.exception("tool %s failed unexpectedly (job %s, step %s)", spec.name, ctx.job_id, ctx.step_id)
        return failure(ErrorCode.INTERNAL_ERROR, f"{spec.name} failed unexpectedly; see the logs", started)
    try:
        bounded, truncated = _bounded(data)
    except (TypeError, ValueError):
        return failure(ErrorCode.INTERNAL_ERROR, f"{spec.name} returned data that is not JSON", started)
    elapsed = int((time.monotonic() - started) * 1000)
    return ToolResult(success=True, data=bounded, truncated=truncated, duration_ms=elapsed)
