"""Starting runs: ``POST /api/workflows/{id}/runs`` and ``POST /api/teams/{id}/runs`` → 202 with the run (job) id.

A run is a job: the same orchestration, view, answers, cancel and listing (``/api/jobs/...``). Here the
definition is pinned: the version asked for (or the latest), and every agent and sub-workflow it names
without a version, resolved now, so the run never reads "latest" again. The inputs are checked against
the workflow's InputSpecs (a team takes one ``task``): 400 ``INVALID_INPUT`` with ``inputs.<name>``.
Family tools the definitions name are cut to what this app configures; a tool node whose tool is not
configured is refused (409, the definition is fine but the app changed). Delete of a definition is
refused while runs that use it are in flight (``shared.definitions.usage`` hook, filled here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.common import Visible, definition_store, in_store, parse_body, request_caller, route_auth_level, visible_head
from api.contract.bodies import RunAccepted, dump_body
from api.errors import ApiError, guarded, json_response
from api.job_list import durable_instances, new_job_id
from api.jobs import job_links, resolve_policy
from api.view import decode
from shared.definitions.models import Agent, AgentNode, InputSpec, Team, ToolNode, Workflow, WorkflowNode
from shared.definitions.quote import agent_models, run_quote
from shared.definitions.usage import set_in_flight_check
from shared.jobs.models import (
    ORCHESTRATOR_NAME,
    RUNNING_RUNTIME,
    ApprovalPolicy,
    JobConstraints,
    JobInput,
    JobOwner,
    JobRequest,
    WaitPolicy,
)
from shared.jobs.runs import TEAM_INPUTS, RunKind, RunLimits, RunSpec

KINDS: dict[str, RunKind] = {"workflows": "workflow", "teams": "team"}
# The built-in workflow: today's question → plan → steps job (a stored workflow cannot take its id's place).
BUILT_IN = "ask"
ASK_MODES = ("deterministic", "hybrid", "agent")
TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}
# Sub-workflows nest at most this deep (validation refuses deeper ones on save too).
MAX_DEPTH = 8


class RunLimitsRequest(BaseModel):
    """Per-run limits asked for in a run request: each at most the app's setting (its default when not given)."""

    model_config = ConfigDict(extra="forbid")

    max_node_runs: int | None = Field(default=None, ge=1)
    max_parts_alive: int | None = Field(default=None, ge=0)
    max_parallel_width: int | None = Field(default=None, ge=1)
    max_depth: int | None = Field(default=None, ge=0)
    max_tool_calls: int | None = Field(default=None, ge=0)


class RunRequest(BaseModel):
    """Body of ``POST /api/{workflows|teams}/{id}/runs``."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, Any] = Field(default_factory=dict)
    version: int | None = Field(default=None, ge=1)
    constraints: JobConstraints = Field(default_factory=JobConstraints)
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    wait: WaitPolicy = Field(default_factory=WaitPolicy)
    # Lower the run's total-work budget below the app's (RUN_MAX_* settings); never above it.
    limits: RunLimitsRequest = Field(default_factory=RunLimitsRequest)


def run_limits(asked: RunLimitsRequest) -> RunLimits:
    """The run's limits: the app's (settings), each lowered where the request asks; 400 for one above the app's."""
    from shared.definitions.catalog import app_run_limits
    from shared.runtime.settings import get_settings

    values = app_run_limits(get_settings()).model_dump()
    for name, value in asked.model_dump(exclude_none=True).items():
        if value > values[name]:
            raise ApiError(
                400,
                "INVALID_INPUT",
                f"limits.{name} may be at most {values[name]} on this app (setting RUN_{name.upper()})",
                field=f"limits.{name}",
            )
        values[name] = value
    return RunLimits.model_validate(values)


