"""Fork a job at one of its steps, and compare two jobs (docs/fork.md).

``POST /api/jobs/{id}/fork`` checks the fork against the origin's recorded plan and history (the same pure
``fork_base`` the fork's orchestrator gets through its activity), the step edit against that step kind's
input model (and an edited SQL against the guard), and the job-level changes against the request models;
then it starts a new job whose input names only its origin and fork point. The new job's owner is the
caller: a fork never borrows the origin's owner, and another user's job answers 404 as for any access.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.common import check_tools, owned_status, parse_body, request_caller, route_auth_level
from api.compare import compare_views
from api.contract.bodies import Comparison, ForkAccepted, dump_body
from api.errors import ApiError, from_validation_error, guarded, json_response
from api.job_list import new_job_id
from api.jobs import job_links
from api.jobs import resolve_policy as _resolve_policy
from api.view import build_view, decode
from shared.jobs.fork import ForkError, edited_input, fork_base
from shared.jobs.models import (
    ORCHESTRATOR_NAME,
    ApprovalPolicy,
    ForkSpec,
    JobConstraints,
    JobInput,
    JobOwner,
    JobRequest,
)
from shared.jobs.plan import Plan

# Job-level changes a fork may carry; any other key of ``changes`` is one of the step's editable input fields.
JOB_CHANGES = ("constraints", "approval", "tools")
_FORK_ERROR_STATUS = {"INVALID_FORK_POINT": 400, "JOB_NOT_FINISHED": 409, "FORK_NOT_SUPPORTED": 409}


class ForkRequest(BaseModel):
    """Body of ``POST /api/jobs/{id}/fork``."""

    model_config = ConfigDict(extra="forbid")

    from_step: str = Field(min_length=1, max_length=64)
    # Step fields (question, sql, query), and constraints / approval (merged over the origin's) and tools.
    changes: dict[str, Any] = Field(default_factory=dict)


def _merged(section: str, model: type[BaseModel], old: dict[str, Any], new: Any) -> Any:
    """The origin's section with the fork's changes over it (one level deep, ``budget`` too), validated."""
    if not isinstance(new, dict):
        raise ApiError(400, "INVALID_REQUEST", f"changes.{section} must be a JSON object", field=f"changes.{section}")
    merged = {**old, **new}
    if isinstance(old.get("budget"), dict) and isinstance(new.get("budget"), dict):
        merged["budget"] = {**old["budget"], **new["budget"]}
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        err = from_validation_error(exc)
        field = f"changes.{section}.{err.field}" if err.field else f"changes.{section}"
        raise ApiError(400, "INVALID_REQUEST", f"changes.{section}: {err.message}", field=field) from exc


def forked_request(origin: JobRequest, changes: dict[str, Any]) -> JobRequest:
    """The fork's request: the origin's, with its constraints, approval policy and tools changed as asked."""
    update: dict[str, Any] = {}
    if "constraints" in changes:
        update["constraints"] = _merged(
            "constraints", JobConstraints, origin.constraints.model_dump(mode="json"), changes["constraints"]
        )
    if "approval" in changes:
        update["approval"] = _merged(
            "approval", ApprovalPolicy, origin.approval.model_dump(mode="json"), changes["approval"]
        )
    if "tools" in changes:
        try:
            update["tools"] = JobRequest.model_validate({"question": origin.question, "tools": changes["tools"]}).tools
        except ValidationError as exc:
            err = from_validation_error(exc)
            raise ApiError(400, "INVALID_REQUEST", f"changes.{err.message}", field=f"changes.{err.field}") from exc
    return origin.model_copy(update=update)


def step_edits(kind: str, edits: dict[str, Any], old_input: dict[str, Any]) -> dict[str, Any] | None:
    """The step's edited fields, checked against the kind's input model and (SQL) the guard; None for no edit."""
    from shared.executors import StepInputError, apply_edits, check_edits, get_executor

    if not edits:
        return None
    try:
        checked = check_edits(kind, edits)
        apply_edits(kind, old_input, checked)
    except StepInputError as exc:
        field = f"changes.{exc.field}" if exc.field else "changes"
        raise ApiError(400, "INVALID_REQUEST", f"invalid change of a {kind} step: {exc.message}", field=field) from exc
    spec = get_executor(kind)
    if spec is not None and spec.runs_sql and checked.get("sql") is not None:
        _check_sql(checked["sql"])
    return checked


def node_edits(node: dict[str, Any] | None, state_kind: str | None, edits: dict[str, Any]) -> dict[str, Any] | None:
    """A workflow node's edited inputs, checked like any edit: a step (or lookup tool) node's against its step
    kind's input model (and an SQL against the guard), an agent node's prompt; None for no edit.

    ``node`` is the fork point as the run's definition has it (None in a team: its agent nodes are compiled).
    """
    from shared.executors import StepInputError, check_edits, get_executor, lookup_kinds
    from shared.jobs.fork import NODE_EDIT_MODELS, NODE_EDIT_STEP_KIND

    if not edits:
        return None
    kind = str(node.get("kind")) if node else state_kind
    named = node.get(NODE_EDIT_STEP_KIND[kind]) if node is not None and kind in NODE_EDIT_STEP_KIND else None
    # A tool node edits as a step only when its tool is a lookup kind (a family tool's arguments are no step input).
    step_kind = str(named) if named is not None and (kind == "step" or named in lookup_kinds()) else None
    model = NODE_EDIT_MODELS.get(kind or "")
    if model is not None:
        try:
            return model.model_validate(edits).model_dump()
        except ValidationError as exc:
            err = from_validation_error(exc)
            field = f"changes.{err.field}" if err.field else "changes"
            message = f"invalid change of a {kind} node: {err.message}"
            raise ApiError(400, "INVALID_REQUEST", message, field=field) from exc
    if step_kind is None:
        field = f"changes.{next(iter(edits))}"
        what = f"a {kind} node" if kind else "this node"
        raise ApiError(400, "INVALID_REQUEST", f"{what} has no input a fork may edit", field=field)
    try:
        checked = check_edits(step_kind, edits)
    except StepInputError as exc:
        field = f"changes.{exc.field}" if exc.field else "changes"
        raise ApiError(
            400, "INVALID_REQUEST", f"invalid change of a {step_kind} node: {exc.message}", field=field
        ) from exc
    spec = get_executor(step_kind)
    if spec is not None and spec.runs_sql and checked.get("sql") is not None:
        _check_sql(checked["sql"])
    return checked


def _state_kind(status: dict[str, Any], step_id: str) -> str | None:
    """The kind the origin's state shows for a step (a team's compiled nodes have no definition to read)."""
    from shared.jobs.models import JobState

    custom = status.get("customStatus")
    try:
        state = JobState.model_validate(decode(custom) if custom else {})
    except ValidationError:
        return None
    return next((s.kind for s in state.steps if s.id == step_id), None)


def _check_sql(sql: Any) -> None:
    """400 with the guard's reason when an edited statement would be refused when it runs (the run guards it again)."""
    from shared.executors.execute_azure_sql import guard_step_sql
    from shared.providers.clients import get_clients
    from shared.providers.sql.family import dialect_for

    clients = get_clients()
    verdict = guard_step_sql(str(sql), clients, dialect_for(clients.settings))
    if not verdict.accepted:
        raise ApiError(
            400, "INVALID_REQUEST", f"SQL rejected ({verdict.reason_code}): {verdict.message}", field="changes.sql"
        )


