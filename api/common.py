"""What the api/ handlers share: request bodies and parameters, the caller, route auth, owned reads.

Handler modules import these from here, never each other's private names (tests/api/test_common.py checks it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ValidationError

from api.auth import Caller, caller_of
from api.errors import ApiError, from_validation_error
from api.view import decode
from shared.definitions import store as store_module
from shared.definitions.models import Definition
from shared.definitions.store import DefinitionStore, Head, StoreError
from shared.jobs.models import ORCHESTRATOR_NAME, JobRequest

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Job requests and answers are small; the cap keeps one request from growing the Durable store by megabytes.
MAX_BODY_BYTES = 64 * 1024
# Legitimate bodies nest a few levels; deeper ones are refused before they reach models or the store.
MAX_JSON_DEPTH = 32


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def read_json_body(req: func.HttpRequest, max_bytes: int | None = None) -> Any:
    """The request body as JSON: 413 over ``max_bytes`` (default MAX_BODY_BYTES), 400 INVALID_JSON when
    unreadable or nested too deep."""
    max_bytes = MAX_BODY_BYTES if max_bytes is None else max_bytes
    raw = req.get_body() or b""
    if len(raw) > max_bytes:
        raise ApiError(
            413, "PAYLOAD_TOO_LARGE", f"the body is {len(raw)} bytes; at most {max_bytes} bytes are accepted"
        )
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body nests deeper than {MAX_JSON_DEPTH} levels") from exc
    if _depth_exceeds(body, MAX_JSON_DEPTH):
        raise ApiError(400, "INVALID_JSON", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    return body


def parse_body(req: func.HttpRequest, model: type[M], needs: str) -> M:
    """The body as ``model``: 400 naming what the body needs when it is not an object, or the bad field."""
    body = read_json_body(req)
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_REQUEST", f"the body must be a JSON object with {needs}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from exc


def int_param(req: func.HttpRequest, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter in [low, high] (``default`` when absent); 400 INVALID_PARAMETER naming it."""
    raw = req.params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, "INVALID_PARAMETER", f"{name} must be an integer", field=name) from exc
    if not low <= value <= high:
        raise ApiError(400, "INVALID_PARAMETER", f"{name} must be between {low} and {high}", field=name)
    return value


def request_caller(req: func.HttpRequest) -> Caller:
    """The caller, from the Easy Auth headers when App Service Authentication is on (401 without a principal)."""
    from shared.runtime.settings import get_settings

    settings = get_settings()
    return caller_of(req.headers, easy_auth=settings.website_auth_enabled, admin_role=settings.jobs_admin_role)


def route_auth_level() -> func.AuthLevel | None:
    """ANONYMOUS when Easy Auth is on (the platform signs the caller in), else the app's function-key level."""
    from shared.runtime.settings import get_settings

    try:
        easy_auth = get_settings().website_auth_enabled
    except ValueError:  # shared.runtime.settings.ConfigError
        # Bad settings are reported on every request; until then keep the stricter level (key required).
        return None
    return func.AuthLevel.ANONYMOUS if easy_auth else None


async def owned_status(
    client: df.DurableOrchestrationClient, job_id: str, caller: Caller, *, history: bool = False
) -> dict[str, Any]:
    """The job's Durable status when this caller may see it; 404 JOB_NOT_FOUND otherwise (ids do not leak)."""
    status = await client.get_status(job_id, show_history=history, show_history_output=history, show_input=True)
    data = status.to_json() if status else {}
    # Another user's job answers exactly like a missing one, so job ids do not leak.
    if not status or status.name != ORCHESTRATOR_NAME or not caller.sees(decode(data.get("input"))):
        raise ApiError(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
    data["historyEvents"] = getattr(status, "historyEvents", None) or data.get("history") or []
    return data


def check_tools(request: JobRequest) -> None:
    """A job may allow only tools this app configures: an unknown one is refused now, not at every turn."""
    if not request.tools:
        return
    from shared.runtime.settings import get_settings
    from shared.tools import undeclared

    settings = get_settings()
    for index, name in enumerate(request.tools):
        problem = undeclared(settings, name)
        if problem is not None:
            raise ApiError(400, "INVALID_REQUEST", problem, field=f"tools.{index}")


# Each store error's status; the code is the error's own.
STORE_STATUS = {
    "DEFINITION_NOT_FOUND": 404,
    "DEFINITION_EXISTS": 409,
    "DEFINITION_CONFLICT": 409,
    # Not configured is the deployment's state, not a failure of the request or the server: 409, never 5xx.
    "DEFINITIONS_NOT_CONFIGURED": 409,
    "DEFINITIONS_STORE_UNAVAILABLE": 503,
}


def definition_store() -> DefinitionStore:
    """The definitions store of this app; its errors as API errors."""
    from shared.runtime.settings import get_settings

    try:
        return store_module.get_store(get_settings())
    except StoreError as exc:
        raise ApiError(STORE_STATUS.get(exc.code, 503), exc.code, exc.message) from exc


async def in_store(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a (blocking) store call off the event loop, its errors as API errors."""
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except StoreError as exc:
        status = STORE_STATUS.get(exc.code, 503)
        headers = {"Retry-After": "5"} if status == 503 else None
        raise ApiError(status, exc.code, exc.message, headers=headers) from exc


class Visible:
    """The resolver validation uses: the caller's own definitions only (another owner's are unknown, as on GET)."""

    def __init__(self, store: DefinitionStore, caller: Caller) -> None:
        self.store = store
        self.caller = caller

    def head(self, kind: str, def_id: str) -> Head | None:
        """The head when this caller may see it, else None."""
        head = self.store.head(kind, def_id)
        if head is None or not self.caller.sees({"owner": {"id": head.owner.id} if head.owner else None}):
            return None
        return head

    def find(self, kind: str, def_id: str, version: int | None) -> Definition | None:
        """The definition when this caller may see it, else None."""
        return self.store.find(kind, def_id, version) if self.head(kind, def_id) is not None else None


def visible_head(head: Head | None, caller: Caller, kind: str, def_id: str) -> Head:
    """The head when this caller may see it; another user's definition answers like a missing one."""
    owner = {"id": head.owner.id} if head is not None and head.owner else None
    if head is None or head.archived or not caller.sees({"owner": owner}):
        raise ApiError(404, "DEFINITION_NOT_FOUND", f"there is no {kind} {def_id!r}")
    return head


def forks_of(job_id: str) -> list[dict[str, str]]:
    """The forks of a job, for its view (empty when the ledger cannot be read: the view must still answer)."""
    import logging

    from shared.runtime.fork_ledger import get_fork_ledger
    from shared.runtime.settings import get_settings

    try:
        return get_fork_ledger(get_settings()).forks_of(job_id)
    except Exception as exc:
        logging.getLogger(__name__).warning("forks of %s unreadable: %s", job_id, exc)
        return []


def iso_time(text: Any) -> datetime | None:
    """An ISO 8601 time from a Durable or stored record (``Z`` or an offset; none means UTC), else None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
