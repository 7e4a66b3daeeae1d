"""What a definition may name, from the app itself: step kinds of the executor registry with their typed inputs
and outputs, the configured tool families, the configured LLM provider. Validation asks only this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from shared.definitions.types import ANY, JsonSchema, object_schema
from shared.jobs.contracts import AnswerResult, RagResult, SqlResult
from shared.jobs.runs import RunLimits

if TYPE_CHECKING:
    from shared.runtime.settings import Settings


def model_schema(model: type[BaseModel]) -> JsonSchema:
    """The JSON Schema of a pydantic model, as validation reads it."""
    return model.model_json_schema()


def _no_tools(name: str) -> str | None:
    return f"tool {name!r} is not configured on this app"


def _untyped(_name: str) -> JsonSchema | None:
    return None


@dataclass(frozen=True)
class Catalog:
    """The app's step kinds, tools and provider, as validation sees them (tests build their own)."""

    # Step kind → JSON Schema of its input (what a step node's mappings fill) and of its result.
    step_inputs: dict[str, JsonSchema] = field(default_factory=dict)
    step_outputs: dict[str, JsonSchema] = field(default_factory=dict)
    # Why a family tool may not be named (None: it is configured); never connects.
    tool_problem: Callable[[str], str | None] = _no_tools
    # The input schema of a family tool when it is cheap to know (None: unchecked).
    tool_input: Callable[[str], JsonSchema | None] = _untyped
    llm_provider: str = "offline"
    # The app's run limits: a design whose static worst case exceeds one is refused when saved.
    run_limits: RunLimits = field(default_factory=RunLimits)

    def step_kinds(self) -> list[str]:
        """The step kinds a step node or an agent's tools may name."""
        return sorted(self.step_inputs)


# The result model of each built-in step kind, by the role its spec declares (or its name).
def result_model(kind: str, writes_answer: bool, runs_sql: bool) -> type[BaseModel] | None:
    """The result model of a step kind (None: untyped), by the role its spec declares or its name."""
    if writes_answer:
        return AnswerResult
    if runs_sql:
        return SqlResult
    return RagResult if kind == "consult_rag" else None


def _step_schemas(runs_code: bool) -> tuple[dict[str, JsonSchema], dict[str, JsonSchema]]:
    """Input and output schemas of the step kinds; the kinds that run code only when ``runs_code``."""
    from shared.executors import get_executor, step_kinds

    inputs: dict[str, JsonSchema] = {}
    outputs: dict[str, JsonSchema] = {}
    for kind in step_kinds():
        spec = get_executor(kind)
        if spec is None or spec.input_model is None or (spec.runs_code and not runs_code):
            continue
        inputs[kind] = model_schema(spec.input_model)
        result = result_model(kind, spec.writes_answer, spec.runs_sql)
        outputs[kind] = model_schema(result) if result is not None else ANY
    return inputs, outputs


def _tool_input(settings: Settings) -> Callable[[str], JsonSchema | None]:
    """Input schemas of the tools that can be listed without the network (no MCP server configured)."""

    def lookup(name: str) -> JsonSchema | None:
        if name.startswith("mcp.") or settings.tools_mcp_servers:
            return None
        from shared.tools import tools

        try:
            tool = tools(settings).get(name)
        except ValueError:
            return None
        return tool.spec.input_schema if tool is not None else None

    return lookup


def app_catalog(settings: Settings) -> Catalog:
    """The catalog of this app under these settings (nothing connects)."""
    from shared.tools import undeclared
    from shared.tools.python import PYTHON_TOOL

    # A step kind that runs code is named only where the app may run code (the python.run tool is declared).
    inputs, outputs = _step_schemas(runs_code=undeclared(settings, PYTHON_TOOL) is None)
    return Catalog(
        step_inputs=inputs,
        step_outputs=outputs,
        tool_problem=lambda name: undeclared(settings, name),
        tool_input=_tool_input(settings),
        llm_provider=settings.llm_provider,
        run_limits=app_run_limits(settings),
    )


def app_run_limits(settings: Settings) -> RunLimits:
    """The app's run limits (RUN_MAX_* settings): each run's default and the most a run may ask for."""
    return RunLimits.model_validate({name: getattr(settings, f"run_{name}") for name in RunLimits.model_fields})


# What the nodes that are not steps produce.
TOOL_OUTPUT = object_schema({"success": {"type": "boolean"}, "data": {}, "error": {"type": ["object", "null"]}})
HUMAN_OUTPUT = object_schema({"answer": {"type": "string"}})
CONDITION_OUTPUT = object_schema({"result": {"type": "boolean"}})
JOIN_OUTPUT = object_schema({"results": {"type": "object"}, "failed": {"type": "array"}})
LOOP_OUTPUT = object_schema({"iterations": {"type": "integer"}})
PARALLEL_OUTPUT = object_schema({})
AGENT_TEXT_OUTPUT = object_schema({"text": {"type": "string"}})
AGENT_NODE_INPUT = object_schema({"prompt": {"type": "string"}}, ["prompt"])
