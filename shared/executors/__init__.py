"""Executor registry, keyed by executor_type: the one place that says what a step kind is.

Adding an executor type means one module in this package that calls ``register`` on import; the
activities blueprint registers one activity per entry, the planner learns its description, and the
orchestrator, the view and telemetry ask its ``ExecutorSpec`` (LLM use, streaming, the role it plays),
so nothing else names it. Each step kind also declares its typed input model: the only fields a
plan or a user's edit may set. Everything security-relevant travels in the execution context, which
only the orchestrator writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from shared.jobs.contracts import ExecutorInput, ExecutorOutput
from shared.jobs.plan import ORCHESTRATOR_KINDS, Plan, PlanStep
from shared.runtime.plugins import PackageModules

if TYPE_CHECKING:
    from shared.providers.clients import Clients

ExecutorFn = Callable[[ExecutorInput, "Clients"], ExecutorOutput]


@dataclass(frozen=True)
class ExecutorSpec:
    """One registered executor: everything the rest of the app asks about its kind."""

    executor_type: str
    description: str
    run: ExecutorFn
    uses_llm: bool
    # Internal executors (planner, supervisor) are not offered to the planner as step kinds.
    internal: bool = False
    # What a plan step or a user's edit may set for this kind (extra="forbid"); None for internal ones.
    input_model: type[BaseModel] | None = None
    # The input field a clarification or a new question fills ("question", or "query" for a search).
    text_field: str = "question"
    # It streams its answer text to the partial-output side channel while it runs.
    streams: bool = False
    # The OpenTelemetry GenAI operation it performs when it calls a model ("chat", "embeddings").
    telemetry_operation: str = "chat"
    # Its role in a job: it writes the final answer (a plan needs one; it gets the sources and notes and
    # is not supervised), or it runs SQL (the approval policy applies).
    writes_answer: bool = False
    runs_sql: bool = False
    # It runs model-written code (run_python): only when the job allows the tool, under the approval policy.
    runs_code: bool = False


# The internal executors the orchestrator calls by their role, not as plan steps.
PLAN = "plan"
SUPERVISE = "supervise"
# Agent mode: one Executor turn (a model call), and one call of a family tool.
AGENT_TURN = "agent_turn"
CALL_TOOL = "call_tool"

_REGISTRY: dict[str, ExecutorSpec] = {}
# Modules of this package that are infrastructure, not executors.
_MODULES = PackageModules(__name__, skip={"runner", "common", "decisions"})


def register(
    executor_type: str,
    *,
    description: str,
    uses_llm: bool,
    internal: bool = False,
    input_model: type[BaseModel] | None = None,
    text_field: str = "question",
    streams: bool = False,
    telemetry_operation: str = "chat",
    writes_answer: bool = False,
    runs_sql: bool = False,
    runs_code: bool = False,
) -> Callable[[ExecutorFn], ExecutorFn]:
    """Decorator: register a function as the executor for ``executor_type``."""
    if not internal and input_model is None:
        raise ValueError(f"step kind {executor_type!r} needs an input_model")
    if input_model is not None and input_model.model_config.get("extra") != "forbid":
        raise ValueError(f"the input model of {executor_type!r} must forbid extra fields")
    if input_model is not None and text_field not in input_model.model_fields:
        raise ValueError(f"the input model of {executor_type!r} has no text field {text_field!r}")

    def decorate(fn: ExecutorFn) -> ExecutorFn:
        if executor_type in _REGISTRY and _REGISTRY[executor_type].run is not fn:
            raise ValueError(f"executor type {executor_type!r} is registered twice")
        _REGISTRY[executor_type] = ExecutorSpec(
            executor_type,
            description,
            fn,
            uses_llm,
            internal,
            input_model,
            text_field,
            streams,
            telemetry_operation,
            writes_answer,
            runs_sql,
            runs_code,
        )
        return fn

    return decorate


def _load_all() -> None:
    _MODULES.load()


def executor_types() -> list[str]:
    """All registered executor types, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def step_kinds() -> dict[str, str]:
    """Executor types a plan may use as steps, with their descriptions."""
    _load_all()
    return {k: v.description for k, v in sorted(_REGISTRY.items()) if not v.internal}


def get_executor(executor_type: str) -> ExecutorSpec | None:
    """The executor registered for a type, or None."""
    _load_all()
    return _REGISTRY.get(executor_type)


def spec_of(executor_type: str) -> ExecutorSpec:
    """The spec of a registered executor type; KeyError names the known ones."""
    spec = get_executor(executor_type)
    if spec is None:
        raise KeyError(f"no executor is registered for {executor_type!r}; known: {executor_types()}")
    return spec


def kinds_where(predicate: Callable[[ExecutorSpec], bool]) -> set[str]:
    """The registered executor types whose spec satisfies ``predicate``."""
    _load_all()
    return {name for name, spec in _REGISTRY.items() if predicate(spec)}


def lookup_kinds() -> set[str]:
    """Step kinds that look something up for the answer: every plan step kind except the one that writes it.

    The Supervisor may switch a step to one of them, and the agent-mode Executor calls them as tools. A kind
    that runs code is not one: it runs only where the job allows its tool (the Executor calls it by that name).
    """
    return set(step_kinds()) - kinds_where(lambda spec: spec.writes_answer or spec.runs_code)


