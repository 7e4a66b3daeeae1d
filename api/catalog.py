"""``GET /api/catalog``: what a client must know to render jobs and definitions, from the server's own registries.

Clients (the console, the CLI) render from this document and keep no copy of a server rule: the step kinds
with their input schemas and the fields a person may edit, the workflow node kinds with theirs, the job
statuses and step states, the kinds of question a job asks with their options, the error codes and which of
them a plain retry can cure, and the tool-name pattern. Each part is read from the one place that defines it
(the executor registry, the definition models, the job models, the contract), so a new step or node kind
appears here, and so in the console, without a change anywhere else.
"""

from __future__ import annotations

import functools
from typing import Any, get_args

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, TypeAdapter

from api.common import request_caller, route_auth_level
from api.contract.bodies import Catalog, dump_body
from api.contract.view import TERMINAL_STATUSES
from api.errors import guarded, json_response

CATALOG_VERSION = 1
# A string field longer than this is edited in a multi-line box; a shorter one on one line.
MULTILINE_CHARS = 500


@functools.cache
def build_catalog() -> dict[str, Any]:
    """The catalog document (built once per process: every part comes from code, nothing from settings)."""
    from shared.definitions.models import NODE_KINDS, Node, Team
    from shared.executors import get_executor, input_model_for, step_kinds
    from shared.jobs.agent import TOOL_NAME
    from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode
    from shared.jobs.models import JobRequest, JobStatus, StepStateName, Waiting
    from shared.jobs.plan import ORCHESTRATOR_KINDS

    kinds = []
    for kind, description in sorted({**step_kinds(), **{k: v[1] for k, v in ORCHESTRATOR_KINDS.items()}}.items()):
        spec = get_executor(kind)
        model = input_model_for(kind)
        kinds.append(
            {
                "kind": kind,
                "description": description,
                "uses_llm": bool(spec and spec.uses_llm),
                "streams": bool(spec and spec.streams),
                "writes_answer": bool(spec and spec.writes_answer),
                "runs_sql": bool(spec and spec.runs_sql),
                "runs_code": bool(spec and spec.runs_code),
                # Worked by the orchestrator itself (a question to a person, an agent loop), not an activity.
                "orchestrated": spec is None,
                "text_field": spec.text_field if spec else "question",
                # The shape of the kind's result (a client renders a result by its shape, not by the kind's name).
                "result": RESULT_SHAPES.get(result.__name__) if (result := _result(kind, spec)) else None,
                "input_schema": model.model_json_schema(),
                "editable_fields": editable_fields(model),
            }
        )
    node_schema = TypeAdapter(Node).json_schema()
    models = node_models()
    question_kinds = get_args(Waiting.model_fields["kind"].annotation)
    return {
        "version": CATALOG_VERSION,
        "step_kinds": kinds,
        # Every node kind's schema is a "$ref" into node_schema's "$defs", which the kinds share.
        "node_schema": node_schema,
        "node_kinds": [
            {
                "kind": k,
                "schema": {"$ref": _node_refs(node_schema)[k]},
                "fork_edits": fork_edits(k),
                **node_graph(models[k]),
            }
            for k in NODE_KINDS
        ],
        "references": references(),
        "job_statuses": list(get_args(JobStatus)),
        "terminal_statuses": list(TERMINAL_STATUSES),
        "step_states": list(get_args(StepStateName)),
        "question_kinds": [{"kind": k, "options": QUESTION_OPTIONS.get(k, [])} for k in question_kinds],
        "error_codes": [{"code": c.value, "retryable": c in RETRYABLE_CODES} for c in ErrorCode],
        "tool_name_pattern": TOOL_NAME,
        # The body of POST /api/jobs: a client's form takes its limits (lengths, counts, ranges) from here.
        "job_request_schema": JobRequest.model_json_schema(),
        "definitions": definition_choices(),
        # Display text for the values clients show (each group's values are the server's enum, read from it).
        "labels": labels(),
        # A team's schema: its strategies (a union told apart by "type") with the fields each one has.
        "team_schema": Team.model_json_schema(),
    }


# Display text of the values a client shows; a value with no text here is shown as itself.
LABEL_TEXT: dict[str, dict[str, str]] = {
    "job_status": {
        "pending": "Pending",
        "planning": "Planning",
        "running": "Running",
        "waiting_for_user": "Waiting for you",
        "completed": "Completed",
        "failed": "Failed",
        "cancelled": "Cancelled",
    },
    "step_state": {
        "pending": "Pending",
        "running": "Running",
        "waiting": "Waiting",
        "retrying": "Retrying",
        "succeeded": "Succeeded",
        "failed": "Failed",
        "skipped": "Skipped",
        "cancelled": "Cancelled",
    },
    "mode": {
        "deterministic": "Deterministic: a plan, then its steps",
        "hybrid": "Hybrid: a plan the Supervisor may change",
        "agent": "Agent: the Executor calls tools turn by turn",
    },
    "approval.sql": {"never": "Never ask", "always": "Always ask", "sensitive": "Sensitive tables only"},
    # The buttons of each form of question that offers the orchestrator's options (QUESTION_OPTIONS).
    "answer.sql": {
        "approve": "Approve",
        "edit": "Run edited SQL",
        "reject": "Reject (skip the query)",
        "abort": "Abort job",
    },
    "answer.code": {
        "approve": "Approve",
        "edit": "Run edited code",
        "reject": "Reject (skip the step)",
        "abort": "Abort job",
    },
    "answer.step_error": {
        "retry": "Retry",
        "skip": "Skip step",
        "edit": "Retry with edited input",
        "abort": "Abort job",
    },
    "waiting_form": {
        "sql": "Approval needed",
        "code": "Approval needed",
        "step_error": "A step failed",
        "text": "A question for you",
        "choice": "Your decision",
    },
}


