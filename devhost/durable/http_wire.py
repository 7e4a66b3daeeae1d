"""The Durable HTTP API's wire format: query parameters read as the extension reads them, and its JSON errors."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from devhost.functions.model import EngineError, InvalidRequest

log = logging.getLogger("devhost.durable")

RUNTIME_STATUSES = (
    "Running",
    "Completed",
    "ContinuedAsNew",
    "Failed",
    "Canceled",
    "Terminated",
    "Pending",
    "Suspended",
)

# .NET exception type names the extension reports for each kind of failure; clients match on them.
_EXCEPTION_TYPES: dict[str, str] = {
    "InstanceNotFound": "System.ArgumentException",
    "InstanceGone": "System.InvalidOperationException",
    "InstanceAlreadyExists": "DurableTask.Core.Exceptions.OrchestrationAlreadyExistsException",
    "InvalidRequest": "System.ArgumentException",
    "PreconditionFailed": "System.InvalidOperationException",
    "NotSupported": "System.NotSupportedException",
    "StoreUnavailable": "System.InvalidOperationException",
    "InvalidJson": "Newtonsoft.Json.JsonReaderException",
    "RestartOfUnknownInstance": "System.ArgumentException",
}
_MESSAGES: dict[int, str] = {
    400: "One or more of the arguments submitted is incorrect",
    404: "The requested resource was not found",
    410: "The orchestration instance is no longer running",
    500: "Something went wrong while processing your request",
    501: "This operation is not implemented by the devhost",
    503: "The durable store cannot write right now; retry later",
}


def json_response(payload: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response with the extension's content type."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return Response(body, status_code=status_code, headers=headers, media_type="application/json; charset=utf-8")


def error_response(exc: BaseException) -> Response:
    """Map an engine error (or any unexpected exception) to the extension's JSON error body."""
    if isinstance(exc, EngineError):
        status = exc.status_code
        kind = type(exc).__name__
        body = {
            "Message": exc.http_message or _MESSAGES.get(status, "An error has occurred."),
            "ExceptionMessage": str(exc) or kind,
            "ExceptionType": _EXCEPTION_TYPES.get(kind, "System.Exception"),
            "StackTrace": "",
        }
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            body["ErrorCode"] = code  # e.g. STORE_UNAVAILABLE: a stable code clients can match
        return json_response(body, status, headers={"Retry-After": "5"} if status == 503 else None)
    log.error("Durable HTTP API request failed", exc_info=exc)
    return json_response(
        {
            "Message": "Something went wrong while processing your request",
            "ExceptionMessage": "An internal error occurred in the devhost; see the host log for details.",
            "ExceptionType": "System.Exception",
            "StackTrace": "",
        },
        500,
    )


class InvalidJson(InvalidRequest):
    """A body that is not JSON: the extension's 400 "Invalid JSON content" (a Json.NET reader exception)."""

    http_message = "Invalid JSON content"


class RestartOfUnknownInstance(InvalidRequest):
    """HandleRestartInstanceRequestAsync's 400 for an id no instance has."""

    http_message = "InstanceId does not match a valid orchestration instance."


def parse_bool(value: str | None, default: bool) -> bool:
    """.NET ``bool.TryParse`` semantics: 'true'/'false' in any case, anything else keeps the default."""
    if value is None:
        return default
    text = value.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    return default


_DT_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?)(\.\d+)?)?(Z|[+\- ]\d{2}:?\d{2})?$", re.IGNORECASE
)


def parse_datetime(name: str, value: str) -> datetime:
    """Parse an ISO-8601 query value (up to 7 fractional digits, optional zone; no zone = UTC)."""
    m = _DT_RE.match(value.strip())
    if not m:
        raise InvalidRequest(f"The '{name}' query parameter '{value}' is not a valid ISO-8601 date and time.")
    date, clock, frac, zone = m.groups()
    text = date + "T" + (clock or "00:00:00")
    if clock and len(clock) == 5:
        text += ":00"
    if frac:
        text += frac[:7]  # Python keeps microseconds; .NET's 7th digit is dropped
    if zone is None or zone.upper() == "Z":
        text += "+00:00"
    else:
        # An unencoded '+' in a query string arrives as a space.
        zone = "+" + zone[1:] if zone.startswith(" ") else zone
        text += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError as exc:
        raise InvalidRequest(f"The '{name}' query parameter '{value}' is not a valid date and time.") from exc


def parse_statuses(value: str | None) -> list[str] | None:
    """Parse ``runtimeStatus=Running,Pending`` into canonical names; unknown names are a 400."""
    if value is None or value.strip() == "":
        return None
    canonical = {s.lower(): s for s in RUNTIME_STATUSES}
    out: list[str] = []
    for item in value.split(","):
        key = item.strip().lower()
        if not key:
            continue
        if key not in canonical:
            raise InvalidRequest(
                f"'{item.strip()}' is not a valid runtimeStatus; use one of: {', '.join(RUNTIME_STATUSES)}."
            )
        out.append(canonical[key])
    return out or None


def query_params(request: Request) -> dict[str, str]:
    """Query parameters with lower-cased names (the extension matches them case-insensitively)."""
    return {k.lower(): v for k, v in request.query_params.items()}


def split_path(subpath: str) -> list[str]:
    """The decoded segments of a sub-path."""
    parts = subpath.strip("/").split("/") if subpath.strip("/") else []
    return [unquote(p) for p in parts]


def positive_float(name: str, value: str) -> float:
    """A positive finite number of seconds from query parameter ``name``; else a 400."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0 or number != number or number == float("inf"):
        raise InvalidRequest(f"The '{name}' query parameter must be a positive number of seconds, got '{value}'.")
    return number


def lenient_datetime(value: str | None) -> float | None:
    """A query date as epoch seconds, or None when absent or not a date (the extension ignores it then)."""
    if not value:
        return None
    try:
        return parse_datetime("time", value).timestamp()
    except InvalidRequest:
        return None
