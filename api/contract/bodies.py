"""The API's response bodies besides the job view (api/contract/view.py), and its error body.

Request bodies are the models the handlers parse (``JobRequest``, ``UserAnswer``, ``ForkRequest``, ...); the
OpenAPI document (api/contract/openapi.py) names both. Every model is open to additive fields, like the view.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.contract.view import Open
from shared.providers.sql.verified import VerifiedQuery


def dump_body(model: BaseModel) -> dict[str, Any]:
    """A response body as JSON: every key its builder set (nulls included), none it did not."""
    return model.model_dump(mode="json", exclude_unset=True, by_alias=True)


class ErrorDetail(BaseModel):
    """What went wrong: a stable code, a message for people, and the offending field when there is one."""

    code: str
    message: str
    field: str | None = Field(
        default=None,
        description="The offending field: a dotted path into the request body, keys and list indexes joined by "
        "'.' (constraints.max_tokens, tools.3).",
    )
    errors: list[dict[str, str]] | None = Field(default=None, description="Every bad field, when there are several")


class ErrorBody(BaseModel):
    """Every error the app answers (api/errors.py)."""

    error: ErrorDetail


class Health(Open):
    """The host is up."""

    status: str


class JobAccepted(Open):
    """A job (or a run) was accepted: its id and where to read it."""

    id: str
    status: str
    links: dict[str, str]


class RunAccepted(Open):
    """A workflow or team run was accepted, pinned to one version of its definition."""

    id: str
    status: str
    links: dict[str, str]
    kind: str
    definition: str
    version: int | None


class AnswerAccepted(Open):
    """An answer was taken (``repeated``: the job had taken this very answer already)."""

    id: str
    question_id: str
    accepted: bool
    repeated: bool | None = None


class Cancelling(Open):
    """The job is being cancelled."""

    id: str
    status: str


class JobListItem(Open):
    """One job of the list."""

    id: str | None
    status: str
    question: str | None
    owner: str | None
    created_at: str | None
    updated_at: str | None
    cost: dict[str, Any] | None = Field(
        default=None, description="An ended job's kept cost summary (api/job_costs.py); null while it runs."
    )


class JobList(Open):
    """A page of jobs, newest first; ``next_cursor`` reads the next page."""

    jobs: list[JobListItem]
    next_cursor: str | None


class ForkOrigin(Open):
    """The job and step a fork re-runs from."""

    job: str
    step: str


class ForkAccepted(Open):
    """A fork was started: what it carried over and the input its first re-run step gets."""

    id: str
    status: str
    forked_from: ForkOrigin
    carried_over: list[str]
    step_input: Any


class Comparison(Open):
    """How job ``b`` differs from job ``a``: answer, citations, SQL, steps, usage and duration."""

    a: dict[str, Any]
    b: dict[str, Any]
    answer: dict[str, Any]
    citations: dict[str, Any]
    sql: list[dict[str, Any]]


class DefinitionVersion(Open):
    """One stored version of a definition."""

    version: int
    created_at: str | None
    created_by: str | None


class DefinitionSummary(Open):
    """A definition as the API lists it (built-ins: no owner, no stored versions)."""

    id: str
    kind: str
    name: str
    description: str
    latest_version: int | None
    owner: str | None
    created_at: str | None
    updated_at: str | None


class DefinitionView(Open):
    """One definition: one version of it (the latest by default) and the list of its versions."""

    id: str
    kind: str
    name: str
    description: str
    latest_version: int | None
    owner: str | None
    created_at: str | None
    updated_at: str | None
    version: int | None
    definition: dict[str, Any]
    versions: list[DefinitionVersion]
    created: bool | None = Field(default=None, description="PUT: whether a new version was written")


class DefinitionList(Open):
    """The caller's live definitions of one kind, under the kind's plural (agents, workflows, teams)."""

    model_config = ConfigDict(extra="allow")

    agents: list[DefinitionSummary] | None = None
    workflows: list[DefinitionSummary] | None = None
    teams: list[DefinitionSummary] | None = None


class Archived(Open):
    """A definition was archived (its versions stay for the runs pinned to them)."""

    id: str
    kind: str
    archived: bool


class LogsPage(Open):
    """Step runs across runs, newest first, and the runs in flight now."""

    entries: list[dict[str, Any]]
    next_cursor: str | None
    active: list[dict[str, Any]]


class CostReport(Open):
    """What the caller's jobs created in a range cost, grouped."""

    from_: str = Field(alias="from")
    to: str
    group_by: str
    currency: str
    total: float
    complete: bool
    jobs: int
    truncated: bool
    groups: list[dict[str, Any]]

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class LlmModels(Open):
    """Every provider the app can use, with its models."""

    configured: str
    providers: list[dict[str, Any]]