def labels() -> dict[str, dict[str, str]]:
    """Each group of shown values (job statuses, step states, modes, SQL approval, question forms) with its text:
    the values are the server's enums, so a value added there is listed (as itself until it has a text)."""
    from api.contract.view import WaitingForm
    from shared.jobs.models import ApprovalPolicy, JobRequest, JobStatus, StepStateName

    enums: dict[str, Any] = {
        "job_status": JobStatus,
        "step_state": StepStateName,
        "mode": JobRequest.model_fields["mode"].annotation,
        "approval.sql": ApprovalPolicy.model_fields["sql"].annotation,
        "waiting_form": WaitingForm,
    }
    values = {group: [str(v) for v in get_args(enum)] for group, enum in enums.items()}
    # The forms that ask the orchestrator's questions answer with that question kind's options.
    for form, kind in ANSWERED_WITH.items():
        values[f"answer.{form}"] = [o["value"] for o in QUESTION_OPTIONS[kind]]
    return {group: {v: LABEL_TEXT.get(group, {}).get(v, v) for v in vs} for group, vs in values.items()}


# Which kind of question each form of the view's waiting block asks, for the forms answered with its options.
ANSWERED_WITH = {"sql": "approval", "code": "approval", "step_error": "error"}


# The result models of the contract, by the name a client knows their shape by.
RESULT_SHAPES = {"SqlResult": "sql", "RagResult": "documents", "AnswerResult": "answer"}


def _result(kind: str, spec: Any) -> type[BaseModel] | None:
    """A step kind's result model (shared/definitions/catalog.py decides it for validation too)."""
    from shared.definitions.catalog import result_model

    return result_model(kind, spec.writes_answer, spec.runs_sql) if spec is not None else None


def definition_choices() -> dict[str, list[str]]:
    """The closed choices of the definition forms: condition operators, workflow input types, team strategies,
    an agent's model providers."""
    from shared.definitions.models import Condition, InputSpec, ModelChoice, Team

    def literal(model: type[BaseModel], name: str) -> list[str]:
        return [str(v) for v in get_args(model.model_fields[name].annotation)]

    return {
        "condition_ops": literal(Condition, "op"),
        "input_types": literal(InputSpec, "type"),
        # Each strategy is a model of the Team's union, told apart by its ``type``.
        "team_strategies": [v for m in get_args(Team.model_fields["strategy"].annotation) for v in literal(m, "type")],
        # None (the app's LLM_PROVIDER) is the form's empty choice, not a value of its own.
        "providers": [str(v) for a in get_args(ModelChoice.model_fields["provider"].annotation) for v in get_args(a)],
    }


# What each answer to a kind of question does (the orchestrator's options; a question lists the ones it offers).
QUESTION_OPTIONS: dict[str, list[dict[str, str]]] = {
    "approval": [
        {"value": "approve", "meaning": "run it as shown"},
        {"value": "edit", "meaning": "run an edited version instead (checked again)"},
        {"value": "reject", "meaning": "do not run it; the job goes on without this step"},
        {"value": "abort", "meaning": "stop the job"},
    ],
    "error": [
        {"value": "retry", "meaning": "try the step again as it is"},
        {"value": "skip", "meaning": "go on without this step"},
        {"value": "edit", "meaning": "try again with an edited input"},
        {"value": "abort", "meaning": "stop the job"},
    ],
    "clarify": [],
    # approval.cost_over: the quote (details.quote) is over the job's limit; asked before it spends past planning.
    "cost": [
        {"value": "approve", "meaning": "go on: the job may cost up to the quote's high end"},
        {"value": "reject", "meaning": "stop the job before it spends more (QUOTE_REJECTED)"},
    ],
}


