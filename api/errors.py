"""The one place where errors become HTTP responses: stable codes, no internals."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import azure.functions as func
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from api.contract.bodies import ErrorBody, ErrorDetail, dump_body

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """An error the client caused or must know about, with a stable code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        # Every problem when there are several (a definition's validation): {path, code, message[, node]}.
        self.errors = errors
        self.headers = headers


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> func.HttpResponse:
    """A JSON HTTP response."""
    return func.HttpResponse(json.dumps(body), status_code=status, mimetype="application/json", headers=headers)


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> func.HttpResponse:
    """The error body every endpoint uses."""
    error = ErrorDetail(code=code, message=message)
    if field:
        error.field = field
    if errors:
        error.errors = errors
    return json_response(dump_body(ErrorBody(error=error)), status, headers)


# What a field must be, by pydantic error type: said in terms of the request, never of a model class.
_EXPECTED = {
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "dict_type": "a JSON object",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "none_required": "null",
}
_LIMITS = {
    "greater_than_equal": ("must be at least {ge}", "ge"),
    "greater_than": ("must be greater than {gt}", "gt"),
    "less_than_equal": ("must be at most {le}", "le"),
    "less_than": ("must be less than {lt}", "lt"),
    "string_too_short": ("must have at least {min_length} character(s)", "min_length"),
    "string_too_long": ("must have at most {max_length} characters", "max_length"),
    "too_short": ("must have at least {min_length} item(s)", "min_length"),
    "too_long": ("must have at most {max_length} items", "max_length"),
    "literal_error": ("must be one of {expected}", "expected"),
    "enum": ("must be one of {expected}", "expected"),
    "string_pattern_mismatch": ("does not have the expected format", None),
}
# A union's members appear in pydantic's loc as tags such as "str" or "dict[str,any]"; they are not fields.
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|list|dict|[A-Za-z_]*[\[\-,].*)$")


def _field_of(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":  # the last part is the caller's own key, whatever it is called
        return ".".join(str(p) for p in error["loc"])
    parts = [str(p) for p in error["loc"] if not (isinstance(p, str) and _UNION_TAG.match(p))]
    return ".".join(parts)


def _phrase(error: ErrorDetails) -> str:
    """What is wrong with one field, in the words of the request (no class names, no pydantic jargon)."""
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}"
    ctx = error.get("ctx") or {}
    if kind in _LIMITS:
        template, key = _LIMITS[kind]
        return template.format(**{key: ctx.get(key)}) if key else template
    if kind == "value_error" and ctx.get("error") is not None:
        return str(ctx["error"])
    return re.sub(r" or instance of \w+", "", error["msg"]).replace("Input should be", "must be")


def from_validation_error(exc: ValidationError, code: str = "INVALID_REQUEST") -> ApiError:
    """Name the first offending request field and say what it must be."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = _field_of(first) or None
    # A value that fits no member of a union: say every accepted shape ("a string or a JSON object").
    members = [e for e in errors if _field_of(e) == (field or "") and e["type"] in _EXPECTED and len(e["loc"]) > 1]
    if len(members) > 1 and len(members) == len([e for e in errors if _field_of(e) == (field or "")]):
        phrase = "must be " + " or ".join(dict.fromkeys(_EXPECTED[e["type"]] for e in members))
    else:
        phrase = _phrase(first)
    return ApiError(400, code, f"{field} {phrase}" if field else f"the body {phrase}", field=field)


def config_error(exc: Exception) -> ApiError:
    """503 CONFIG_ERROR naming the app setting: the deployment is broken, not the request."""
    setting = getattr(exc, "setting", None)
    detail = getattr(exc, "public_message", None) or "invalid settings"
    return ApiError(503, "CONFIG_ERROR", f"the app is misconfigured ({detail}); fix the app settings", field=setting)


def _is_settings_error(exc: ValidationError) -> bool:
    return exc.title == "Settings"


async def guarded(route: str, handler: Callable[[], Awaitable[func.HttpResponse]]) -> func.HttpResponse:
    """Run a handler and map every error to a response; unexpected ones are logged, never shown."""
    from shared.runtime.settings import ConfigError, get_settings

    try:
        get_settings()  # bad settings answer 503 on every request, whatever the handler would touch
        return await handler()
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.field, exc.errors, exc.headers)
    except ConfigError as exc:
        logger.error("%s: %s", route, exc)
        err = config_error(exc)
        return error_response(err.status, err.code, err.message, err.field)
    except ValidationError as exc:
        if _is_settings_error(exc):
            logger.error("%s: invalid settings: %s", route, exc)
            return error_response(503, "CONFIG_ERROR", "the app is misconfigured; the error was logged")
        err = from_validation_error(exc)
        return error_response(err.status, err.code, err.message, err.field)
    except Exception:
        logger.exception("unhandled error in %s", route)
        return error_response(500, "INTERNAL_ERROR", "the request failed unexpectedly; the error was logged")
