"""Listing jobs newest first over the Durable HTTP API: time windows, cursors, pages, and the caller's own jobs.

The ``GET /api/jobs`` handler in ``api.jobs`` calls ``newest_first`` and turns its rows into list items here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import Caller
from api.common import iso_time
from api.errors import ApiError
from api.view import decode, job_status
from shared.jobs.models import (
    ORCHESTRATOR_NAME,
    JobState,
)

M = TypeVar("M", bound=BaseModel)


class ListWindows(BaseModel):
    """How ``GET /api/jobs`` walks back in time: windows of created time, newest first."""

    # Width of the first window (seconds); a sparse window doubles the next one.
    first_s: int = Field(default=2, ge=1)
    # Windows per request at most; then the page ends early with a cursor at the boundary reached.
    max_windows: int = Field(default=30, ge=1)
    # Instances per Durable list request (the API's ``top``); continuation tokens fetch the rest.
    page_size: int = Field(default=500, ge=1, le=1000)


LIST_WINDOWS = ListWindows()


# Widest window a cursor may ask for (about 10 years): bounds what one request can make the store read.
MAX_WINDOW_S = 10 * 366 * 86_400


# Probe pages followed at most (Azure Table queries may answer empty pages with a continuation token).
MAX_PROBE_PAGES = 50


LIST_PAGE = 500


class ListCursor(BaseModel):
    """Where the next page starts: jobs whose (created second, id) sorts before (t, id)."""

    model_config = ConfigDict(extra="forbid")

    t: int = Field(ge=0, le=253_402_200_000)  # epoch second of the last job shown (or the boundary reached)
    id: str = Field(max_length=256)  # the last job's id; "" = every job created before second t
    w: int = Field(ge=1, le=MAX_WINDOW_S)  # window width (s) to start with


def encode_cursor(cursor: ListCursor) -> str:
    """A page cursor as URL-safe text."""
    return base64.urlsafe_b64encode(cursor.model_dump_json().encode()).decode()


def decode_cursor(text: str) -> ListCursor:
    """A page cursor from its text; 400 INVALID_PARAMETER when it is not one."""
    try:
        return ListCursor.model_validate_json(base64.urlsafe_b64decode(text.encode()))
    except (ValueError, UnicodeError) as exc:  # binascii.Error and ValidationError are ValueErrors
        raise ApiError(400, "INVALID_PARAMETER", "cursor is not valid", field="cursor") from exc


_id_lock = threading.Lock()


_last_id_ms = 0


_last_id_seq = 0


def new_job_id() -> str:
    """A UUIDv7 as 32 hex chars: ids sort by creation time, to the millisecond, then by a counter.

    Durable reports created times to the second only; the listing breaks ties by id, so jobs created in
    the same second list newest first. 62 random bits keep ids unguessable (and another user's job is
    a 404 anyway).
    """
    global _last_id_ms, _last_id_seq
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_id_ms:
            _last_id_ms, _last_id_seq = ms, secrets.randbelow(1 << 11)
        else:  # same millisecond (or the clock stepped back): keep counting up from the last id
            _last_id_seq += 1
            if _last_id_seq >= 1 << 12:
                _last_id_ms, _last_id_seq = _last_id_ms + 1, 0
        ms, seq = _last_id_ms, _last_id_seq
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | secrets.randbits(62)
    return f"{value:032x}"


def _durable_time(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _created_second(data: dict[str, Any]) -> int | None:
    moment = iso_time(data.get("createdTime"))
    return None if moment is None else int(moment.timestamp())


async def durable_pages(
    http: httpx.AsyncClient, base: str, params: dict[str, str], *, max_pages: int | None = None
) -> AsyncIterator[list[dict[str, Any]]]:
    """Pages of the Durable list API (``GET instances/``), following continuation tokens."""
    token: str | None = None
    pages = 0
    while True:
        headers = {"x-ms-continuation-token": token} if token else {}
        resp = await http.get(f"{base}instances/", params=params, headers=headers)
        if resp.status_code != 200:
            raise RuntimeError(f"the Durable list API answered {resp.status_code}")
        body = resp.json()
        yield body if isinstance(body, list) else []
        pages += 1
        token = resp.headers.get("x-ms-continuation-token")
        if not token or token == "null" or (max_pages is not None and pages >= max_pages):
            return


def _list_params(runtime_statuses: list[str] | None, top: int, *, show_input: bool) -> dict[str, str]:
    params = {"top": str(top), "showInput": "true" if show_input else "false"}
    if runtime_statuses:
        params["runtimeStatus"] = ",".join(runtime_statuses)
    return params


async def durable_instances(
    binding_json: str,
    runtime_statuses: list[str] | None,
    *,
    page_size: int = LIST_PAGE,
    created_from: int | None = None,
    created_to: int | None = None,
    http: httpx.AsyncClient | None = None,
) -> list[dict[str, Any]]:
    """Every instance the Durable HTTP API lists in a created-time range (epoch seconds, both inclusive)."""
    base = str(json.loads(binding_json)["rpcBaseUrl"])
    params = _list_params(runtime_statuses, page_size, show_input=True)
    if created_from is not None:
        params["createdTimeFrom"] = _durable_time(created_from)
    if created_to is not None:
        params["createdTimeTo"] = _durable_time(created_to)
    found: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        client = http if http is not None else await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))
        async for page in durable_pages(client, base, params):
            found.extend(page)
    return found


async def _exists_before(http: httpx.AsyncClient, base: str, runtime_statuses: list[str] | None, second: int) -> bool:
    """Whether any instance was created at or before ``second`` (one small query, not a scan of results)."""
    params = _list_params(runtime_statuses, 1, show_input=False)
    params["createdTimeTo"] = _durable_time(second)
    async for page in durable_pages(http, base, params, max_pages=MAX_PROBE_PAGES):
        if page:
            return True
    return False


Key = tuple[int, str]


# The accepted instances read so far, by instance id: their sort key and list entry.
_Found = dict[str, tuple[Key, dict[str, Any]]]


async def newest_first(
    binding_json: str,
    runtime_statuses: list[str] | None,
    accept: Callable[[dict[str, Any]], dict[str, Any] | None],
    *,
    limit: int,
    after: ListCursor | None,
    now: float,
    windows: ListWindows = LIST_WINDOWS,
    http: httpx.AsyncClient | None = None,
) -> tuple[list[dict[str, Any]], ListCursor | None]:
    """One page of accepted instances, newest first, reading windows of created time backwards.

    The Durable list API is not ordered by time (Azure Storage lists by partition key, devhost by
    created time), so no page is read whole: a window [from, to] of whole seconds is read completely,
    then the next older one, doubling its width while the results are sparse, until the page is full
    (plus one, to know there is more) or nothing older exists. Every job in a window created at or
    after its start second sorts before every job in older windows, so the page is exact; the cost
    follows the jobs per window, not the size of the store.
    """
    base = str(json.loads(binding_json)["rpcBaseUrl"])
    upper: Key | None = (after.t, after.id) if after else None
    # Jobs of the cursor's second are at most t + 1 (the API's times have whole seconds).
    to_s: int | None = after.t + 1 if after else None
    edge = to_s if to_s is not None else int(now) + 1
    width = after.w if after else windows.first_s
    found: _Found = {}
    async with contextlib.AsyncExitStack() as stack:
        client = http if http is not None else await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))
        for _ in range(windows.max_windows):
            start = max(0, edge - width)
            params = _window_params(runtime_statuses, windows.page_size, start, to_s)
            read = await _read_window(client, base, params, upper, accept, found)
            if len(found) > limit:
                return _full_page(found, limit, width, read)
            if start == 0 or not await _exists_before(client, base, runtime_statuses, start):
                break
            to_s = edge = start
            width = min(width * 2, MAX_WINDOW_S)
        else:
            # Out of windows for this request: everything at or after ``edge`` is on this page.
            return [item for _, item in _ranked(found)], ListCursor(t=edge, id="", w=width)
    return [item for _, item in _ranked(found)], None


def _window_params(runtime_statuses: list[str] | None, page_size: int, start: int, to_s: int | None) -> dict[str, str]:
    """The list query of one window of created time, [start, to_s] (open-ended when ``to_s`` is None)."""
    params = _list_params(runtime_statuses, page_size, show_input=True)
    params["createdTimeFrom"] = _durable_time(start)
    if to_s is not None:
        params["createdTimeTo"] = _durable_time(to_s)
    return params


async def _read_window(
    client: httpx.AsyncClient,
    base: str,
    params: dict[str, str],
    upper: Key | None,
    accept: Callable[[dict[str, Any]], dict[str, Any] | None],
    found: _Found,
) -> int:
    """Read one window whole, adding what ``accept`` takes to ``found``; how many instances it held."""
    read = 0
    async for page in durable_pages(client, base, params):
        read += len(page)
        for data in page:
            _take(data, upper, accept, found)
    return read


def _take(
    data: dict[str, Any], upper: Key | None, accept: Callable[[dict[str, Any]], dict[str, Any] | None], found: _Found
) -> None:
    """Add one instance to ``found`` unless it is unkeyed, already there, not before ``upper`` or not accepted."""
    second, job_id = _created_second(data), data.get("instanceId")
    if second is None or not isinstance(job_id, str) or job_id in found:
        return
    key = (second, job_id)
    if upper is not None and key >= upper:
        return
    item = accept(data)
    if item is not None:
        found[job_id] = (key, item)


def _ranked(found: _Found) -> list[tuple[Key, dict[str, Any]]]:
    """The found instances, newest first."""
    return sorted(found.values(), key=lambda kv: kv[0], reverse=True)


def _full_page(found: _Found, limit: int, width: int, read: int) -> tuple[list[dict[str, Any]], ListCursor]:
    """The newest ``limit`` instances found, and the cursor just past the last of them."""
    ranked = _ranked(found)[:limit]
    # A window that read far more than a page: start the next page with a narrower one.
    next_width = max(1, width // 2) if read > 4 * (limit + 1) and width > 1 else width
    last = ranked[-1][0]
    return [item for _, item in ranked], ListCursor(t=last[0], id=last[1], w=next_width)


def list_item(data: dict[str, Any], caller: Caller, wanted: str | None) -> dict[str, Any] | None:
    """The list entry of one Durable instance, or None when it is not a job this caller may see."""
    job_input = decode(data.get("input"))
    if data.get("name") != ORCHESTRATOR_NAME or not caller.sees(job_input):
        return None
    custom = data.get("customStatus")
    try:
        state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    except ValidationError:
        state = None
    current = job_status(data.get("runtimeStatus"), state, decode(data.get("output")))
    if wanted and current != wanted:
        return None
    question = job_input.get("request", {}).get("question") if isinstance(job_input, dict) else None
    owner = job_input.get("owner") if isinstance(job_input, dict) else None
    return {
        "id": data.get("instanceId"),
        "status": current,
        "question": question,
        # Display name of who started it (None without Easy Auth): admins see everyone's jobs.
        "owner": owner.get("name") if isinstance(owner, dict) else None,
        "created_at": data.get("createdTime"),
        "updated_at": data.get("lastUpdatedTime"),
    }