def editable_fields(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The fields of a step kind's input model a person may edit, each with how to edit it."""
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    fields = []
    for name, prop in schema.get("properties", {}).items():
        field = _editable(name, prop, name in required)
        if field is not None:
            fields.append(field)
    return fields


def _editable(name: str, prop: dict[str, Any], required: bool) -> dict[str, Any] | None:
    """One field as an edit form shows it, or None for one a form cannot edit (a map, a list)."""
    types = {prop.get("type")} | {p.get("type") for p in prop.get("anyOf", [])}
    types.discard(None)
    types.discard("null")
    string = next((p for p in [prop, *prop.get("anyOf", [])] if p.get("type") == "string"), None)
    integer = next((p for p in [prop, *prop.get("anyOf", [])] if p.get("type") == "integer"), None)
    field: dict[str, Any] = {"name": name, "label": prop.get("title") or name, "required": required}
    if prop.get("description"):
        field["hint"] = prop["description"]
    if string is not None and types == {"string"}:
        media = prop.get("contentMediaType") or string.get("contentMediaType")
        long_text = (string.get("maxLength") or 0) > MULTILINE_CHARS
        field["input"] = {"application/sql": "sql", "text/x-python": "code"}.get(media or "", "")
        field["input"] = field["input"] or ("text" if long_text else "line")
        if "maxLength" in string:
            field["max_length"] = string["maxLength"]
        return field
    if integer is not None and types == {"integer"}:
        field["input"] = "int"
        field.update({k: integer[k] for k in ("minimum", "maximum") if k in integer})
        return field
    return None


def fork_edits(node_kind: str) -> dict[str, Any] | None:
    """What a fork may edit of a node of this kind: its step kind's fields (the node's field that names the kind),
    or fields of its own (an agent's prompt); None for a node with no input a fork edits."""
    from shared.jobs.fork import NODE_EDIT_MODELS, NODE_EDIT_STEP_KIND

    if node_kind in NODE_EDIT_STEP_KIND:
        return {"step_kind_from": NODE_EDIT_STEP_KIND[node_kind]}
    model = NODE_EDIT_MODELS.get(node_kind)
    return {"fields": editable_fields(model)} if model is not None else None


def node_models() -> dict[str, type[BaseModel]]:
    """Each workflow node kind's model, from the node union (its ``kind`` literal)."""
    from shared.definitions.models import Node

    union = get_args(Node)[0]
    return {str(get_args(m.model_fields["kind"].annotation)[0]): m for m in get_args(union)}


def node_graph(model: type[BaseModel]) -> dict[str, Any]:
    """How a node kind sits in the graph, from its model's field metadata (shared/definitions/models.py): the
    fields that list node ids as edges (each with its edge type and direction) and the field that says what the
    node does."""
    from shared.definitions.models import Edge, Summary

    edges = []
    summary = None
    for name, info in model.model_fields.items():
        field = info.alias or name
        for mark in info.metadata:
            if isinstance(mark, Edge):
                edges.append(
                    {
                        "field": field,
                        "type": mark.type,
                        "direction": mark.direction,
                        "label": mark.label,
                        "auto": mark.auto,
                        # A required list stays on the node when its last id goes (the kind needs it).
                        "required": info.is_required(),
                    }
                )
            elif isinstance(mark, Summary):
                summary = field
    return {"edges": edges, "summary_field": summary}


def references() -> dict[str, Any]:
    """How definitions refer to a node's output or the input, for clients that rename a node: the pattern of one
    reference, what splits its head (the node id) from its fields, the fields (by their JSON names, anywhere in a
    node or an output mapping) that hold one reference or a template, and the pattern of a template's references."""
    from shared.definitions.models import (
        INPUT,
        REF,
        REF_SEPARATOR,
        TEMPLATE_REF,
        Reference,
        ReferenceTemplate,
        Workflow,
    )

    single: set[str] = set()
    template: set[str] = set()
    for model in _models_under(Workflow):
        for name, info in model.model_fields.items():
            for mark in info.metadata:
                if isinstance(mark, Reference):
                    single.add(info.alias or name)
                elif isinstance(mark, ReferenceTemplate):
                    template.add(info.alias or name)
    return {
        "pattern": REF,
        "separator": REF_SEPARATOR,
        "input": INPUT,
        "fields": sorted(single),
        "template_fields": sorted(template),
        "template_pattern": TEMPLATE_REF,
    }


def _models_under(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every pydantic model a model's fields reach (through lists, dicts, unions and Annotated), itself first."""
    seen: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.append(tp)
            for info in tp.model_fields.values():
                visit(info.annotation)
            return
        for arg in get_args(tp):
            visit(arg)

    visit(root)
    return seen


def _node_refs(schema: dict[str, Any]) -> dict[str, str]:
    """Each workflow node kind's "$ref" into the node union's "$defs" (its discriminator mapping)."""
    mapping = schema.get("discriminator", {}).get("mapping", {})
    return {str(kind): str(ref) for kind, ref in mapping.items()}


async def catalog_handler(req: func.HttpRequest) -> func.HttpResponse:
    """GET /api/catalog."""
    request_caller(req)
    return json_response(
        dump_body(Catalog.model_validate(build_catalog())), headers={"Cache-Control": "private, max-age=300"}
    )


def register(bp: df.Blueprint) -> None:
    """Register the catalog route."""
    level = route_auth_level()

    @bp.route(route="catalog", methods=["GET"], auth_level=level)
    async def catalog(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("catalog", lambda: catalog_handler(req))
