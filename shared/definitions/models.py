"""The shapes of user-defined agents, workflows and teams (what the API accepts and the store keeps).

These models check each field on its own (lengths, patterns, enums). What needs more than one field or
other definitions (references, the graph, types across mappings) is checked by ``validate.py``. A
definition's text is user data: nothing in it sets what a run may reach beyond what the orchestrator
grants after its own checks (tools are checked against the app's configuration when saved and again
when a run starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

from shared.jobs.agent import TOOL_NAME, AgentLimits
from shared.jobs.models import Budget

DefinitionKind = Literal["agent", "workflow", "team"]
KINDS: tuple[DefinitionKind, ...] = ("agent", "workflow", "team")
# Ids are slugs: they appear in URLs, table keys and references.
SLUG = r"^[a-z][a-z0-9-]{0,62}$"
NODE_ID = r"^[a-z][a-z0-9_]{0,31}$"
# A reference: "input.<name>[.<field>...]" or "<node id>[.<field>...]".
REF = r"^[a-z][a-z0-9_]{0,31}(\.[A-Za-z0-9_-]{1,64}){0,8}$"
# The workflow input's name in references; no node may take it.
INPUT = "input"
# What splits a reference into its head (a node id or INPUT) and the fields it reads.
REF_SEPARATOR = "."
# The references inside a template's text: each is group 1 of a match (stripped of spaces).
TEMPLATE_REF = r"\{([^{}]*)\}"
# One text (instructions, a template) stays far below the 64 KB property limit of Azure Tables.
MAX_TEXT = 32_000
# A whole definition, as compact ASCII JSON (what the store keeps); over this is a 413.
MAX_DEFINITION_BYTES = 256 * 1024

# Field metadata read by the catalog (api/catalog.py), so that clients draw and edit a graph from the models
# themselves: a node kind or field added here reaches the console with no change there.


@dataclass(frozen=True)
class Edge:
    """A node field that lists node ids: each is an edge of the workflow graph.

    ``direction``: "in" (from each listed node to this one), "out" (from this node to each), or "chain"
    (from this node through the list in order, and from the last back to this node: a repeat edge).
    ``auto``: a connection drawn from a node of this kind makes this edge unless the user chooses another.
    """

    type: str
    direction: Literal["in", "out", "chain"]
    label: str
    auto: bool = False


@dataclass(frozen=True)
class Summary:
    """The node field that says what a node of its kind does, in a few words (shown under its id)."""


@dataclass(frozen=True)
class Reference:
    """A string field that holds one reference ("input.x" or "<node id>.field"): renaming a node rewrites it."""


@dataclass(frozen=True)
class ReferenceTemplate:
    """A string field whose text holds references in braces (``TEMPLATE_REF``): renaming a node rewrites them."""


Slug = Annotated[str, StringConstraints(pattern=SLUG)]
NodeId = Annotated[str, StringConstraints(pattern=NODE_ID)]
ToolName = Annotated[str, StringConstraints(pattern=TOOL_NAME, max_length=100)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Definition(_Strict):
    id: Slug
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)


# --- Agent ---------------------------------------------------------------------------------------------


class ModelChoice(_Strict):
    """Which model an agent uses: provider (None: the app's LLM_PROVIDER), deployment or model, fallbacks."""

    provider: Literal["offline", "azure_openai", "openai"] | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    fallbacks: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=7
    )


class AgentConstraints(_Strict):
    """Per-call limits of an agent (the job constraints' shape) and its budget per run."""

    max_tokens: int = Field(default=1024, ge=1, le=128_000)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    timeout_ms: int = Field(default=60_000, ge=100, le=600_000)
    budget: Budget = Field(default_factory=Budget)


