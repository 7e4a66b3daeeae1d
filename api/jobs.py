"""The job API: submit, view, answer, cancel and list jobs. Thin handlers over the Durable client."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func
import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import Caller
from api.common import check_tools, forks_of, int_param, owned_status, parse_body, request_caller, route_auth_level
from api.contract.bodies import AnswerAccepted, Cancelling, JobAccepted, JobList, JobListItem, dump_body
from api.costs import part_histories
from api.errors import ApiError, guarded, json_response
from api.job_costs import attach_costs, remember
from api.view import build_job_view, decode, job_status
from shared.jobs.models import (
    ORCHESTRATOR_NAME,
    RUNNING_RUNTIME,
    TERMINAL_RUNTIME,
    JobInput,
    JobOwner,
    JobRequest,
    JobState,
    RetryPolicy,
    UserAnswer,
)

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
STATUS_FILTERS = {"pending", "planning", "running", "waiting_for_user", "completed", "failed", "cancelled"}
RUNTIME_FOR = {
    "pending": [df.OrchestrationRuntimeStatus.Pending],
    "planning": [df.OrchestrationRuntimeStatus.Running],
    "running": [df.OrchestrationRuntimeStatus.Running],
    "waiting_for_user": [df.OrchestrationRuntimeStatus.Running],
    "completed": [df.OrchestrationRuntimeStatus.Completed],
    "failed": [df.OrchestrationRuntimeStatus.Completed, df.OrchestrationRuntimeStatus.Failed],
    "cancelled": [df.OrchestrationRuntimeStatus.Terminated],
}


def _origin(req: func.HttpRequest) -> str:
    parts = urlsplit(req.url)
    return f"{parts.scheme}://{parts.netloc}"


def job_links(req: func.HttpRequest, job_id: str) -> dict[str, str]:
    """Absolute links to the job's endpoints, from the caller's origin."""
    base = f"{_origin(req)}/api/jobs/{job_id}"
    return {"status": base, "feedback": f"{base}/feedback", "cancel": f"{base}/cancel", "events": f"{base}/events"}


def resolve_policy(request: JobRequest, more_models: list[str] | None = None) -> RetryPolicy:
    """Read the retry policy and prices from settings once, at submit time (the orchestrator can't).

    ``more_models``: models a run's agents name themselves, priced for its quote too.
    """
    from shared.providers.clients import get_clients
    from shared.runtime.pricing import tool_prices

    clients = get_clients()
    settings = clients.settings
    models = request.constraints.allowed_models or [_default_model(settings)]
    prices = settings.model_prices
    return RetryPolicy(
        max_attempts_per_model=settings.job_max_step_attempts,
        first_retry_ms=settings.job_retry_first_interval_ms,
        user_wait_seconds=settings.job_user_wait_timeout_seconds,
        output_price={m: prices[m].output_per_million / 1_000_000 for m in models if m in prices},
        tool_price=tool_prices(list(request.tools), settings.tool_prices),
        # The infrastructure prices this job keeps for budget.max_cost (the table in force now).
        call_prices=_call_prices(settings),
        # The prices of its quote (shared/jobs/quote.py), from the same table version.
        quote_prices=_quote_prices(settings, list(dict.fromkeys([*models, *(more_models or [])]))),
    )


def _call_prices(settings: Any) -> Any:
    """The price table's per-call prices now; a table that cannot be read is a configuration error (503)."""
    from shared.runtime.price_tables import call_prices

    try:
        return call_prices(settings, datetime.now(UTC).isoformat())
    except (OSError, ValueError) as exc:
        raise ApiError(503, "CONFIG_ERROR", f"invalid setting COST_PRICE_TABLE: {str(exc)[:200]}") from exc


def _quote_prices(settings: Any, models: list[str]) -> Any:
    """The price table's prices for the job's quote now; a table that cannot be read is a configuration error."""
    from shared.runtime.price_tables import quote_prices

    try:
        return quote_prices(settings, datetime.now(UTC).isoformat(), models)
    except (OSError, ValueError) as exc:
        raise ApiError(503, "CONFIG_ERROR", f"invalid setting COST_PRICE_TABLE: {str(exc)[:200]}") from exc


def _default_model(settings: Any) -> str:
    if settings.llm_provider == "azure_openai":
        return str(settings.azure_openai_chat_deployment)
    if settings.llm_provider == "openai":
        return str(settings.openai_model)
    return "offline"


async def submit(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Accept a job and start its orchestration."""
    caller = request_caller(req)
    request = parse_body(req, JobRequest, "a 'question'")
    check_tools(request)
    who = caller.principal
    owner = JobOwner(id=who.id, name=who.name, idp=who.idp, roles=sorted(who.roles)[:64]) if who else None
    from shared.runtime import telemetry

    job_id = new_job_id()
    # The job's trace starts here; its W3C context rides in the input to every activity.
    with telemetry.job_span(job_id=job_id):
        job = JobInput(
            job_id=job_id,
            request=request,
            owner=owner,
            policy=resolve_policy(request),
            trace=telemetry.inject_trace_context(),
        )
        await client.start_new(ORCHESTRATOR_NAME, job_id, job.model_dump(mode="json"))
    links = job_links(req, job_id)
    return json_response(
        dump_body(JobAccepted(id=job_id, status="pending", links=links)),
        202,
        headers={"Location": links["status"], "Retry-After": "1"},
    )


async def view(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """The job view."""
    caller = request_caller(req)
    cursor = int_param(req, "log_cursor", 0, 0, 10_000_000)
    limit = int_param(req, "log_limit", 100, 1, 1000)
    status = await owned_status(client, job_id, caller, history=True)
    from shared.runtime.settings import get_settings

    await repair_delivery(client, job_id, status)
    retention = get_settings().job_history_retention_days
    parts = await part_histories(client, job_id, status)  # a finished run's parts, for its cost
    view_body = build_job_view(
        status, job_links(req, job_id), log_cursor=cursor, log_limit=limit, retention_days=retention, parts=parts
    )
    view_body.forks = forks_of(job_id)
    remember(job_id, status, view_body.cost)  # an ended job's cost, kept once for the list (api/job_costs.py)
    return json_response(view_body.dump())


async def feedback(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """Answer the question a waiting job asks; resumes it exactly once.

    The same answer posted again (a client that got no response) is accepted again (202) and, while the
    question still waits, delivered again: that repairs a claim whose delivery an app crash cut short.
    """
    caller = request_caller(req)
    answer = parse_body(req, UserAnswer, "an 'answer'")
    status = await owned_status(client, job_id, caller)
    custom = status.get("customStatus")
    state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    waiting = state.waiting if state else None
    waits_here = status.get("runtimeStatus") not in TERMINAL_RUNTIME and waiting is not None
    if answer.question_id is not None and not (waits_here and waiting and answer.question_id == waiting.question_id):
        # A question the job no longer waits on may be one it took this very answer to: accepted again.
        if _answered_before(job_id, answer.question_id, answer):
            return _accepted(job_id, answer.question_id, repeated=True)
    if status.get("runtimeStatus") in TERMINAL_RUNTIME or waiting is None:
        current = job_status(status.get("runtimeStatus"), state, decode(status.get("output")))
        raise ApiError(409, "JOB_NOT_WAITING", f"job {job_id} is {current}, not waiting for an answer")
    # An answer resumes exactly the question the user saw: one without a question id could answer a later one.
    if answer.question_id is None:
        raise ApiError(
            409,
            "STALE_QUESTION",
            f"feedback must name the question it answers; the job is waiting on question {waiting.question_id}",
            field="question_id",
        )
    if answer.question_id != waiting.question_id:
        raise ApiError(
            409,
            "STALE_QUESTION",
            f"question {answer.question_id} is not the one waiting; the job is waiting on question "
            f"{waiting.question_id}",
            field="question_id",
        )
    if not waiting.free_text and answer.action() not in waiting.options:
        raise ApiError(400, "INVALID_ANSWER", f"answer must be one of {waiting.options}", field="answer")
    if answer.action() == "edit" and waiting.kind in ("error", "approval"):
        _check_edit(answer, waiting.step_kind or _kind_of(waiting.step_id, state))
    target = _waiting_instance(job_id, waiting.instance)
    # Only a valid answer claims the question: an invalid one leaves it open for a corrected answer.
    from shared.runtime.answer_claims import AnswerRecord, get_claims
    from shared.runtime.settings import get_settings

    settings = get_settings()
    claims = get_claims(settings)
    record = AnswerRecord.of(waiting.question_id, target, answer.answer)
    repeated = False
    if not claims.claim(job_id, waiting.question_id, record):
        prior = claims.recorded(job_id, waiting.question_id)
        if prior is None or not prior.same_answer(record):
            raise ApiError(
                409, "ALREADY_ANSWERED", f"question {waiting.question_id} was already answered", field="question_id"
            )
        # The same answer again while the question still waits: its first delivery may have been cut short.
        # A second event is harmless (the orchestrator takes answer:<question id> once), a lost one is not.
        record, repeated = prior, True
    elif settings.answer_claim_pause_s:
        await asyncio.sleep(settings.answer_claim_pause_s)  # test hook: the window between claim and delivery
    await client.raise_event(target, f"answer:{waiting.question_id}", record.payload())
    _nudge_streams(job_id)
    return _accepted(job_id, waiting.question_id, repeated=repeated)


def _accepted(job_id: str, question_id: str, *, repeated: bool) -> func.HttpResponse:
    """202 for an answer taken; ``repeated`` when it is one the job had taken already (posted again)."""
    accepted = AnswerAccepted(id=job_id, question_id=question_id, accepted=True)
    if repeated:
        accepted.repeated = True
    return json_response(dump_body(accepted), 202)


def _answered_before(job_id: str, question_id: str, answer: UserAnswer) -> bool:
    """For a question the job does not wait on: True when this answer was the one it took, 409
    ALREADY_ANSWERED when another one was, False when the question was never answered here."""
    from shared.runtime.answer_claims import AnswerRecord, get_claims
    from shared.runtime.settings import get_settings

    claims = get_claims(get_settings())
    prior = claims.recorded(job_id, question_id)
    if prior is not None and prior.same_answer(AnswerRecord.of(question_id, prior.instance, answer.answer)):
        return True
    if prior is not None or claims.claimed(job_id, question_id):
        raise ApiError(409, "ALREADY_ANSWERED", f"question {question_id} was already answered", field="question_id")
    return False


# A claim this old whose question still waits lost its delivery (an app died between the two writes); a
# younger one may be on its way. Each process looks at one question at most once per REPAIR_EVERY_S.
REPAIR_AFTER_S = 5.0
REPAIR_EVERY_S = 10.0
_repair_checked: dict[tuple[str, str], float] = {}
_repair_lock = threading.Lock()


async def repair_delivery(client: df.DurableOrchestrationClient, job_id: str, status: dict[str, Any]) -> bool:
    """Deliver again a claimed answer whose question the job still waits on (read with the job view).

    Cheap: one claims read per waiting question and process every REPAIR_EVERY_S. Safe: a second event
    for a question is ignored by the orchestrator, which waits for ``answer:<question id>`` once.
    """
    custom = status.get("customStatus")
    if status.get("runtimeStatus") in TERMINAL_RUNTIME or not isinstance(custom, dict):
        return False
    waiting = JobState.model_validate(custom).waiting
    if waiting is None:
        return False
    key, now = (job_id, waiting.question_id), time.monotonic()
    with _repair_lock:
        if now - _repair_checked.get(key, -REPAIR_EVERY_S) < REPAIR_EVERY_S:
            return False
        _repair_checked[key] = now
        if len(_repair_checked) > 10_000:  # bounded: the oldest entries go first
            for old in sorted(_repair_checked, key=_repair_checked.__getitem__)[:5_000]:
                del _repair_checked[old]
    from shared.runtime.answer_claims import get_claims
    from shared.runtime.settings import get_settings

    try:
        record = get_claims(get_settings()).recorded(job_id, waiting.question_id)
    except Exception:  # the view must answer even when the claims store does not; the next read tries again
        logger.warning("could not read the answer claim of job %s", job_id, exc_info=True)
        return False
    if record is None or time.time() - record.claimed_s < REPAIR_AFTER_S:
        if record is not None:
            with _repair_lock:  # look again soon: it is repaired once it is old enough
                _repair_checked.pop(key, None)
        return False
    if waiting.instance is not None and not waiting.instance.startswith(f"{job_id}:"):
        return False  # never happens (the orchestrator names its parts so); the view must answer anyway
    target = waiting.instance or job_id
    logger.warning("answer to %s of job %s was claimed but not delivered; delivering it again", key[1], job_id)
    await client.raise_event(target, f"answer:{waiting.question_id}", record.payload())
    return True


def _nudge_streams(job_id: str) -> None:
    """The job changes now: its event stream on this instance, if any, stops waiting out an idle interval."""
    from api.events import FEEDS

    FEEDS.nudge(job_id)


def _waiting_instance(job_id: str, instance: str | None) -> str:
    """The instance that waits for the answer: the job, or a part of its run (a branch, a sub-workflow).

    The job's orchestrator names the part; still, an answer only ever goes to the job or to a part of it.
    """
    if instance is None:
        return job_id
    if not instance.startswith(f"{job_id}:"):
        raise ApiError(409, "JOB_NOT_WAITING", f"job {job_id} is not waiting for an answer it can take here")
    return instance


def _kind_of(step_id: str | None, state: JobState | None) -> str | None:
    """The kind of one of the job's steps."""
    return next((s.kind for s in state.steps if s.id == step_id), None) if state else None


def _check_edit(answer: UserAnswer, kind: str | None) -> None:
    """400 INVALID_ANSWER naming the field when an edit sets anything the step's input model does not allow."""
    from shared.executors import StepInputError, check_edits, get_executor

    nested = isinstance(answer.answer, dict) and isinstance(answer.answer.get("input"), dict)
    prefix = "answer.input" if nested else "answer"
    try:
        checked = check_edits(kind or "", answer.edits())
    except StepInputError as exc:
        hint = ' e.g. {"action": "edit", "sql": "SELECT ..."}' if exc.field is None else ""
        field = f"{prefix}.{exc.field}" if exc.field else prefix
        raise ApiError(400, "INVALID_ANSWER", f"invalid edit: {exc.message}{hint}", field=field) from exc
    # sql: null with a new question asks for a fresh draft; otherwise an SQL edit must be a statement that passes.
    spec = get_executor(kind or "")
    if (
        spec is not None
        and spec.runs_sql
        and "sql" in checked
        and (checked["sql"] is not None or "question" not in checked)
    ):
        _check_sql_edit(checked["sql"], f"{prefix}.sql")


def _check_sql_edit(sql: Any, field: str) -> None:
    """400 INVALID_ANSWER with the guard's reason when an edited statement would be rejected when it runs."""
    from shared.executors.execute_azure_sql import guard_step_sql
    from shared.providers.clients import get_clients
    from shared.providers.sql.family import dialect_for

    if not isinstance(sql, str) or not sql.strip():
        raise ApiError(400, "INVALID_ANSWER", "invalid edit: sql must be a non-empty SQL statement", field=field)
    clients = get_clients()
    # The step's own guard, sensitive tables included: a human sees such a statement again for approval.
    # The dialect comes from settings: building the database client here could need its driver.
    dialect = dialect_for(clients.settings)
    verdict = guard_step_sql(sql, clients, dialect)
    if not verdict.accepted:
        raise ApiError(
            400, "INVALID_ANSWER", f"invalid edit: SQL rejected ({verdict.reason_code}): {verdict.message}", field=field
        )


async def cancel(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """Cancel a job that has not finished; its completed steps stay in the view."""
    status = await owned_status(client, job_id, request_caller(req))
    if status.get("runtimeStatus") not in RUNNING_RUNTIME:
        raise ApiError(409, "JOB_FINISHED", f"job {job_id} has already finished")
    await client.terminate(job_id, "cancelled by the user")
    _nudge_streams(job_id)
    job_input = decode(status.get("input"))
    if isinstance(job_input, dict) and job_input.get("run"):
        await terminate_parts(client, job_id)
    return json_response(dump_body(Cancelling(id=job_id, status="cancelling")), 202)


async def terminate_parts(client: df.DurableOrchestrationClient, instance_id: str) -> list[str]:
    """Terminate the parts of a cancelled run still running (branches, sub-workflows, theirs in turn).

    Terminating an orchestration leaves its sub-orchestrations running. Every part's id starts with
    ``<run id>:`` (orchestrators/workflow.py names them so), so one prefix query finds them at any depth.
    """
    base = str(client._orchestration_bindings.rpc_base_url)  # the binding's public RPC base URL
    params = {"instanceIdPrefix": f"{instance_id}:", "runtimeStatus": ",".join(sorted(RUNNING_RUNTIME)), "top": "500"}
    stopped: list[str] = []
    async with httpx.AsyncClient(timeout=30.0) as http:
        async for page in _durable_pages(http, base, params):
            for data in page:
                child = data.get("instanceId")
                if isinstance(child, str) and child.startswith(f"{instance_id}:"):
                    await client.terminate(child, "the run was cancelled")
                    stopped.append(child)
    return stopped


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
    text = data.get("createdTime")
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


async def _durable_pages(
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
        async for page in _durable_pages(client, base, params):
            found.extend(page)
    return found


async def _exists_before(http: httpx.AsyncClient, base: str, runtime_statuses: list[str] | None, second: int) -> bool:
    """Whether any instance was created at or before ``second`` (one small query, not a scan of results)."""
    params = _list_params(runtime_statuses, 1, show_input=False)
    params["createdTimeTo"] = _durable_time(second)
    async for page in _durable_pages(http, base, params, max_pages=MAX_PROBE_PAGES):
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
    async for page in _durable_pages(client, base, params):
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


def _list_item(data: dict[str, Any], caller: Caller, wanted: str | None) -> dict[str, Any] | None:
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


async def list_jobs(
    req: func.HttpRequest, binding_json: str, *, windows: ListWindows = LIST_WINDOWS
) -> func.HttpResponse:
    """The caller's jobs (all jobs for admins and without Easy Auth), newest first, paged with a cursor."""
    caller = request_caller(req)
    wanted = req.params.get("status")
    if wanted is not None and wanted not in STATUS_FILTERS:
        raise ApiError(400, "INVALID_PARAMETER", f"status must be one of {sorted(STATUS_FILTERS)}", field="status")
    limit = int_param(req, "limit", 20, 1, 100)
    after = decode_cursor(req.params["cursor"]) if req.params.get("cursor") else None
    runtime = [s.value for s in RUNTIME_FOR[wanted]] if wanted else None
    page, cursor = await newest_first(
        binding_json,
        runtime,
        lambda data: _list_item(data, caller, wanted),
        limit=limit,
        after=after,
        now=time.time(),
        windows=windows,
    )
    await attach_costs(page, binding_json)  # each ended job's kept cost summary (api/job_costs.py)
    jobs = [JobListItem.model_validate(item) for item in page]
    return json_response(dump_body(JobList(jobs=jobs, next_cursor=encode_cursor(cursor) if cursor else None)))


def register(bp: df.Blueprint) -> None:
    """Register the job routes on the blueprint."""
    level = route_auth_level()

    @bp.route(route="jobs", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def submit_job(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/jobs."""
        return await guarded("submit_job", lambda: submit(req, client))

    # The raw binding (its JSON is a public contract) gives the RPC base URL for continuation-token paging.
    @bp.route(route="jobs", methods=["GET"], auth_level=level)
    @bp.generic_input_binding(arg_name="client", type="durableClient")
    async def list_job_views(req: func.HttpRequest, client: str) -> func.HttpResponse:
        """GET /api/jobs."""
        return await guarded("list_jobs", lambda: list_jobs(req, client))

    @bp.route(route="jobs/{job_id}", methods=["GET"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def get_job(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """GET /api/jobs/{job_id}."""
        return await guarded("get_job", lambda: view(req, client, req.route_params["job_id"]))

    @bp.route(route="jobs/{job_id}/feedback", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def answer_job(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/jobs/{job_id}/feedback."""
        return await guarded("answer_job", lambda: feedback(req, client, req.route_params["job_id"]))

    @bp.route(route="jobs/{job_id}/cancel", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def cancel_job(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/jobs/{job_id}/cancel."""
        return await guarded("cancel_job", lambda: cancel(req, client, req.route_params["job_id"]))