def check_inputs(specs: dict[str, InputSpec], given: dict[str, Any]) -> dict[str, Any]:
    """The run's inputs: each given one of its declared type, the defaults filled in; 400 naming the field."""
    for name in given:
        if name not in specs:
            known = ", ".join(sorted(specs)) or "none"
            raise ApiError(400, "INVALID_INPUT", f"unknown input {name!r}; inputs: {known}", field=f"inputs.{name}")
    inputs: dict[str, Any] = {}
    for name, spec in specs.items():
        if name not in given or given[name] is None:
            if spec.default is not None:
                inputs[name] = spec.default
            elif spec.required:
                raise ApiError(400, "INVALID_INPUT", f"input {name!r} is required", field=f"inputs.{name}")
            continue
        value = given[name]
        # bool is an int in Python, never a number here
        if not isinstance(value, TYPES[spec.type]) or (isinstance(value, bool) and spec.type != "boolean"):
            raise ApiError(400, "INVALID_INPUT", f"input {name!r} must be of type {spec.type}", field=f"inputs.{name}")
        inputs[name] = value
    return inputs


@dataclass
class Pinned:
    """What a run uses, resolved at start: versions of unversioned references, tools, models named."""

    pins: dict[str, int] = field(default_factory=dict)
    uses: list[str] = field(default_factory=list)
    tools: set[str] = field(default_factory=set)
    tool_nodes: list[tuple[str, str]] = field(default_factory=list)  # (path, tool)
    agents: list[Agent] = field(default_factory=list)


def _find(store: Visible, kind: str, def_id: str, version: int | None, where: str) -> Any:
    found = store.find(kind, def_id, version)
    if found is None:
        which = f"version {version} of {kind}" if version else kind
        raise ApiError(409, "DEFINITION_MISSING", f"{where} names {which} {def_id!r}, which no longer exists")
    return found


def pin(store: Visible, definition: Workflow | Team) -> Pinned:
    """Walk a workflow (its sub-workflows too) or a team and pin every definition it names (blocking)."""
    pinned = Pinned(uses=[f"{definition.kind}/{definition.id}"])
    if isinstance(definition, Team):
        strategy = definition.strategy
        roles = [getattr(strategy, "aggregator", None), getattr(strategy, "supervisor", None)]
        for agent_id in [*definition.agents, *[r for r in roles if r]]:
            _agent(store, pinned, agent_id, None, f"team {definition.id!r}")
        return pinned
    _workflow(store, pinned, definition, 0)
    return pinned


def _note(pinned: Pinned, kind: str, def_id: str, version: int | None, store: Visible, where: str) -> Any:
    found = _find(store, kind, def_id, version, where)
    key = f"{kind}/{def_id}"
    if version is None:
        head = store.head(kind, def_id)
        assert head is not None
        # The version found is the latest; a run refers to it by number from now on.
        pinned.pins.setdefault(key, head.latest)
        found = _find(store, kind, def_id, pinned.pins[key], where)
    if key not in pinned.uses:
        pinned.uses.append(key)
    return found


def _agent(store: Visible, pinned: Pinned, agent_id: str, version: int | None, where: str) -> None:
    agent = _note(pinned, "agent", agent_id, version, store, where)
    if isinstance(agent, Agent):
        pinned.agents.append(agent)
        pinned.tools.update(t for t in agent.tools if "." in t)


