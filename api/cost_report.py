"""``GET /api/costs?from=&to=&group_by=user|workflow|model|meter``: what the caller's jobs cost, summed by group.

The ledgers (shared/runtime/ledger.py, the job view's ``cost``) of the jobs created in the range (ISO times;
default the last 7 days), owner-scoped as ``GET /api/jobs`` (all jobs for admins and without Easy Auth). At
most ``MAX_COST_JOBS`` newest jobs are read (each is one history read); past that the answer says ``truncated``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from api.common import request_caller, route_auth_level
from api.contract.bodies import CostReport, dump_body
from api.costs import part_histories
from api.errors import ApiError, from_validation_error, guarded, json_response
from api.job_list import durable_instances
from api.view import decode
from shared.jobs.models import ORCHESTRATOR_NAME
from shared.runtime.ledger import GroupBy, group_costs, view_cost

# Jobs one GET /api/costs prices (each is a history read); past that the answer says ``truncated``.
MAX_COST_JOBS = 200
DEFAULT_RANGE_S = 7 * 24 * 3600


class CostQuery(BaseModel):
    """The query of ``GET /api/costs``: a created-time range (default: the last 7 days) and a grouping."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    since: datetime | None = Field(default=None, alias="from")
    until: datetime | None = Field(default=None, alias="to")
    group_by: GroupBy = "meter"

    @field_validator("since", "until")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _facts(data: dict[str, Any]) -> dict[str, Any]:
    """What a job is grouped by: who started it (the owner's id) and what it runs (a workflow or team id)."""
    job_input = decode(data.get("input"))
    given = job_input if isinstance(job_input, dict) else {}
    owner, run = given.get("owner"), given.get("run")
    owner = owner if isinstance(owner, dict) else {}
    run = run if isinstance(run, dict) else {}
    return {"id": data.get("instanceId"), "user": owner.get("id") or "(no owner)", "workflow": run.get("id") or "ask"}


async def job_costs(req: func.HttpRequest, binding_json: str) -> func.HttpResponse:
    """What the caller's jobs created in a range cost, grouped by user, workflow, model or meter."""
    caller = request_caller(req)
    try:
        query = CostQuery.model_validate(dict(req.params))
    except ValidationError as exc:
        raise from_validation_error(exc) from exc
    until = query.until or datetime.now(UTC)
    since = query.since or until - timedelta(seconds=DEFAULT_RANGE_S)
    if since > until:
        raise ApiError(400, "INVALID_PARAMETER", "from must not be after to", field="from")
    found = await durable_instances(
        binding_json, None, created_from=int(since.timestamp()), created_to=int(until.timestamp()) + 1
    )
    mine = [data for data in found if data.get("name") == ORCHESTRATOR_NAME and caller.sees(decode(data.get("input")))]
    mine.sort(key=lambda data: str(data.get("createdTime") or ""), reverse=True)
    client = df.DurableOrchestrationClient(binding_json)
    gate = asyncio.Semaphore(8)

    async def priced(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        async with gate:
            job_id = str(data.get("instanceId"))
            status = await client.get_status(job_id, show_history=True, show_history_output=True, show_input=True)
            history = list(getattr(status, "historyEvents", None) or []) if status else []
            parts = await part_histories(
                client, job_id, {"runtimeStatus": data.get("runtimeStatus"), "historyEvents": history}
            )
            return _facts(data), view_cost(history, data.get("createdTime"), parts=parts)

    jobs = await asyncio.gather(*(priced(data) for data in mine[:MAX_COST_JOBS]))
    unreadable = [cost["error"] for _, cost in jobs if cost.get("error")]
    if unreadable:
        raise ApiError(503, "CONFIG_ERROR", unreadable[0])
    groups = group_costs(list(jobs), query.group_by)
    report = CostReport.model_validate(
        {
            "from": since.isoformat(),
            "to": until.isoformat(),
            "group_by": query.group_by,
            "currency": jobs[0][1]["currency"] if jobs else "USD",
            "total": round(sum(cost["total"] for _, cost in jobs), 10),
            "complete": all(cost["complete"] for _, cost in jobs),
            "jobs": len(jobs),
            "truncated": len(mine) > MAX_COST_JOBS,
            "groups": groups,
        }
    )
    return json_response(dump_body(report))


def register(bp: df.Blueprint) -> None:
    """Register ``GET /api/costs``."""
    level = route_auth_level()

    @bp.function_name(name="list_costs")
    @bp.route(route="costs", methods=["GET"], auth_level=level)
    @bp.generic_input_binding(arg_name="client", type="durableClient")
    async def list_costs(req: func.HttpRequest, client: str) -> func.HttpResponse:
        """GET /api/costs."""
        return await guarded("list_costs", lambda: job_costs(req, client))
