"""plan: turn the question into a validated Plan (internal executor, not a step kind)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from shared.executors import PLAN, check_plan, input_for_text, input_model_for, kinds_where, register, step_kinds
from shared.executors.common import call_llm, usage_of
from shared.executors.generate_response import is_placeholder
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput
from shared.jobs.plan import ALREADY_DONE, ORCHESTRATOR_KINDS, Plan, PlanStep
from shared.providers.interfaces import LLMTask
from shared.tools.python import PYTHON_TOOL

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class PlanRepair(BaseModel):
    """The planner's rejected reply and the problems found in it."""

    model_config = ConfigDict(extra="forbid")

    rejected_output: str = Field(max_length=8000)
    problems: str = Field(max_length=2000)


class PlanTask(BaseModel):
    """The task of the planning call."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, max_length=4000)
    # Set by the orchestrator for the one repair turn: the rejected plan and why it was rejected.
    repair: PlanRepair | None = None


# The step ids the schema offers the model: a server that constrains output to the schema (a grammar, strict mode)
# can then only write one of these, and "depends_on" only names one of them (a small model wrote a field name
# there). Only what the model is shown: ``Plan`` still takes any valid id.
SCHEMA_STEP_IDS = [f"s{n}" for n in range(1, 13)]


class _AnyOfSchema(BaseModel):
    """A model whose JSON schema writes tagged unions as plain anyOf (what strict structured output accepts)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The pydantic schema with each ``oneOf`` + ``discriminator`` written as ``anyOf``, step ids as an enum."""
        schema = as_any_of(super().model_json_schema(*args, **kwargs))
        for definition in schema.get("$defs", {}).values():
            props = definition.get("properties", {})
            if "id" in props and "depends_on" in props and "kind" in props:
                props["id"] = {"type": "string", "enum": SCHEMA_STEP_IDS}
                props["depends_on"]["items"] = {"type": "string", "enum": SCHEMA_STEP_IDS}
                # Bounded: Gemma 3 270M, held to the enum by a grammar, wrote "s12" into one list until max_tokens.
                props["depends_on"]["maxItems"] = SHOWN_MAX_STEPS - 1
                props["title"]["maxLength"] = SHOWN_TITLE_LENGTH
        # Strict structured output ignores maxItems; a grammar keeps it: plans there are short (2 to 4 steps, the
        # prompt says), and a small model that repeats a step stops at SHOWN_MAX_STEPS instead of max_tokens.
        schema["properties"]["steps"]["maxItems"] = SHOWN_MAX_STEPS
        return shown_lengths(required_inputs(schema, "input"))  # type: ignore[no-any-return]


# What the schema shown to a model allows of a plan (``Plan`` itself takes up to 12 steps).
SHOWN_MAX_STEPS = 6
SHOWN_TITLE_LENGTH = 80


def required_inputs(schema: dict[str, Any], field: str) -> dict[str, Any]:
    """The schema with each object under ``field`` (a step's input, a call's arguments) cut to its required
    properties and its lists (an ask_user's options), in place.

    Optional tuning fields (a search's ``top_k`` and ``filter``, a SQL step's ``sql``) are for people editing a step;
    a small model held to the schema by a grammar filled them with noise ("top_k": 2025). Validation still takes
    them from a model that writes them anyway.
    """
    defs = schema.get("$defs", {})
    for definition in list(defs.values()):
        ref = definition.get("properties", {}).get(field, {}).get("$ref")
        target = defs.get(ref.rsplit("/", 1)[1]) if isinstance(ref, str) else None
        if not isinstance(target, dict) or "properties" not in target:
            continue
        required = set(target.get("required", []))
        target["properties"] = {
            name: prop for name, prop in target["properties"].items() if name in required or prop.get("type") == "array"
        }
    return schema


# The longest text the schema shown to a model lets it write in one field (a title, a step's question or query, a
# rationale): a server that compiles the schema to a grammar then stops a small model that repeats itself inside a
# string (Gemma 3 270M wrote a step title until max_tokens). Validation keeps each model's own limits.
SHOWN_MAX_LENGTH = 200


def shown_lengths(node: Any) -> Any:
    """The schema with every string's ``maxLength`` at most ``SHOWN_MAX_LENGTH`` (in place; returned for chaining)."""
    if isinstance(node, dict):
        if node.get("type") == "string" and "enum" not in node and "const" not in node:
            node["maxLength"] = min(int(node.get("maxLength", SHOWN_MAX_LENGTH)), SHOWN_MAX_LENGTH)
        for value in node.values():
            shown_lengths(value)
    elif isinstance(node, list):
        for value in node:
            shown_lengths(value)
    return node


def as_any_of(node: Any) -> Any:
    """A JSON schema with each tagged union (``oneOf`` + ``discriminator``) written as plain ``anyOf``."""
    if isinstance(node, dict):
        return {("anyOf" if k == "oneOf" else k): as_any_of(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [as_any_of(v) for v in node]
    return node


_PLAN_MODELS: dict[tuple[tuple[str, type[BaseModel]], ...], type[BaseModel]] = {}


def plan_output_model(kinds_offered: set[str] | None = None) -> type[BaseModel]:
    """The plan shape the model is asked for: one step variant per kind, each with that kind's typed input.

    Built from the registry, so a server that constrains output to a schema (llama.cpp's grammar,
    OpenAI's strict mode) can only produce steps whose input fits their kind. ``Plan`` stays the validator
    of what the orchestrator runs; this is only what the model is given.
    """
    offered = step_kinds() if kinds_offered is None else kinds_offered
    kinds = tuple((kind, input_model_for(kind)) for kind in [*sorted(offered), *ORCHESTRATOR_KINDS])
    cached = _PLAN_MODELS.get(kinds)
    if cached is not None:
        return cached
    variants = [
        create_model(
            f"{''.join(part.title() for part in kind.split('_'))}Step",
            __config__=ConfigDict(extra="forbid"),
            id=(str, Field(pattern=PlanStep.model_fields["id"].metadata[0].pattern)),
            kind=(Literal[kind], ...),  # type: ignore[arg-type]  # a Literal built at run time
            title=(str, Field(min_length=1, max_length=200)),
            input=(model, ...),
            depends_on=(list[str], Field(default_factory=list)),
        )
        for kind, model in kinds
    ]
    # Validated as a tagged union (errors name the step's own kind); shown to the model as anyOf.
    step = Annotated[Union[tuple(variants)], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
    plan_model = create_model(
        "Plan",
        __base__=_AnyOfSchema,
        steps=(list[step], Field(min_length=1, max_length=12)),  # type: ignore[valid-type]
        rationale=(str | None, Field(default=None, max_length=1000)),
    )
    _PLAN_MODELS[kinds] = plan_model
    return plan_model


@register(PLAN, description="Plan the steps of a job.", uses_llm=True, internal=True)
def plan(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Ask the planner for a plan and check every step kind against the registry."""
    task = PlanTask.model_validate(inp.task)
    kinds = step_kinds()
    if PYTHON_TOOL not in inp.execution_context.allowed_tools:
        # Code runs only in jobs that allow it: the planner is not offered the kind elsewhere.
        kinds = {k: v for k, v in kinds.items() if k not in kinds_where(lambda spec: spec.runs_code)}
    response = call_llm(
        inp,
        clients,
        LLMTask.PLAN,
        {
            "question": task.question,
            "catalog": planning_catalog(clients.catalog.prompt_view()),
            "documents": clients.document_titles(),
            "step_kinds": kinds | {kind: text for kind, (_model, text) in ORCHESTRATOR_KINDS.items()},
            "repair": _repair_lines(task.repair),
        },
        plan_output_model(set(kinds)),
    )
    usage = usage_of(response, clients)
    raw = response.output.model_dump(mode="json", exclude_none=True)
    # A replan's question carries what already ran (after ALREADY_DONE): an added answer step gets the user's question.
    checked = _checked_plan(raw, kinds, task.question.partition(f"\n\n{ALREADY_DONE}")[0])
    if isinstance(checked, str):
        # The reply goes back with the failure: the orchestrator may show it to the planner to repair.
        rejected = {"rejected_output": json.dumps(raw)[:8000]}
        return ExecutorOutput.failure(
            ErrorCode.BAD_REQUEST, checked, usage=usage, model_used=response.model_used, result=rejected
        )
    return ExecutorOutput(
        status="success", result=checked.model_dump(mode="json"), usage=usage, model_used=response.model_used
    )


def planning_catalog(view: dict[str, Any]) -> str:
    """What the planner needs of the catalog's prompt view: what the tables hold, as lines.

    Only which facts exist decides a plan; how to query them (joins, metric SQL, time grains, notes) is the SQL
    writer's, which gets the whole view. On a small model on CPU this is most of the planning prompt (plan.v5).
    """
    period = view.get("data_period") or {}
    lines = [str(view.get("description") or "").strip()]
    if period.get("start") or period.get("end"):
        lines.append(f"Data from {period.get('start')} to {period.get('end')}.")
    lines.append("Tables (name: what it holds; columns):")
    for table in view.get("tables") or []:
        columns = "; ".join(str(c) for c in table.get("columns") or [])
        lines.append(f"- {table.get('name')}: {table.get('description')} Columns: {columns}")
    metrics = view.get("metrics") or []
    if metrics:
        lines.append("Measures: " + "; ".join(f"{m.get('name')} ({m.get('description')})" for m in metrics))
    restricted = view.get("restricted_tables") or []
    if restricted:
        lines.append(f"Restricted tables (never queried): {', '.join(map(str, restricted))}")
    return "\n".join(line for line in lines if line)


def _earlier_dependencies(raw: dict[str, Any]) -> dict[str, Any]:
    """The plan with each step's ``depends_on`` cut to ids of earlier steps.

    A step can only use what ran before it, so a reference to itself, a later step or no step at all means
    nothing; dropping it loses nothing (an answer step without dependencies uses every earlier output). Small
    models write such references ("s1" depending on "s1" and "s2") and would otherwise fail planning for them.
    """
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return raw
    seen: list[str] = []
    cleaned: list[Any] = []
    for step in steps:
        if isinstance(step, dict) and isinstance(step.get("depends_on"), list):
            kept = [d for d in step["depends_on"] if d in seen]
            step = {**step, "depends_on": list(dict.fromkeys(kept))}
        cleaned.append(step)
        if isinstance(step, dict) and isinstance(step.get("id"), str):
            seen.append(step["id"])
    return {**raw, "steps": cleaned}


def _distinct_ids(raw: dict[str, Any]) -> dict[str, Any]:
    """The plan with a repeated step id renamed to an unused ``s<n>``; a later reference means the latest step so named.

    Ids only name steps: renaming one changes nothing a step may read (a reference still has to name an earlier
    step). Small models restart their numbering ("s1" twice) and would otherwise fail planning for it.
    """
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return raw
    taken = {s["id"] for s in steps if isinstance(s, dict) and isinstance(s.get("id"), str)}
    latest: dict[str, str] = {}  # an id as the model wrote it -> the id of the latest step it wrote it for
    seen: set[str] = set()
    renamed: list[Any] = []
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("id"), str):
            renamed.append(step)
            continue
        if isinstance(step.get("depends_on"), list):
            step = {**step, "depends_on": [latest.get(d, d) if isinstance(d, str) else d for d in step["depends_on"]]}
        written = new = step["id"]
        if new in seen:
            new = next(f"s{n}" for n in range(1, len(steps) + len(taken) + 2) if f"s{n}" not in taken)
            taken.add(new)
            step = {**step, "id": new}
        seen.add(new)
        latest[written] = new
        renamed.append(step)
    return {**raw, "steps": renamed}


def _with_answer_step(raw: dict[str, Any], question: str, kinds: dict[str, str]) -> dict[str, Any]:
    """The plan with an answer step appended when it has none (the user's question, after every earlier step).

    The answer step reads only what the plan's own steps return, and its input is the user's question, never
    model text: adding it widens nothing. A plan that is full (``Plan``'s step limit) is left to be refused.
    """
    steps = raw.get("steps")
    answer_kinds = sorted(set(kinds_where(lambda spec: spec.writes_answer)) & set(kinds))
    if not isinstance(steps, list) or not steps or not answer_kinds:
        return raw
    if any(isinstance(s, dict) and s.get("kind") in answer_kinds for s in steps):
        return raw
    if len(steps) >= Plan.model_fields["steps"].metadata[-1].max_length:
        return raw
    ids = [s["id"] for s in steps if isinstance(s, dict) and isinstance(s.get("id"), str)]
    kind = answer_kinds[0]
    step_id = next(i for i in ("answer", *(f"s{n}" for n in range(1, len(ids) + 2))) if i not in ids)
    answer = {
        "id": step_id,
        "kind": kind,
        "title": "Write the answer",
        "input": input_for_text(kind, question),
        "depends_on": ids,
    }
    return {**raw, "steps": [*steps, answer]}


def _checked_plan(raw: dict[str, Any], kinds: dict[str, str], question: str) -> Plan | str:
    """The plan checked against the registry (kinds, typed inputs, an answer step), or what is wrong with it.

    The one place a plan is repaired and validated: repairs only rename ids, drop references that mean nothing
    and add the answer step; every step is then checked as the model wrote it.
    """
    raw = _with_answer_step(_earlier_dependencies(_distinct_ids(raw)), question, kinds)
    unknown = [s.get("kind") for s in raw.get("steps", []) if s.get("kind") not in ORCHESTRATOR_KINDS | kinds]
    if unknown:
        return f"the plan uses unknown step kinds {unknown}; known: {sorted(kinds)}"
    for step in raw.get("steps", []):
        inputs = step.get("input") if isinstance(step.get("input"), dict) else {}
        copied = [name for name, value in inputs.items() if isinstance(value, str) and is_placeholder(value)]
        if copied:
            # A small model copies a "<...>" placeholder of instructions: it asks nothing, so the step would be noise.
            return (
                f"the plan is not valid: step {step.get('id')!r} has a placeholder as input.{copied[0]} "
                f"({inputs[copied[0]]!r}); write the actual words from the question"
            )
    try:
        return check_plan(Plan.model_validate(raw))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        return f"the plan is not valid at {where}: {msg}" if where else f"the plan is not valid: {msg}"
    except ValueError as exc:
        return f"the plan is not valid: {exc}"


def _repair_lines(repair: PlanRepair | None) -> list[str] | None:
    """The repair turn as prompt lines (untrusted: they quote the model's own earlier output)."""
    if repair is None:
        return None
    return [f"your previous reply: {repair.rejected_output}", f"why it was rejected: {repair.problems}"]