async def fork(req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str) -> func.HttpResponse:
    """Start a fork of a finished job from one of its steps, with the changes asked for."""
    caller = request_caller(req)
    body = parse_body(req, ForkRequest, "a 'from_step'")
    status = await owned_status(client, job_id, caller, history=True)
    try:
        base = fork_base(status, body.from_step, _writes_answer())
    except ForkError as exc:
        raise ApiError(_FORK_ERROR_STATUS.get(exc.code, 409), exc.code, exc.message, field=exc.field) from exc
    origin = JobInput.model_validate(decode(status.get("input")))
    edits = {k: v for k, v in body.changes.items() if k not in JOB_CHANGES}
    if base.workflow is not None:
        if origin.fork is not None and origin.fork.from_step == body.from_step and origin.fork.input:
            edits = {**origin.fork.input, **edits}  # a fork of a fork at the same node keeps its origin's edit
        spec_input: dict[str, Any] = {}
        checked = node_edits(base.workflow.node, _state_kind(status, body.from_step), edits)
    elif base.plan is None:
        if edits:
            field = f"changes.{next(iter(edits))}"
            raise ApiError(400, "INVALID_REQUEST", f"an agent job's fork takes only {list(JOB_CHANGES)}", field=field)
        spec_input = {}
        checked = None
    else:
        spec = Plan.model_validate(base.plan).steps[base.index]
        spec_input = spec.input
        checked = step_edits(spec.kind, edits, spec.input)
    request = forked_request(origin.request, body.changes)
    try:
        check_tools(request)
    except ApiError as exc:
        raise ApiError(exc.status, exc.code, exc.message, field=f"changes.{exc.field}") from exc
    who = caller.principal
    from shared.runtime import telemetry

    new_id = new_job_id()
    with telemetry.job_span(job_id=new_id):
        job = JobInput(
            job_id=new_id,
            request=request,
            owner=JobOwner(id=who.id, name=who.name, idp=who.idp, roles=sorted(who.roles)[:64]) if who else None,
            policy=_resolve_policy(request),
            trace=telemetry.inject_trace_context(),
            fork=ForkSpec(origin=job_id, from_step=body.from_step, input=checked),
            # A workflow or team run stays pinned to the origin's definition versions and tools.
            run=origin.run,
        )
        await client.start_new(ORCHESTRATOR_NAME, new_id, job.model_dump(mode="json"))
    _ledger_add(job_id, new_id, body.from_step)
    links = job_links(req, new_id)
    step_input = edited_input(spec_input, checked) if checked and base.workflow is None else (checked or spec_input)
    accepted = {
        "id": new_id,
        "status": "pending",
        "forked_from": {"job": job_id, "step": body.from_step},
        "carried_over": [c.step.id for c in base.carried],
        "step_input": step_input,
        "links": links,
    }
    return json_response(
        dump_body(ForkAccepted.model_validate(accepted)),
        202,
        headers={"Location": links["status"], "Retry-After": "1"},
    )