class LlmTestResult(Open):
    """Whether the model answered one tiny chat call, how fast, or why not."""

    ok: bool
    provider: str
    model: str | None = None
    endpoint: str | None = None
    latency_ms: int | None = None
    message: str | None = None
    error: dict[str, Any] | None = None


class ToolInfo(Open):
    """A configured family tool."""

    name: str
    family: str
    description: str


class ToolList(Open):
    """Every configured family tool, and every left-out one with its reason."""

    tools: list[ToolInfo]
    left_out: list[dict[str, Any]]


class VerifiedQueryShown(VerifiedQuery):
    """A verified query as a caller sees it: whether it is shared, and whether this caller may change it."""

    shared: bool
    editable: bool


class VerifiedQueryList(Open):
    """The verified queries this caller may see."""

    verified_queries: list[VerifiedQueryShown]


class StepKindInfo(Open):
    """A step kind: what it does, its input schema and the fields a person may edit."""

    kind: str
    description: str
    uses_llm: bool
    streams: bool
    writes_answer: bool
    runs_sql: bool
    runs_code: bool
    orchestrated: bool
    text_field: str
    result: Literal["sql", "documents", "answer"] | None = Field(
        default=None, description="The shape of the kind's result: an SQL result, documents, an answer (None: other)."
    )
    input_schema: dict[str, Any]
    editable_fields: list[dict[str, Any]]


class NodeEdgeInfo(Open):
    """A node field that lists node ids, each an edge of the workflow graph."""

    field: str = Field(description="The node's field (its JSON name) that lists the node ids.")
    type: str = Field(description="The edge's type, as the graph names it (after, branch, then, else, body).")
    direction: Literal["in", "out", "chain"] = Field(
        description="in: from each listed node to this one; out: from this node to each; chain: from this node "
        "through the list in order, then from the last back to this node (a 'repeat' edge)."
    )
    label: str = Field(description="How a person reads the edge type.")
    auto: bool = Field(description="A connection drawn from a node of this kind makes this edge by default.")
    required: bool = Field(description="The kind needs the field: it stays (empty) when its last id is removed.")


class NodeKindInfo(Open):
    """A workflow node kind: its schema (a ``$ref`` into the catalog's ``node_schema``) and its place in the graph."""

    kind: str
    schema_: dict[str, Any] = Field(alias="schema")
    edges: list[NodeEdgeInfo] = Field(default_factory=list)
    summary_field: str | None = Field(
        default=None, description="The field that says what a node of this kind does (shown under its id)."
    )

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ReferenceSyntax(Open):
    """How a definition refers to the workflow input or a node's output (what renaming a node rewrites)."""

    pattern: str = Field(description="The pattern of one reference: input.<name>[.<field>...] or <node id>[...].")
    separator: str = Field(description="What splits a reference's head (a node id, or the input) from its fields.")
    input: str = Field(description="The head that names the workflow input (no node may take it).")
    fields: list[str] = Field(description="Fields (anywhere in a node or a mapping) that hold one reference.")
    template_fields: list[str] = Field(description="Fields whose text holds references matched by template_pattern.")
    template_pattern: str = Field(description="Matches each reference in a template; group 1 is the reference.")


class Catalog(Open):
    """What a client must know of the server's rules: kinds, schemas, statuses, questions, codes, patterns."""

    version: int
    step_kinds: list[StepKindInfo]
    node_schema: dict[str, Any]
    node_kinds: list[NodeKindInfo]
    job_statuses: list[str]
    terminal_statuses: list[str]
    step_states: list[str]
    question_kinds: list[dict[str, Any]]
    error_codes: list[dict[str, Any]]
    tool_name_pattern: str
    job_request_schema: dict[str, Any] = Field(description="The JSON Schema of POST /api/jobs' body.")
    references: ReferenceSyntax
    labels: dict[str, dict[str, str]] = Field(
        description="Display text by group (job_status, step_state, mode, approval.sql, waiting_form) and value; "
        "a client shows a value missing here as itself."
    )
    team_schema: dict[str, Any] = Field(description="The JSON Schema of a team definition (its strategies' fields).")
    definitions: dict[str, list[str]] = Field(
        description="The definition forms' closed choices: condition_ops, input_types, team_strategies, providers."
    )
