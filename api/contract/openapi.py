"""The OpenAPI 3.1 document of the app's whole HTTP API, generated from the pydantic models of its bodies.

``GET /api/openapi.json`` serves it; docs/openapi.json is its checked-in copy. Regenerate that copy with
``.venv/bin/python -m api.contract --write`` (``make openapi``; tests/api/test_openapi.py fails when it is stale,
and when a route of function_app.py is missing here). The schemas are pydantic's JSON Schema of the
models (2020-12, as OpenAPI 3.1 uses it); nothing here is a hand-written schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from api.contract import bodies as b
from api.contract.events import JobEvent
from api.contract.view import JobView
from shared.jobs.models import JobRequest, UserAnswer

API_VERSION = "1"
PREFIX = "/api"
Method = Literal["get", "post", "put", "delete"]


@dataclass(frozen=True)
class Param:
    """A query or header parameter the model of a body does not describe."""

    name: str
    schema: dict[str, Any]
    description: str
    where: Literal["query", "header"] = "query"


@dataclass(frozen=True)
class Op:
    """One operation: its route (as function_app.py registers it), bodies and parameters."""

    method: Method
    route: str
    operation_id: str
    summary: str
    tag: str
    responses: dict[int, type[BaseModel] | None]
    request: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    params: tuple[Param, ...] = ()
    anonymous: bool = False
    media: str = "application/json"  # of the success answer
    errors: tuple[int, ...] = (400, 401, 404)
    extra: dict[str, Any] = field(default_factory=dict)


def _int(low: int, high: int, default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "maximum": high}
    return schema if default is None else schema | {"default": default}


_STRING: dict[str, Any] = {"type": "string"}
_PAGE = (
    Param("limit", _int(1, 100, 20), "How many entries a page holds."),
    Param("cursor", _STRING, "The next_cursor of the page before."),
)


def _definition_ops() -> list[Op]:
    """The five routes of each definition kind (api/definitions.py)."""
    from api.definitions import PLURALS
    from shared.definitions.models import Agent, Team, Workflow

    models: dict[str, type[BaseModel]] = {"agent": Agent, "workflow": Workflow, "team": Team}
    ops: list[Op] = []
    for plural, kind in PLURALS.items():
        one = f"{plural}/{{def_id}}"
        ops += [
            Op("get", plural, f"list_{plural}", f"The caller's live {plural}", plural, {200: b.DefinitionList}),
            Op(
                "post",
                plural,
                f"create_{plural}",
                f"Create a {kind}",
                plural,
                {201: b.DefinitionView},
                request=models[kind],
                errors=(400, 401, 409, 413, 503),
            ),
            Op(
                "get",
                one,
                f"get_{plural}",
                f"One {kind}: a version and the list of versions",
                plural,
                {200: b.DefinitionView},
                params=(Param("version", _int(1, 1_000_000), "That version, not the latest."),),
            ),
            Op(
                "put",
                one,
                f"update_{plural}",
                f"Save a new version of a {kind}",
                plural,
                {200: b.DefinitionView},
                request=models[kind],
                errors=(400, 401, 404, 409, 413, 503),
                params=(Param("expected_version", _int(1, 1_000_000), "Refuse (409) unless this is the latest."),),
            ),
            Op(
                "delete",
                one,
                f"delete_{plural}",
                f"Archive a {kind}",
                plural,
                {200: b.Archived},
                errors=(401, 404, 409, 503),
            ),
        ]
    return ops


def operations() -> list[Op]:
    """Every operation of the app."""
    from api.cost_report import CostQuery
    from api.fork import ForkRequest
    from api.llm import LlmTest
    from api.logs import LogFilter
    from api.runs import RunRequest
    from shared.providers.sql.verified import VerifiedQuery, VerifiedQueryIn

    job = "jobs/{job_id}"
    return [
        Op(
            "get",
            "health",
            "health",
            "The host is up (anonymous)",
            "host",
            {200: b.Health},
            anonymous=True,
            errors=(503,),
        ),
        Op("get", "openapi.json", "openapi", "This document", "host", {200: None}, errors=(401,)),
        Op(
            "get",
            "catalog",
            "catalog",
            "What clients must know: kinds, schemas, statuses, codes",
            "host",
            {200: b.Catalog},
            errors=(401,),
        ),
        Op(
            "post",
            "jobs",
            "submit_job",
            "Submit a job",
            "jobs",
            {202: b.JobAccepted},
            request=JobRequest,
            errors=(400, 401, 413),
        ),
        Op(
            "get",
            "jobs",
            "list_job_views",
            "The caller's jobs, newest first",
            "jobs",
            {200: b.JobList},
            params=(Param("status", _STRING, "Only jobs in this status."), *_PAGE),
        ),
        Op(
            "get",
            job,
            "get_job",
            "The job view",
            "jobs",
            {200: JobView},
            params=(
                Param("log_cursor", _int(0, 10_000_000, 0), "The log page starts after this history position."),
                Param("log_limit", _int(1, 1000, 100), "At most this many log lines."),
            ),
        ),
        Op(
            "post",
            f"{job}/feedback",
            "answer_job",
            "Answer the question a waiting job asks",
            "jobs",
            {202: b.AnswerAccepted},
            request=UserAnswer,
            errors=(400, 401, 404, 409, 413),
        ),
        Op("post", f"{job}/cancel", "cancel_job", "Cancel a job", "jobs", {202: b.Cancelling}, errors=(401, 404, 409)),
        Op(
            "get",
            f"{job}/events",
            "job_events",
            "The job's events as Server-Sent Events (docs/events.md)",
            "jobs",
            {200: JobEvent},
            media="text/event-stream",
            params=(
                Param("after", _STRING, "Resume after this event id."),
                Param("Last-Event-ID", _STRING, "Resume after this event id (wins over after).", "header"),
            ),
            extra={"description": "Each message: `id: <event id>`, `event: <type>`, `data: <one JobEvent as JSON>`."},
        ),
        Op(
            "post",
            f"{job}/fork",
            "fork_job",
            "Re-run a finished job from one of its steps",
            "jobs",
            {202: b.ForkAccepted},
            request=ForkRequest,
            errors=(400, 401, 404, 409, 413),
        ),
        Op(
            "get",
            f"{job}/compare/{{other}}",
            "compare_jobs",
            "How one job differs from another",
            "jobs",
            {200: b.Comparison},
        ),
        Op(
            "get",
            f"{job}/artifacts/{{ref}}",
            "get_artifact",
            "The bytes of a file a code step wrote",
            "jobs",
            {200: None},
            media="application/octet-stream",
        ),
        Op(
            "get",
            "ui/{*path}",
            "web_console",
            "The web console (anonymous; it asks for the key)",
            "host",
            {200: None},
            anonymous=True,
            media="text/html",
            errors=(404,),
        ),
        Op(
            "post",
            "workflows/{def_id}/runs",
            "start_workflow_run",
            "Run a workflow",
            "runs",
            {202: b.RunAccepted},
            request=RunRequest,
            errors=(400, 401, 404, 409, 413),
        ),
        Op(
            "post",
            "teams/{def_id}/runs",
            "start_team_run",
            "Run a team",
            "runs",
            {202: b.RunAccepted},
            request=RunRequest,
            errors=(400, 401, 404, 409, 413),
        ),
        Op(
            "get",
            "logs",
            "list_logs",
            "Step runs across runs, and the runs in flight",
            "runs",
            {200: b.LogsPage},
            query=LogFilter,
            params=_PAGE,
        ),
        Op(
            "get",
            "costs",
            "list_costs",
            "What the caller's jobs cost, grouped",
            "runs",
            {200: b.CostReport},
            query=CostQuery,
            errors=(400, 401, 503),
        ),
        *_definition_ops(),
        Op(
            "get",
            "llm/models",
            "llm_models",
            "The model providers and their models",
            "llm",
            {200: b.LlmModels},
            errors=(401, 409),
        ),
        Op(
            "post",
            "llm/test",
            "llm_test",
            "One tiny chat call to the model",
            "llm",
            {200: b.LlmTestResult},
            request=LlmTest,
            errors=(400, 401, 409),
        ),
        Op("get", "tools", "tools_list", "The configured family tools", "llm", {200: b.ToolList}, errors=(401, 409)),
        Op(
            "get",
            "verified-queries",
            "list_verified_queries",
            "The verified queries",
            "verified queries",
            {200: b.VerifiedQueryList},
            params=(Param("retired", {"type": "boolean"}, "The retired ones too."),),
            errors=(401, 503),
        ),
        Op(
            "post",
            "verified-queries",
            "create_verified_query",
            "Save a verified query",
            "verified queries",
            {201: VerifiedQuery},
            request=VerifiedQueryIn,
            errors=(400, 401, 409, 413, 503),
        ),
        Op(
            "put",
            "verified-queries/{query_id}",
            "update_verified_query",
            "Edit a verified query",
            "verified queries",
            {200: VerifiedQuery},
            request=VerifiedQueryIn,
            errors=(400, 401, 404, 413, 503),
        ),
        Op(
            "delete",
            "verified-queries/{query_id}",
            "retire_verified_query",
            "Retire a verified query",
            "verified queries",
            {200: VerifiedQuery},
            errors=(401, 404, 503),
        ),
    ]


def path_of(route: str) -> str:
    """The document's path of a Functions route (``{*path}``, a catch-all, is ``{path}``)."""
    return f"{PREFIX}/{route}".replace("{*", "{")


