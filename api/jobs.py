"""The job API: submit, view, answer, cancel and list jobs. Thin handlers over the Durable client."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any, TypeVar
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func
import httpx
from pydantic import BaseModel, ValidationError

from api.auth import Caller, caller_of
from api.errors import ApiError, from_validation_error, guarded, json_response
from api.view import TERMINAL_RUNTIME, build_view, decode, job_status
from shared.jobs import ORCHESTRATOR_NAME, JobInput, JobOwner, JobRequest, JobState, RetryPolicy, UserAnswer

M = TypeVar("M", bound=BaseModel)
RUNNING_RUNTIME = {"Running", "Pending", "ContinuedAsNew", "Suspended"}
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
    return {"status": base, "feedback": f"{base}/feedback", "cancel": f"{base}/cancel"}


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


def _parse_body(req: func.HttpRequest, model: type[M], needs: str) -> M:
    raw = req.get_body() or b""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(
            413, "PAYLOAD_TOO_LARGE", f"the body is {len(raw)} bytes; at most {MAX_BODY_BYTES} bytes are accepted"
        )
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body nests deeper than {MAX_JSON_DEPTH} levels") from exc
    if _depth_exceeds(body, MAX_JSON_DEPTH):
        raise ApiError(400, "INVALID_JSON", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_REQUEST", f"the body must be a JSON object with {needs}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from exc


def _int_param(req: func.HttpRequest, name: str, default: int, low: int, high: int) -> int:
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


def resolve_policy(request: JobRequest) -> RetryPolicy:
    """Read the retry policy and prices from settings once, at submit time (the orchestrator can't)."""
    from shared.clients import get_clients

    clients = get_clients()
    settings = clients.settings
    models = request.constraints.allowed_models or [_default_model(settings)]
    prices = settings.model_prices
    return RetryPolicy(
        max_attempts_per_model=settings.job_max_step_attempts,
        first_retry_ms=settings.job_retry_first_interval_ms,
        user_wait_seconds=settings.job_user_wait_timeout_seconds,
        output_price={m: prices[m].output_per_million / 1_000_000 for m in models if m in prices},
    )


def _default_model(settings: Any) -> str:
    if settings.llm_provider == "azure_openai":
        return str(settings.azure_openai_chat_deployment)
    if settings.llm_provider == "openai":
        return str(settings.openai_model)
    return "offline"


def request_caller(req: func.HttpRequest) -> Caller:
    """The caller, from the Easy Auth headers when App Service Authentication is on (401 without a principal)."""
    from shared.settings import get_settings

    settings = get_settings()
    return caller_of(req.headers, easy_auth=settings.website_auth_enabled, admin_role=settings.jobs_admin_role)


def _route_auth_level() -> func.AuthLevel | None:
    """ANONYMOUS when Easy Auth is on (the platform signs the caller in), else the app's function-key level."""
    from shared.settings import get_settings

    try:
        easy_auth = get_settings().website_auth_enabled
    except ValueError:  # shared.settings.ConfigError
        # Bad settings are reported on every request; until then keep the stricter level (key required).
        return None
    return func.AuthLevel.ANONYMOUS if easy_auth else None


async def _status(
    client: df.DurableOrchestrationClient, job_id: str, caller: Caller, *, history: bool = False
) -> dict[str, Any]:
    status = await client.get_status(job_id, show_history=history, show_history_output=history, show_input=True)
    data = status.to_json() if status else {}
    # Another user's job answers exactly like a missing one, so job ids do not leak.
    if not status or status.name != ORCHESTRATOR_NAME or not caller.sees(decode(data.get("input"))):
        raise ApiError(404, "JOB_NOT_FOUND", f"no job with id {job_id!r}")
    data["historyEvents"] = getattr(status, "historyEvents", None) or data.get("history") or []
    return data


async def submit(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Accept a job and start its orchestration."""
    caller = request_caller(req)
    request = _parse_body(req, JobRequest, "a 'question'")
    who = caller.principal
    owner = JobOwner(id=who.id, name=who.name, idp=who.idp) if who else None
    from shared import telemetry

    job_id = uuid.uuid4().hex
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
        {"id": job_id, "status": "pending", "links": links},
        202,
        headers={"Location": links["status"], "Retry-After": "1"},
    )


async def view(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """The job view."""
    caller = request_caller(req)
    cursor = _int_param(req, "log_cursor", 0, 0, 10_000_000)
    limit = _int_param(req, "log_limit", 100, 1, 1000)
    status = await _status(client, job_id, caller, history=True)
    return json_response(build_view(status, job_links(req, job_id), log_cursor=cursor, log_limit=limit))


async def feedback(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """Answer the question a waiting job asks; resumes it exactly once."""
    caller = request_caller(req)
    answer = _parse_body(req, UserAnswer, "an 'answer'")
    status = await _status(client, job_id, caller)
    custom = status.get("customStatus")
    state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    waiting = state.waiting if state else None
    if status.get("runtimeStatus") in TERMINAL_RUNTIME or waiting is None:
        current = job_status(status.get("runtimeStatus"), state, decode(status.get("output")))
        raise ApiError(409, "JOB_NOT_WAITING", f"job {job_id} is {current}, not waiting for an answer")
    if answer.question_id is not None and answer.question_id != waiting.question_id:
        raise ApiError(
            409,
            "STALE_QUESTION",
            f"question {answer.question_id} was already answered; the job now asks {waiting.question_id}",
        )
    if not waiting.free_text and answer.action() not in waiting.options:
        raise ApiError(400, "INVALID_ANSWER", f"answer must be one of {waiting.options}", field="answer")
    if answer.action() == "edit" and waiting.kind in ("error", "approval"):
        _check_edit(answer, waiting.step_id, state)
    payload = {"answer": answer.answer, "question_id": waiting.question_id}
    await client.raise_event(job_id, f"answer:{waiting.question_id}", payload)
    return json_response({"id": job_id, "question_id": waiting.question_id, "accepted": True}, 202)


def _check_edit(answer: UserAnswer, step_id: str | None, state: JobState | None) -> None:
    """400 INVALID_ANSWER naming the field when an edit sets anything the step's input model does not allow."""
    from shared.executors import StepInputError, check_edits

    kind = next((s.kind for s in state.steps if s.id == step_id), None) if state else None
    nested = isinstance(answer.answer, dict) and isinstance(answer.answer.get("input"), dict)
    prefix = "answer.input" if nested else "answer"
    try:
        check_edits(kind or "", answer.edits())
    except StepInputError as exc:
        hint = ' e.g. {"action": "edit", "sql": "SELECT ..."}' if exc.field is None else ""
        field = f"{prefix}.{exc.field}" if exc.field else prefix
        raise ApiError(400, "INVALID_ANSWER", f"invalid edit: {exc.message}{hint}", field=field) from exc


async def cancel(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """Cancel a job that has not finished; its completed steps stay in the view."""
    status = await _status(client, job_id, request_caller(req))
    if status.get("runtimeStatus") not in RUNNING_RUNTIME:
        raise ApiError(409, "JOB_FINISHED", f"job {job_id} has already finished")
    await client.terminate(job_id, "cancelled by the user")
    return json_response({"id": job_id, "status": "cancelling"}, 202)


def _encode_cursor(created: str, job_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created}|{job_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        created, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "INVALID_PARAMETER", "cursor is not valid", field="cursor") from exc
    return created, job_id


# Newest-first needs every matching instance (Durable lists are not sorted by time); bound the scan.
MAX_LISTED_INSTANCES = 10_000
LIST_PAGE = 500


async def durable_instances(
    binding_json: str, runtime_statuses: list[str] | None, *, page_size: int = LIST_PAGE
) -> list[dict[str, Any]]:
    """All instances the Durable HTTP API lists, following continuation tokens (the SDK reads one page)."""
    binding = json.loads(binding_json)
    base = str(binding["rpcBaseUrl"])
    params = {"top": str(page_size), "showInput": "true"}
    if runtime_statuses:
        params["runtimeStatus"] = ",".join(runtime_statuses)
    found: list[dict[str, Any]] = []
    token: str | None = None
    async with httpx.AsyncClient(timeout=30.0) as http:
        while len(found) < MAX_LISTED_INSTANCES:
            headers = {"x-ms-continuation-token": token} if token else {}
            resp = await http.get(f"{base}instances/", params=params, headers=headers)
            if resp.status_code != 200:
                raise RuntimeError(f"the Durable list API answered {resp.status_code}")
            found.extend(resp.json())
            token = resp.headers.get("x-ms-continuation-token")
            if not token or token == "null":
                break
    return found


async def list_jobs(req: func.HttpRequest, binding_json: str) -> func.HttpResponse:
    """The caller's jobs (all jobs for admins and without Easy Auth), newest first, paged with a cursor."""
    caller = request_caller(req)
    wanted = req.params.get("status")
    if wanted is not None and wanted not in STATUS_FILTERS:
        raise ApiError(400, "INVALID_PARAMETER", f"status must be one of {sorted(STATUS_FILTERS)}", field="status")
    limit = _int_param(req, "limit", 20, 1, 100)
    after = _decode_cursor(req.params["cursor"]) if req.params.get("cursor") else None
    runtime = [s.value for s in RUNTIME_FOR[wanted]] if wanted else None
    items: list[dict[str, Any]] = []
    for data in await durable_instances(binding_json, runtime):
        job_input = decode(data.get("input"))
        if data.get("name") != ORCHESTRATOR_NAME or not caller.sees(job_input):
            continue
        custom = data.get("customStatus")
        state = JobState.model_validate(custom) if isinstance(custom, dict) else None
        current = job_status(data.get("runtimeStatus"), state, decode(data.get("output")))
        if wanted and current != wanted:
            continue
        question = job_input.get("request", {}).get("question") if isinstance(job_input, dict) else None
        owner = job_input.get("owner") if isinstance(job_input, dict) else None
        items.append(
            {
                "id": data.get("instanceId"),
                "status": current,
                "question": question,
                # Display name of who started it (None without Easy Auth): admins see everyone's jobs.
                "owner": owner.get("name") if isinstance(owner, dict) else None,
                "created_at": data.get("createdTime"),
                "updated_at": data.get("lastUpdatedTime"),
            }
        )
    items.sort(key=lambda j: (str(j["created_at"]), str(j["id"])), reverse=True)
    if after is not None:
        items = [j for j in items if (str(j["created_at"]), str(j["id"])) < after]
    page = items[:limit]
    next_cursor = _encode_cursor(str(page[-1]["created_at"]), str(page[-1]["id"])) if len(items) > limit else None
    return json_response({"jobs": page, "next_cursor": next_cursor})


def register(bp: df.Blueprint) -> None:
    """Register the job routes on the blueprint."""
    level = _route_auth_level()

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
