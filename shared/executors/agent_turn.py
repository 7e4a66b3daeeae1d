"""agent_turn: one turn of the Executor in agent mode (internal executor): reason, then choose tools.

The tools it is offered, and their argument schemas, come from the registry (each step kind's typed
input model), the Executor's own tools and the family tools the job allows; nothing is written twice.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from shared.executors import AGENT_TURN, get_executor, lookup_kinds, register
from shared.executors.common import call_llm, usage_of
from shared.executors.plan import as_any_of, required_inputs, shown_lengths
from shared.jobs.agent import (
    FORMAT_OUTPUT,
    GET_JOB_STATE,
    REQUEST_USER_FEEDBACK,
    AgentToolCall,
    AgentTurn,
    ToolCallRecord,
)
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


class _WrittenCall(BaseModel):
    """One tool call as the model writes it: ``arguments`` an object (``arguments_json``, a string, as before v4).

    Validation takes any name and any arguments: the orchestrator checks each call against its tool and refuses a
    bad one into the result envelope, which the model sees on its next turn, instead of failing the whole turn.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=40)
    tool: str = Field(min_length=1, max_length=100)
    arguments: Any = None
    arguments_json: str | None = Field(default=None, max_length=8000)

    @model_validator(mode="after")
    def _bounded(self) -> _WrittenCall:
        if self.arguments is not None and len(json.dumps(self.arguments, default=str)) > 8000:
            raise ValueError("arguments: longer than 8000 characters as JSON")
        return self

    def as_call(self) -> AgentToolCall:
        """The call in the orchestrator's shape (its arguments as JSON text)."""
        if self.arguments is not None or self.arguments_json is None:
            text = json.dumps({} if self.arguments is None else self.arguments, default=str)
        else:
            text = self.arguments_json
        return AgentToolCall(id=self.id, tool=self.tool, arguments_json=text)


class WrittenTurn(BaseModel):
    """An Executor turn as the model writes it; ``as_turn`` gives the ``AgentTurn`` the orchestrator reads.

    Its JSON schema (what the model is sent) is a union with one variant per offered tool: the name is that tool's
    constant and ``arguments`` its own typed input. A server that constrains output to the schema (llama.cpp's
    grammar, strict structured output) can then only write a call of an offered tool with the fields it needs (a
    question for ``request_user_feedback``). Validation stays lenient (``_WrittenCall``). A family tool's schema
    comes from its server, untrusted: it is shown in the prompt only, never compiled into the output schema.
    """

    model_config = ConfigDict(extra="forbid")

    reasoning: str = Field(default="", max_length=2000)
    tool_calls: list[_WrittenCall] = Field(default_factory=list, max_length=8)

    offered: ClassVar[tuple[tuple[str, type[BaseModel] | None], ...]] = ()

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The schema the model is sent: each tool call a variant of one offered tool, with its typed arguments."""
        if not cls.offered:
            return super().model_json_schema(*args, **kwargs)
        variants = [
            create_model(
                f"{''.join(part.title() for part in re.split(r'[^A-Za-z0-9]+', name) if part)}Call",
                __config__=ConfigDict(extra="forbid"),
                id=(str, Field(min_length=1, max_length=40)),
                tool=(Literal[name], ...),  # type: ignore[arg-type]  # a Literal built at run time
                arguments=(model if model is not None else dict[str, Any], ...),
            )
            for name, model in cls.offered
        ]
        call = Annotated[Union[tuple(variants)], Field(discriminator="tool")]  # type: ignore[valid-type]  # noqa: UP007
        typed = create_model(
            "AgentTurn",
            __config__=ConfigDict(extra="forbid"),
            reasoning=(str, Field(default="", max_length=2000)),
            tool_calls=(list[call], Field(default_factory=list, max_length=8)),  # type: ignore[valid-type]
        )
        schema = required_inputs(as_any_of(typed.model_json_schema(*args, **kwargs)), "arguments")
        return shown_lengths(schema)  # type: ignore[no-any-return]

    def as_turn(self) -> AgentTurn:
        """The turn in the orchestrator's shape."""
        return AgentTurn(reasoning=self.reasoning, tool_calls=[call.as_call() for call in self.tool_calls])


def _argument_model(name: str) -> type[BaseModel] | None:
    """A tool's typed input: a lookup kind's input model or an Executor tool's; None for a family tool."""
    if name in _OWN_TOOLS:
        return _OWN_TOOLS[name][1]
    spec = get_executor(name) if name in lookup_kinds() else None
    return spec.input_model if spec is not None else None


@lru_cache(maxsize=64)
def turn_output_model(names: tuple[str, ...]) -> type[WrittenTurn]:
    """The output type of a turn that offers ``names`` (one class per set of names; the schema cache keys on it)."""
    offered = tuple((name, _argument_model(name)) for name in names)
    return type("AgentTurn", (WrittenTurn,), {"offered": offered, "__module__": __name__})


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
        result=response.output.as_turn().model_dump(mode="json"),
        usage=usage_of(response, clients),
        model_used=response.model_used,
    )