class Agent(_Definition):
    """An agent: a system prompt, a model, the tools it may ask for, its limits and an optional output schema."""

    kind: Literal["agent"] = "agent"
    instructions: str = Field(min_length=1, max_length=MAX_TEXT)
    model: ModelChoice = Field(default_factory=ModelChoice)
    # Step kinds of the registry (consult_rag, ...) and tools of the families ("function.growth_rate").
    tools: list[ToolName] = Field(default_factory=list, max_length=32)
    constraints: AgentConstraints = Field(default_factory=AgentConstraints)
    limits: AgentLimits = Field(default_factory=AgentLimits)
    # JSON Schema of the agent's final output (an object); checked to be a valid schema when saved.
    output_schema: dict[str, Any] | None = None


# --- Workflow: typed inputs, mappings, nodes -------------------------------------------------------------


class InputSpec(_Strict):
    """One typed workflow input."""

    type: Literal["string", "number", "integer", "boolean", "object", "array"]
    description: str = Field(default="", max_length=1000)
    required: bool = True
    default: Any = None


class Ref(_Strict):
    """A value read from the workflow input or from an earlier node's output: ``{"from": "sales.rows"}``."""

    from_: Annotated[str, Reference()] = Field(alias="from", pattern=REF)


class Value(_Strict):
    """A literal value: ``{"value": 5}``."""

    value: Any


class Template(_Strict):
    """A string with references in braces: ``{"template": "Summarise {sales.rows} for {input.region}"}``."""

    template: Annotated[str, ReferenceTemplate()] = Field(min_length=1, max_length=MAX_TEXT)


def _mapping_tag(value: Any) -> str:
    """Which mapping a value is, by its one key (so an error names that shape, not all three)."""
    keys = set(value) if isinstance(value, dict) else set()
    if isinstance(value, Ref) or "from" in keys:
        return "mapping:from"
    if isinstance(value, Template) or "template" in keys:
        return "mapping:template"
    return "mapping:value"


# Tags hold a colon, which no field name may: the error paths drop them (see ``validate.issue_path``).
Mapping = Annotated[
    Annotated[Ref, Tag("mapping:from")]
    | Annotated[Value, Tag("mapping:value")]
    | Annotated[Template, Tag("mapping:template")],
    Discriminator(_mapping_tag),
]
Inputs = dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], Mapping]


class Condition(_Strict):
    """A test on a value an earlier node produced (or on the input): ``left op right``."""

    left: Annotated[str, Reference()] = Field(pattern=REF)
    op: Literal["eq", "ne", "gt", "ge", "lt", "le", "contains", "exists", "truthy"]
    right: Any = None


class _Node(_Strict):
    id: NodeId
    title: str = Field(default="", max_length=200)
    # The nodes that must finish before this one starts (fan-in when several).
    after: Annotated[list[NodeId], Edge("after", "in", "after")] = Field(default_factory=list, max_length=16)


class AgentNode(_Node):
    """Run an agent (a pinned version, or the latest when the run starts) on a prompt."""

    kind: Literal["agent"]
    agent: Annotated[Slug, Summary()]
    version: int | None = Field(default=None, ge=1)
    input: Inputs = Field(default_factory=dict, max_length=32)


class StepNode(_Node):
    """A built-in step: a kind of the executor registry (consult_rag, execute_azure_sql, generate_response)."""

    kind: Literal["step"]
    step: Annotated[str, Summary()] = Field(pattern=r"^[a-z][a-z0-9_]{1,63}$")
    input: Inputs = Field(default_factory=dict, max_length=32)


class ToolNode(_Node):
    """One call of a family tool ("function.growth_rate", "http.weather", "mcp.<server>.<tool>")."""

    kind: Literal["tool"]
    tool: Annotated[ToolName, Summary()]
    input: Inputs = Field(default_factory=dict, max_length=32)


class HumanNode(_Node):
    """Ask a person: an approval (options) or a question (free text); the run waits for the answer."""

    kind: Literal["human"]
    question: Mapping
    options: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=8
    )
    free_text: bool = False
    # None: the app's JOB_USER_WAIT_TIMEOUT_SECONDS (or the run's wait.timeout_seconds).
    timeout_seconds: int | None = Field(default=None, ge=1, le=7 * 86_400)
    # The answer the run takes when no one answers in time (one of options, or any text with free_text);
    # None: the run fails with WAIT_EXPIRED.
    on_timeout: str | None = Field(default=None, min_length=1, max_length=100)