def _workflow(store: Visible, pinned: Pinned, workflow: Workflow, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ApiError(409, "DEFINITION_TOO_DEEP", f"sub-workflows nest deeper than {MAX_DEPTH} levels")
    for i, node in enumerate(workflow.nodes):
        where = f"workflow {workflow.id!r} node {node.id!r}"
        if isinstance(node, AgentNode):
            _agent(store, pinned, node.agent, node.version, where)
        elif isinstance(node, ToolNode) and "." in node.tool:
            pinned.tool_nodes.append((f"nodes.{i}.tool" if depth == 0 else where, node.tool))
        elif isinstance(node, WorkflowNode):
            sub = _note(pinned, "workflow", node.workflow, node.version, store, where)
            if isinstance(sub, Workflow):
                _workflow(store, pinned, sub, depth + 1)


def allowed_tools(pinned: Pinned) -> list[str]:
    """The family tools the run may call: those its definitions name that this app configures.

    A tool node needs its tool (409 otherwise); an agent's tools are only cut to what is configured.
    """
    from shared.runtime.settings import get_settings
    from shared.tools import undeclared

    settings = get_settings()
    for where, tool in pinned.tool_nodes:
        problem = undeclared(settings, tool)
        if problem is not None:
            raise ApiError(409, "TOOL_NOT_CONFIGURED", f"{where}: {problem}", field=where)
    return sorted(t for t in pinned.tools | {t for _, t in pinned.tool_nodes} if undeclared(settings, t) is None)


def check_models(pinned: Pinned, request: JobRequest) -> None:
    """Each agent's model must be one the job allows (when it names any) and of the app's LLM provider."""
    from shared.runtime.settings import get_settings

    provider = get_settings().llm_provider
    allowed = request.constraints.allowed_models
    for agent in pinned.agents:
        choice = agent.model
        if choice.provider is not None and choice.provider != provider:
            raise ApiError(
                409,
                "MODEL_NOT_AVAILABLE",
                f"agent {agent.id!r} wants provider {choice.provider!r}; this app uses {provider!r}",
            )
        wanted = [m for m in [choice.model, *choice.fallbacks] if m]
        if wanted and allowed and not set(wanted) & set(allowed):
            raise ApiError(
                400,
                "MODEL_NOT_ALLOWED",
                f"agent {agent.id!r} uses {wanted}, none of which is in allowed_models {allowed}",
                field="constraints.allowed_models",
            )


async def start_run(req: func.HttpRequest, client: df.DurableOrchestrationClient, plural: str, def_id: str) -> Any:
    """Pin the definition, check the inputs and start the run as a job; 202 with its id."""
    kind = KINDS[plural]
    caller = request_caller(req)
    body = parse_body(req, RunRequest, "'inputs'")
    if kind == "workflow" and def_id == BUILT_IN:
        return await _start_ask(req, client, caller, body)
    store = definition_store()
    head = visible_head(await in_store(store.head, kind, def_id), caller, kind, def_id)
    version = body.version or head.latest
    definition = await in_store(store.find, kind, def_id, version)
    if not isinstance(definition, Workflow | Team):
        raise ApiError(404, "VERSION_NOT_FOUND", f"{kind} {def_id!r} has no version {version}", field="version")
    specs = definition.inputs if isinstance(definition, Workflow) else _team_inputs()
    inputs = check_inputs(specs, body.inputs)
    # Only what the caller may see is pinned: another owner's agent or workflow is missing to this run.
    pinned = await in_store(pin, Visible(store, caller), definition)
    request = JobRequest(
        question=f"{kind} {def_id} v{version}",
        constraints=body.constraints,
        approval=body.approval,
        wait=body.wait,
    )
    check_models(pinned, request)
    spec = RunSpec(
        kind=kind,
        id=def_id,
        version=version,
        inputs=inputs,
        pins=pinned.pins,
        uses=pinned.uses,
        tools=allowed_tools(pinned),
        limits=run_limits(body.limits),
    )
    models = [m for agent in pinned.agents for m in agent_models(agent, request.constraints.allowed_models)]
    return await _start(req, client, caller, request, spec, (Visible(store, caller), definition, models))


async def _start(
    req: func.HttpRequest,
    client: df.DurableOrchestrationClient,
    caller: Any,
    request: JobRequest,
    spec: RunSpec | None,
    quoted: tuple[Visible, Workflow | Team, list[str]] | None = None,
) -> func.HttpResponse:
    """Start the job orchestration for a run (``spec`` None: the built-in ask workflow, today's job)."""
    who = caller.principal
    owner = JobOwner(id=who.id, name=who.name, idp=who.idp, roles=sorted(who.roles)[:64]) if who else None
    from shared.runtime import telemetry

    job_id = new_job_id()
    kind, def_id, version = (spec.kind, spec.id, spec.version) if spec else ("workflow", BUILT_IN, None)
    attributes = {"run.kind": kind, "run.id": def_id, "run.version": version or 0}
    with telemetry.job_span(job_id=job_id, attributes=attributes):
        policy = resolve_policy(request, quoted[2] if quoted else None)
        if spec is not None:  # a run's family tools are its spec's (an ask job's are its request's)
            from shared.runtime.pricing import tool_prices
            from shared.runtime.settings import get_settings

            policy.tool_price = tool_prices(spec.tools, get_settings().tool_prices)
        # A run's quote, from its graph and bounds before it starts (shared/definitions/quote.py).
        made = await in_store(run_quote, quoted[0], quoted[1], request, policy) if quoted is not None else None
        job = JobInput(
            job_id=job_id,
            request=request,
            owner=owner,
            policy=policy,
            trace=telemetry.inject_trace_context(),
            run=spec,
            quote=made,
        )
        await client.start_new(ORCHESTRATOR_NAME, job_id, job.model_dump(mode="json"))
    links = job_links(req, job_id)
    accepted = RunAccepted(id=job_id, status="pending", kind=kind, definition=def_id, version=version, links=links)
    return json_response(
        dump_body(accepted),
        202,
        headers={"Location": links["status"], "Retry-After": "1"},
    )


async def _start_ask(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, caller: Any, body: RunRequest
) -> func.HttpResponse:
    """The built-in workflow ``ask``: exactly today's question → plan → steps job (inputs: question, mode)."""
    specs = {
        "question": InputSpec(type="string"),
        "mode": InputSpec(type="string", required=False, default="deterministic"),
    }
    inputs = check_inputs(specs, body.inputs)
    if inputs["mode"] not in ASK_MODES:
        raise ApiError(400, "INVALID_INPUT", f"input 'mode' must be one of {list(ASK_MODES)}", field="inputs.mode")
    try:
        request = JobRequest(
            question=inputs["question"],
            mode=inputs["mode"],
            constraints=body.constraints,
            approval=body.approval,
            wait=body.wait,
        )
    except ValidationError as exc:
        raise ApiError(
            400, "INVALID_INPUT", "input 'question' must be 1-2000 characters", field="inputs.question"
        ) from exc
    return await _start(req, client, caller, request, None)


def _team_inputs() -> dict[str, InputSpec]:
    return {name: InputSpec.model_validate(spec) for name, spec in TEAM_INPUTS.items()}


def run_of(data: dict[str, Any]) -> dict[str, Any] | None:
    """The run spec in a Durable instance's input (None: an ask job, or not a job)."""
    job_input = decode(data.get("input"))
    run = job_input.get("run") if isinstance(job_input, dict) else None
    return run if isinstance(run, dict) else None


async def in_flight(kind: str, def_id: str, binding_json: Any) -> list[str]:
    """Ids of the runs in flight that use ``kind/def_id`` (the delete hook)."""
    if not isinstance(binding_json, str):
        return []
    key = f"{kind}/{def_id}"
    found = await durable_instances(binding_json, sorted(RUNNING_RUNTIME))
    return [
        str(data.get("instanceId"))
        for data in found
        if data.get("name") == ORCHESTRATOR_NAME and key in ((run_of(data) or {}).get("uses") or [])
    ]


def register(bp: df.Blueprint) -> None:
    """Register the run routes, and the in-flight check that delete asks."""
    level = route_auth_level()
    set_in_flight_check(in_flight)

    @bp.function_name(name="start_workflow_run")
    @bp.route(route="workflows/{def_id}/runs", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def workflow_run(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/workflows/{id}/runs."""
        return await guarded(
            "start_workflow_run", lambda: start_run(req, client, "workflows", req.route_params["def_id"])
        )

    @bp.function_name(name="start_team_run")
    @bp.route(route="teams/{def_id}/runs", methods=["POST"], auth_level=level)
    @bp.durable_client_input(client_name="client")
    async def team_run(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """POST /api/teams/{id}/runs."""
        def_id = req.route_params["def_id"]
        return await guarded("start_team_run", lambda: start_run(req, client, "teams", def_id))
