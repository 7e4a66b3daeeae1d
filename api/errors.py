"""The one place where errors become HTTP responses: stable codes, no internals."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import azure.functions as func
from pydantic import ValidationError

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """An error the client caused or must know about, with a stable code."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> func.HttpResponse:
    """A JSON HTTP response."""
    return func.HttpResponse(json.dumps(body), status_code=status, mimetype="application/json", headers=headers)


def error_response(status: int, code: str, message: str, field: str | None = None) -> func.HttpResponse:
    """The error body every endpoint uses."""
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    return json_response({"error": error}, status)


def from_validation_error(exc: ValidationError, code: str = "INVALID_REQUEST") -> ApiError:
    """Name the first offending field of a pydantic error."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or None
    message = first.get("msg", "invalid value")
    return ApiError(400, code, f"{field}: {message}" if field else message, field=field)


async def guarded(route: str, handler: Callable[[], Awaitable[func.HttpResponse]]) -> func.HttpResponse:
    """Run a handler and map every error to a response; unexpected ones are logged, never shown."""
    try:
        return await handler()
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.field)
    except ValidationError as exc:
        err = from_validation_error(exc)
        return error_response(err.status, err.code, err.message, err.field)
    except Exception:
        logger.exception("unhandled error in %s", route)
        return error_response(500, "INTERNAL_ERROR", "the request failed unexpectedly; the error was logged")