def uses_llm(executor_type: str) -> bool:
    """Whether an executor type calls a model (ask_user and unknown kinds do not)."""
    spec = get_executor(executor_type)
    return spec is not None and spec.uses_llm


class StepInputError(ValueError):
    """A step input or a user's edit that sets a field it may not, or sets it to a bad value."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def writes_answer(kind: str) -> bool:
    """Whether a step kind writes the job's answer."""
    spec = get_executor(kind)
    return spec is not None and spec.writes_answer


def input_model_for(kind: str) -> type[BaseModel]:
    """The typed input model of a step kind (the orchestrator's own kinds included); StepInputError if unknown."""
    if kind in ORCHESTRATOR_KINDS:
        return ORCHESTRATOR_KINDS[kind][0]
    spec = get_executor(kind)
    if spec is None or spec.internal or spec.input_model is None:
        known = sorted([*step_kinds(), *ORCHESTRATOR_KINDS])
        raise StepInputError(None, f"unknown step kind {kind!r}; known: {known}")
    return spec.input_model


def settable_fields(kind: str) -> list[str]:
    """The input fields a plan or a user may set for a step kind."""
    return sorted(input_model_for(kind).model_fields)


def _first_error(exc: ValidationError) -> tuple[str | None, str]:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or None
    return where, str(err.get("msg", "invalid"))


def validate_step_input(kind: str, data: Any) -> dict[str, Any]:
    """Validate a whole step input against its kind's model; returns the normalized input."""
    model = input_model_for(kind)
    if not isinstance(data, dict):
        raise StepInputError(None, f"the input of a {kind} step must be an object")
    unknown = sorted(k for k in data if k not in model.model_fields)
    if unknown:
        raise StepInputError(
            unknown[0], f"input.{unknown[0]} may not be set on a {kind} step (allowed: {settable_fields(kind)})"
        )
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        where, msg = _first_error(exc)
        raise StepInputError(where, f"input.{where or '?'}: {msg}") from exc
    return validated.model_dump(mode="json", exclude_unset=True)


def check_edits(kind: str, edits: Any) -> dict[str, Any]:
    """Check a user's edit of a step input field by field (pure; used by the HTTP edge and the orchestrator).

    Only fields of the kind's input model may be given, each valid on its own; nothing else is merged.
    """
    model = input_model_for(kind)
    if not isinstance(edits, dict) or not edits:
        raise StepInputError(None, f"an edit needs the new input: at least one of {settable_fields(kind)}")
    checked: dict[str, Any] = {}
    for name, value in edits.items():
        if not isinstance(name, str) or name not in model.model_fields:
            raise StepInputError(
                str(name), f"{name!r} cannot be edited on a {kind} step (allowed: {settable_fields(kind)})"
            )
        try:
            # Validate one field on a blank instance: the same constraints as a whole input.
            done = model.__pydantic_validator__.validate_assignment(model.model_construct(), name, value)
        except ValidationError as exc:
            raise StepInputError(name, f"{name}: {_first_error(exc)[1]}") from exc
        checked[name] = getattr(done, name)
    return checked


def apply_edits(kind: str, task: dict[str, Any], edits: Any) -> dict[str, Any]:
    """The step input after a user's edit, validated as a whole; StepInputError when it is not allowed."""
    merged = {**task, **check_edits(kind, edits)}
    return validate_step_input(kind, merged)


def text_field_of(kind: str) -> str:
    """The input field a question or clarification fills for a step kind (ask_user: its question)."""
    spec = get_executor(kind)
    return spec.text_field if spec is not None else "question"


def input_for_text(kind: str, text: str) -> dict[str, Any]:
    """A new step input carrying only a question (or a query) for the kind, built through its model."""
    model = input_model_for(kind)
    name = text_field_of(kind)
    limit = next((m.max_length for m in model.model_fields[name].metadata if hasattr(m, "max_length")), None)
    return validate_step_input(kind, {name: text[:limit] if isinstance(limit, int) else text})


def check_step(step: PlanStep) -> PlanStep:
    """Check one plan step against its kind's typed input (the kind's text field non-empty); ValueError says why."""
    field = text_field_of(step.kind)
    value = step.input.get(field)
    known = step.kind in ORCHESTRATOR_KINDS or get_executor(step.kind) is not None
    if known and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"step {step.id!r} ({step.kind}) needs a non-empty input.{field}")
    try:
        step.input = validate_step_input(step.kind, step.input)
    except StepInputError as exc:
        raise ValueError(f"step {step.id!r} ({step.kind}): {exc.message}") from exc
    return step


def check_plan(plan: Plan) -> Plan:
    """Check a plan against the registry: known kinds, each step's typed input, and a step that writes the answer.

    Returns the plan with normalized inputs; ValueError says what is wrong and where.
    """
    for step in plan.steps:
        check_step(step)
    answer_kinds = kinds_where(lambda spec: spec.writes_answer)
    if not any(step.kind in answer_kinds for step in plan.steps):
        raise ValueError(f"a plan needs a step that writes the answer ({', '.join(sorted(answer_kinds))})")
    return plan