Refs = dict[tuple[Any, JsonSchemaMode], dict[str, Any]]


def _schemas(ops: list[Op]) -> tuple[Refs, dict[str, Any]]:
    """Every body model's schema, each once, under components/schemas."""
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(b.ErrorBody, "serialization"): None}
    for op in ops:
        if op.request is not None:
            wanted[(op.request, "validation")] = None
        for model in op.responses.values():
            if model is not None:
                wanted[(model, "serialization")] = None
    refs, top = models_json_schema(list(wanted), ref_template="#/components/schemas/{model}")
    return dict(refs), dict(top.get("$defs", {}))


def _parameters(op: Op) -> list[dict[str, Any]]:
    """Path parameters from the route, query parameters from the query model and the extra ones."""
    found: list[dict[str, Any]] = []
    for part in op.route.split("/"):
        if part.startswith("{"):
            name = part.strip("{}*")
            found.append({"name": name, "in": "path", "required": True, "schema": dict(_STRING)})
    if op.query is not None:
        schema = op.query.model_json_schema()
        for name, prop in schema.get("properties", {}).items():
            found.append({"name": name, "in": "query", "required": False, "schema": prop})
    for param in op.params:
        found.append(
            {
                "name": param.name,
                "in": param.where,
                "required": False,
                "schema": param.schema,
                "description": param.description,
            }
        )
    return found


