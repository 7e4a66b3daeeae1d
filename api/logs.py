"""``GET /api/logs``: execution log entries across runs, and the executions active now.

One entry per step of a run (a workflow or team node, a supervisor round), newest run first: run id, what
it runs (kind, id, pinned version; today's question → plan → steps job is the built-in workflow ``ask``),
node, kind, state, attempts, times, error code and, for agent nodes, the agent. Filters: ``run``,
``workflow`` (or ``team``), ``agent``, ``status`` (a step state), ``since``/``until`` (ISO times, on a
step's start). Paging is by runs, with the job listing's cursor: ``limit`` runs per page (their entries
all on it), ``next_cursor`` for the older ones. ``active`` lists the runs in flight and their current step.
Only what the caller may see (the job API's ownership rules).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from api.auth import Caller
from api.common import int_param, iso_time, request_caller, route_auth_level
from api.contract.bodies import LogsPage, dump_body
from api.errors import from_validation_error, guarded, json_response
from api.job_list import decode_cursor, durable_instances, encode_cursor, newest_first
from api.view import decode
from shared.jobs.models import ORCHESTRATOR_NAME, RUNNING_RUNTIME, StepState

BUILT_IN = "ask"
STEP_STATES = {"pending", "running", "retrying", "waiting", "succeeded", "failed", "skipped", "cancelled"}


class LogFilter(BaseModel):
    """The query of ``GET /api/logs`` (every field optional)."""

    model_config = ConfigDict(extra="ignore")

    run: str | None = Field(default=None, max_length=256)
    workflow: str | None = Field(default=None, max_length=63)
    team: str | None = Field(default=None, max_length=63)
    agent: str | None = Field(default=None, max_length=63)
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @field_validator("status")
    @classmethod
    def _state(cls, value: str | None) -> str | None:
        if value is not None and value not in STEP_STATES:
            raise ValueError(f"status must be one of {sorted(STEP_STATES)}")
        return value

    @field_validator("since", "until")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    def wants_run(self, run: dict[str, Any], instance_id: str) -> bool:
        """Whether a run matches the run, workflow and team filters."""
        if self.run and instance_id != self.run:
            return False
        if self.workflow and not (run.get("kind") == "workflow" and run.get("id") == self.workflow):
            return False
        return not (self.team and not (run.get("kind") == "team" and run.get("id") == self.team))

    def wants_entry(self, entry: dict[str, Any]) -> bool:
        """Whether an entry matches the agent, status and time filters."""
        if self.agent and entry.get("agent") != self.agent:
            return False
        if self.status and entry["state"] != self.status:
            return False
        started = iso_time(entry.get("started_at"))
        if (self.since or self.until) and started is None:
            return False
        if self.since and started is not None and started < self.since:
            return False
        return not (self.until and started is not None and started > self.until)


def _run_of(data: dict[str, Any]) -> dict[str, Any]:
    job_input = decode(data.get("input"))
    run = job_input.get("run") if isinstance(job_input, dict) else None
    if isinstance(run, dict):
        return {"kind": run.get("kind"), "id": run.get("id"), "version": run.get("version")}
    return {"kind": "workflow", "id": BUILT_IN, "version": None}


def _steps(data: dict[str, Any]) -> list[StepState]:
    custom = data.get("customStatus")
    raw = custom.get("steps") if isinstance(custom, dict) else None
    steps: list[StepState] = []
    for item in raw if isinstance(raw, list) else []:
        try:
            steps.append(StepState.model_validate(item))
        except ValidationError:
            continue
    return steps


def entry_of(instance_id: str, run: dict[str, Any], step: StepState) -> dict[str, Any]:
    """One log entry: a step of a run."""
    agent = step.tool_input.split(" ", 1)[0] if step.kind == "agent" and step.tool_input else None
    return {
        "run_id": instance_id,
        "run": run,
        "node": step.id,
        "kind": step.kind,
        "title": step.title,
        "state": step.state,
        "attempts": step.attempts,
        "started_at": step.started_at,
        "ended_at": step.ended_at,
        "error": step.error.code if step.error else None,
        "agent": agent,
        "model": step.model,
        "tokens": step.usage.total_tokens,
    }


def _accept(data: dict[str, Any], caller: Caller, wanted: LogFilter) -> dict[str, Any] | None:
    """The entries of one instance, or None when it is not a run this caller may see or the filters want."""
    instance_id = str(data.get("instanceId"))
    if data.get("name") != ORCHESTRATOR_NAME or not caller.sees(decode(data.get("input"))):
        return None
    run = _run_of(data)
    if not wanted.wants_run(run, instance_id):
        return None
    entries = [e for s in _steps(data) if wanted.wants_entry(e := entry_of(instance_id, run, s))]
    if not entries and (wanted.agent or wanted.status or wanted.since or wanted.until):
        return None
    return {"entries": entries}


def active_of(data: dict[str, Any]) -> dict[str, Any]:
    """A run in flight: what it runs, its status and its current step."""
    custom = data.get("customStatus")
    state = custom if isinstance(custom, dict) else {}
    steps = _steps(data)
    index = state.get("step_index", -1)
    current = steps[index] if isinstance(index, int) and 0 <= index < len(steps) else None
    return {
        "run_id": data.get("instanceId"),
        "run": _run_of(data),
        "status": state.get("status") or "pending",
        "current": {"node": current.id, "kind": current.kind, "state": current.state} if current else None,
        "created_at": data.get("createdTime"),
    }


async def logs(req: func.HttpRequest, binding_json: str) -> func.HttpResponse:
    """The log entries of the caller's runs, newest run first, and the executions active now."""
    caller = request_caller(req)
    try:
        wanted = LogFilter.model_validate(dict(req.params))
    except ValidationError as exc:
        raise from_validation_error(exc) from exc
    limit = int_param(req, "limit", 20, 1, 100)
    after = decode_cursor(req.params["cursor"]) if req.params.get("cursor") else None
    page, cursor = await newest_first(
        binding_json, None, lambda data: _accept(data, caller, wanted), limit=limit, after=after, now=time.time()
    )
    running = await durable_instances(binding_json, sorted(RUNNING_RUNTIME))
    active = [
        active_of(data)
        for data in running
        if _accept(data, caller, wanted.model_copy(update={"status": None, "since": None, "until": None}))
    ]
    entries = [entry for item in page for entry in item["entries"]]
    next_cursor = encode_cursor(cursor) if cursor else None
    return json_response(dump_body(LogsPage(entries=entries, next_cursor=next_cursor, active=active)))


def register(bp: df.Blueprint) -> None:
    """Register ``GET /api/logs``."""
    level = route_auth_level()

    @bp.function_name(name="list_logs")
    @bp.route(route="logs", methods=["GET"], auth_level=level)
    @bp.generic_input_binding(arg_name="client", type="durableClient")
    async def list_logs(req: func.HttpRequest, client: str) -> func.HttpResponse:
        """GET /api/logs."""
        return await guarded("list_logs", lambda: logs(req, client))
