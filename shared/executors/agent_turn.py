"""agent_turn: one turn of the Executor in agent mode (internal executor): reason, then choose tools.

The tools it is offered, and their argument schemas, come from the registry (each step kind's typed
input model), the Executor's own tools and the family tools the job allows; nothing is written twice.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shared.executors import AGENT_TURN, get_executor, lookup_kinds, register
from shared.executors.common import call_llm, usage_of
from shared.jobs.agent import FORMAT_OUTPUT, GET_JOB_STATE, REQUEST_USER_FEEDBACK, AgentTurn, ToolCallRecord
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput, ProviderError
from shared.jobs.plan import AskUserInput
from shared.providers.interfaces import LLMTask

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class AgentTurnTask(BaseModel):
    """What the orchestrator gives one turn: the question, the calls so far and what is left of the bounds."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000)
    transcript: list[ToolCallRecord] = Field(default_factory=list, max_length=64)
    turns_left: int = Field(ge=1)
    calls_left: int = Field(ge=0)
    # A workflow's agent: its instructions (the definition's text, set by the orchestrator from the pinned agent).
    instructions: str | None = Field(default=None, max_length=32_000)
    # A workflow's agent: the lookup kinds it may call (None: every one); the orchestrator refuses the others.
    lookups: list[str] | None = Field(default=None, max_length=32)


class _NoArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


_OWN_TOOLS: dict[str, tuple[str, type[BaseModel]]] = {
    REQUEST_USER_FEEDBACK: ("Ask the user a question and wait for the answer (options optional).", AskUserInput),
    FORMAT_OUTPUT: ("Write the final answer with citations from what the tools returned; call it last.", _NoArguments),
    GET_JOB_STATE: ("Read the job's progress: its tool calls so far, their states, usage and budget.", _NoArguments),
}


def own_tools() -> set[str]:
    """The Executor's own tools, which the orchestrator works itself."""
    return set(_OWN_TOOLS)


def tool_catalog(
    allowed_family_tools: list[str], clients: Clients, lookups: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every tool this job offers the Executor: name, description and JSON schema of its arguments."""
    catalog: list[dict[str, Any]] = []
    for kind in sorted(lookup_kinds()):
        if lookups is not None and kind not in lookups:
            continue
        spec = get_executor(kind)
        assert spec is not None and spec.input_model is not None
        catalog.append({"name": kind, "description": spec.description, "parameters": _schema(spec.input_model)})
    for name, (description, model) in _OWN_TOOLS.items():
        catalog.append({"name": name, "description": description, "parameters": _schema(model)})
    if allowed_family_tools:
        from shared.tools import tools

        try:
            available = tools(clients.settings)
        except ValueError as exc:
            raise ProviderError(ErrorCode.CONFIG_ERROR, f"the tool configuration is not valid: {exc}") from exc
        for name in allowed_family_tools:
            tool = available.get(name)
            if tool is None:
                raise ProviderError(ErrorCode.CONFIG_ERROR, f"the job allows tool {name!r}, which is not configured")
            spec_ = tool.spec
            catalog.append({"name": name, "description": spec_.description[:500], "parameters": spec_.input_schema})
    return catalog


class _OfferedToolsTurn(AgentTurn):
    """An ``AgentTurn`` whose JSON schema names the offered tools: ``tool`` is an enum of them.

    Only the schema sent to the model changes: a server that constrains output to it (llama.cpp's grammar,
    strict structured output) cannot produce another name, so a small model cannot invent one. Validation stays
    ``AgentTurn``'s: where nothing constrains the output, an unknown name is refused by the orchestrator and
    shown to the model like any refused call, instead of failing the turn.
    """

    offered: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """AgentTurn's schema with the offered tool names as the enum of ``tool``."""
        schema = super().model_json_schema(*args, **kwargs)
        schema["$defs"]["AgentToolCall"]["properties"]["tool"]["enum"] = list(cls.offered)
        return schema


@lru_cache(maxsize=64)
def turn_output_model(names: tuple[str, ...]) -> type[AgentTurn]:
    """The output type of a turn that offers ``names`` (one class per set of names; the schema cache keys on it)."""
    return type("AgentTurn", (_OfferedToolsTurn,), {"offered": names, "__module__": __name__})


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


@register(AGENT_TURN, description="One turn of the agent-mode Executor.", uses_llm=True, internal=True)
def agent_turn(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Ask the Executor model for its reasoning and the tool calls it makes now."""
    task = AgentTurnTask.model_validate(inp.task)
    catalog = tool_catalog(inp.execution_context.allowed_tools, clients, task.lookups)
    inputs: dict[str, object] = {
        "question": task.question,
        "tools": catalog,
        "transcript": [record.model_dump(mode="json") for record in task.transcript],
        "turns_left": task.turns_left,
        "calls_left": task.calls_left,
    }
    if task.instructions:
        inputs["instructions"] = task.instructions
    names = tuple(sorted(str(tool["name"]) for tool in catalog))
    response = call_llm(inp, clients, LLMTask.AGENT_TURN, inputs, turn_output_model(names))
    return ExecutorOutput(
        status="success",
        result=response.output.model_dump(mode="json"),
        usage=usage_of(response, clients),
        model_used=response.model_used,
    )
