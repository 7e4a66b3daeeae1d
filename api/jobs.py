"""The job API: submit, view, answer, cancel and list jobs. Thin handlers over the Durable client."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func
import httpx

from api.common import check_tools, forks_of, int_param, owned_status, parse_body, request_caller, route_auth_level
from api.contract.bodies import AnswerAccepted, Cancelling, JobAccepted, JobList, JobListItem, dump_body
from api.costs import part_histories
from api.errors import ApiError, guarded, json_response
from api.job_costs import attach_costs, remember
from api.job_list import (
    LIST_WINDOWS,
    ListWindows,
    decode_cursor,
    durable_pages,
    encode_cursor,
    list_item,
    new_job_id,
    newest_first,
)
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
        async for page in durable_pages(http, base, params):
            for data in page:
                child = data.get("instanceId")
                if isinstance(child, str) and child.startswith(f"{instance_id}:"):
                    await client.terminate(child, "the run was cancelled")
                    stopped.append(child)
    return stopped


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
        lambda data: list_item(data, caller, wanted),
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