class ConditionNode(_Node):
    """Branch on an earlier output: the nodes of ``then`` run when it holds, those of ``else`` when not."""

    kind: Literal["condition"]
    if_: Condition = Field(alias="if")
    then: Annotated[list[NodeId], Edge("then", "out", "then (condition)", auto=True)] = Field(
        default_factory=list, max_length=16
    )
    else_: Annotated[list[NodeId], Edge("else", "out", "else (condition)")] = Field(
        default_factory=list, alias="else", max_length=16
    )


class ParallelNode(_Node):
    """Fan out: every branch (a node id) starts at once; a ``join`` node brings them back together."""

    kind: Literal["parallel"]
    branches: Annotated[list[NodeId], Edge("branch", "out", "branch (parallel)", auto=True)] = Field(
        min_length=2, max_length=16
    )


class JoinNode(_Node):
    """Fan in: waits for the nodes of ``after`` (all, or the first), failing or carrying on when one fails."""

    kind: Literal["join"]
    wait: Literal["all", "any"] = "all"
    on_failure: Literal["fail", "continue"] = "fail"


class WorkflowNode(_Node):
    """Run another workflow as a sub-orchestration, with its inputs mapped from here."""

    kind: Literal["workflow"]
    workflow: Annotated[Slug, Summary()]
    version: int | None = Field(default=None, ge=1)
    input: Inputs = Field(default_factory=dict, max_length=32)


class LoopNode(_Node):
    """Repeat the ``body`` nodes in order, at most ``max_iterations`` times, until ``until`` holds."""

    kind: Literal["loop"]
    body: Annotated[list[NodeId], Edge("body", "chain", "body (loop)", auto=True)] = Field(min_length=1, max_length=16)
    max_iterations: int = Field(ge=1, le=20)
    until: Condition | None = None


Node = Annotated[
    AgentNode | StepNode | ToolNode | HumanNode | ConditionNode | ParallelNode | JoinNode | WorkflowNode | LoopNode,
    Field(discriminator="kind"),
]
NODE_KINDS = ("agent", "step", "tool", "human", "condition", "parallel", "join", "workflow", "loop")


class Workflow(_Definition):
    """A graph of nodes with typed inputs and named outputs."""

    kind: Literal["workflow"] = "workflow"
    inputs: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], InputSpec] = Field(
        default_factory=dict, max_length=32
    )
    # Where a run begins (default: the first node); every other node must be reachable from it.
    start: NodeId | None = None
    nodes: list[Node] = Field(min_length=1, max_length=64)
    outputs: Inputs = Field(default_factory=dict, max_length=32)


# --- Team ------------------------------------------------------------------------------------------------


class Sequential(_Strict):
    """Each member works in turn on what the one before produced."""

    type: Literal["sequential"]


class FanOut(_Strict):
    """Every member works at once; the aggregator agent combines their outputs."""

    type: Literal["parallel"]
    aggregator: Slug


class Supervisor(_Strict):
    """A supervisor agent routes the work to one member at a time, at most ``max_rounds`` times."""

    type: Literal["supervisor"]
    supervisor: Slug
    max_rounds: int = Field(default=5, ge=1, le=20)


class Team(_Definition):
    """A set of agents and how they work together."""

    kind: Literal["team"] = "team"
    agents: list[Slug] = Field(min_length=1, max_length=12)
    strategy: Annotated[Sequential | FanOut | Supervisor, Field(discriminator="type")]


Definition = Agent | Workflow | Team
MODELS: dict[str, type[Agent] | type[Workflow] | type[Team]] = {"agent": Agent, "workflow": Workflow, "team": Team}