def _operation(op: Op, refs: Refs) -> dict[str, Any]:
    """One operation object."""
    responses: dict[str, Any] = {}
    for status, model in op.responses.items():
        if model is None:
            schema: dict[str, Any] = {"type": "object"} if op.media == "application/json" else {}
        else:
            schema = refs[(model, "serialization")]
        content = {op.media: {"schema": schema}} if schema else {op.media: {}}
        responses[str(status)] = {
            "description": (model.__doc__ or op.summary).strip().splitlines()[0],
            "content": content,
        }
    error = {"application/json": {"schema": refs[(b.ErrorBody, "serialization")]}}
    for status in op.errors:
        if status == 401 and not op.anonymous:
            # The Functions host refuses a call without the key before the app runs: an empty body.
            responses["401"] = {"description": "No or a wrong function key (or no signed-in user): no body."}
        else:
            responses[str(status)] = {"description": "An error: its code, message and field.", "content": error}
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary, "tags": [op.tag]}
    out |= op.extra
    params = _parameters(op)
    if params:
        out["parameters"] = params
    if op.request is not None:
        body = {"application/json": {"schema": refs[(op.request, "validation")]}}
        out["requestBody"] = {"required": True, "content": body}
    out["responses"] = responses
    if op.anonymous:
        out["security"] = []
    return out


@cache
def build_document() -> dict[str, Any]:
    """The OpenAPI document (built once per process: everything in it comes from code)."""
    ops = operations()
    refs, schemas = _schemas(ops)
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        paths.setdefault(path_of(op.route), {})[op.method] = _operation(op, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Durable AI Jobs",
            "version": API_VERSION,
            "description": "The HTTP API of the app: jobs, runs, definitions and the catalog. Generated from the "
            "pydantic models of its bodies (api/contract/); the catalog (GET /api/catalog) lists the kinds.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "functionKey": {"type": "apiKey", "in": "header", "name": "x-functions-key"},
                "functionKeyQuery": {"type": "apiKey", "in": "query", "name": "code"},
            },
        },
        "security": [{"functionKey": []}, {"functionKeyQuery": []}],
    }


def document_text() -> str:
    """The document as docs/openapi.json holds it."""
    return json.dumps(build_document(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


async def openapi_handler(req: func.HttpRequest) -> func.HttpResponse:
    """GET /api/openapi.json."""
    from api.common import request_caller

    request_caller(req)
    return func.HttpResponse(document_text(), mimetype="application/json", headers={"Cache-Control": "no-cache"})


def register(bp: df.Blueprint) -> None:
    """Register ``GET /api/openapi.json``."""
    from api.common import route_auth_level
    from api.errors import guarded

    @bp.route(route="openapi.json", methods=["GET"], auth_level=route_auth_level())
    async def openapi(req: func.HttpRequest) -> func.HttpResponse:
        """GET /api/openapi.json."""
        return await guarded("openapi", lambda: openapi_handler(req))