def _ledger_add(origin: str, fork_id: str, from_step: str) -> None:
    from shared.runtime.fork_ledger import get_fork_ledger
    from shared.runtime.settings import get_settings

    get_fork_ledger(get_settings()).add(origin, fork_id, from_step)


async def compare(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str, other: str
) -> func.HttpResponse:
    """The structured difference of two jobs the caller may see (404 for either one it may not)."""
    caller = request_caller(req)
    first = await owned_status(client, job_id, caller, history=True)
    second = await owned_status(client, other, caller, history=True)
    views = [build_view(s, job_links(req, str(s.get("instanceId"))), log_limit=1) for s in (first, second)]
    return json_response(dump_body(Comparison.model_validate(compare_views(views[0], views[1]))))


def register(bp: df.Blueprint) -> None:
    """Register the fork and compare routes on the blueprint."""
    level = route_auth_level()

    @bp.route(route="jobs/{job_id}/fork", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def fork_job(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/jobs/{job_id}/fork."""
        return await guarded("fork_job", lambda: fork(req, client, req.route_params["job_id"]))

    @bp.route(route="jobs/{job_id}/compare/{other}", methods=["GET"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def compare_jobs(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """GET /api/jobs/{job_id}/compare/{other}."""
        return await guarded(
            "compare_jobs", lambda: compare(req, client, req.route_params["job_id"], req.route_params["other"])
        )


def _writes_answer() -> Any:
    """The registry's rule of which step kinds write the answer (a hybrid job's replans are rebuilt with it)."""
    from shared.executors import writes_answer

    return writes_answer
