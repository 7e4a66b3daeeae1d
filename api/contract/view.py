"""The job view as pydantic models: what ``GET /api/jobs/{id}`` answers, field by field.

Every model is open to additive fields (``extra="allow"``): a field added where the view is built reaches the
client before it is declared here. The view is serialised with ``JobView.dump()``: fields a builder did not set
are left out (``exclude_unset``), so an optional key a client never saw stays absent, and a key the view always
had stays present, ``null`` included. tests/api/test_view_contract.py holds the JSON to recorded views.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.contracts import Usage
from shared.jobs.models import QuestionKind


class Open(BaseModel):
    """A view model: declared fields typed, new fields let through (other changes add them where it is built)."""

    model_config = ConfigDict(extra="allow")


# The job statuses a job ends in: nothing in it changes any more (the view's and the status event's ``finished``).
TERMINAL_STATUSES = ("completed", "failed", "cancelled")
# What a line of the log is about, so a client needs no pattern over its English text.
LogTopic = Literal["job", "task", "answer", "question", "timer"]


class LogEntry(Open):
    """One line of the job's log: a position in the history, its time and the line."""

    seq: int = Field(description="The history position; the log cursor never moves backwards.")
    time: str | None
    message: str = Field(description="Written for people: read ``topic``, ``activity`` and ``failed``, not this.")
    topic: LogTopic | None = Field(default=None, description="What the line is about.")
    activity: str | None = Field(default=None, description="topic task: the activity that ran (agent_turn, ...).")
    failed: bool | None = Field(default=None, description="topic task: whether the attempt failed.")
    step_id: str | None = Field(default=None, description="topic task: the step, when the line names one.")


class LiveLine(Open):
    """A line about text being streamed now: not in the history, no ``seq``, never moves the cursor."""

    step_id: str
    time: str | None
    message: str


class LogPage(Open):
    """The log page after the requested cursor."""

    entries: list[LogEntry]
    next_cursor: int
    complete: bool
    live: list[LiveLine] = Field(default_factory=list)


class PlanView(Open):
    """How planning stands."""

    status: str = Field(description="planning, planned, failed or cancelled")


class PartialOutputView(Open):
    """The answer a streaming step has written so far."""

    text: str
    chars: int
    attempt: int
    complete: bool
    updated_at: str | None


class ToolCallView(Open):
    """One tool call of an agent step, its last attempt."""

    id: str
    tool: str | None
    input: Any
    state: Literal["succeeded", "failed"]
    attempts: int | None
    output: Any
    error: Any
    duration_ms: int | None
    usage: Any


class ArtifactView(Open):
    """A file a code step wrote; ``GET /api/jobs/{id}/artifacts/{ref}`` serves its bytes."""

    name: str
    media_type: str
    size: int
    ref: str


class ErrorView(Open):
    """Where and why a job or a step failed."""

    code: str
    message: str
    step_id: str | None = None
    limit: str | None = Field(default=None, description="RUN_LIMIT_EXCEEDED: which of the run's limits")


class StepView(Open):
    """One step as the view shows it (absent keys: not known or not applicable)."""

    id: str
    kind: str = Field(description="A step kind or node kind of GET /api/catalog.")
    title: str | None = None
    state: str = Field(description="A step state of GET /api/catalog (statuses.step), or cancelled.")
    attempts: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    model: str | None = None
    usage: Usage | None = None
    error: ErrorView | None = None
    retry_at: str | None = None
    next_attempt: int | None = None
    max_attempts: int | None = None
    waited_ms: int | None = None
    waiting_since: str | None = None
    note: str | None = None
    turn: int | None = None
    tool_input: str | None = None
    tool_output: str | None = None
    carried_from: str | None = None
    carried_over: bool | None = None
    message: str | None = Field(default=None, description="The state in words (retrying at ..., did not run: ...)")
    duration_ms: int | None = Field(default=None, description="Run time without human waits (waited_ms).")
    output: dict[str, Any] | None = None
    artifacts: list[ArtifactView] | None = None
    draft: dict[str, Any] | None = None
    tool_calls: list[ToolCallView] | None = None
    partial_output: PartialOutputView | None = None


WaitingForm = Literal["sql", "code", "step_error", "text", "choice"]


class WaitingView(Open):
    """The question a waiting job asks, with ``form``: what kind of question it is, so a UI draws it as such."""

    question_id: str
    step_id: str | None
    kind: QuestionKind
    question: str
    options: list[str]
    free_text: bool
    details: dict[str, Any]
    asked_at: str
    expires_at: str
    expiry_default: str | None
    instance: str | None
    step_kind: str | None
    asked_in: list[str] | None = Field(
        default=None, description="A part of the run asks: its path (a branch's node; a sub-workflow's node, run)."
    )
    form: WaitingForm = Field(
        description="sql: approve details.sql; code: approve details.code; step_error: retry, skip or edit a failed "
        "step; text: answered in words (options are suggestions); choice: pick one of options (a workflow's "
        "human node, approve/reject included)."
    )


class UsageView(Open):
    """Tokens and cost: the job's total, planning, the Supervisor, the Executor's turns, and each step."""

    total: Usage | None
    planning: Usage | None
    supervisor: Usage | None
    executor: Usage | None
    by_step: dict[str, Usage]
    carried_over: Usage | None = Field(default=None, description="A fork: what its carried steps used in the origin")


class AgentView(Open):
    """Agent mode: the Executor's turns and tool calls so far against the job's bounds."""

    turns: int
    max_turns: int
    tool_calls: int
    max_tool_calls: int


class RunGraph(Open):
    """The nodes (and start) of the workflow a run loaded for itself."""

    nodes: list[dict[str, Any]]
    start: Any


class RunView(Open):
    """A workflow or team run: what it runs, its inputs, its graph and, once done, its named outputs."""

    kind: str | None
    id: str | None
    version: int | None
    outputs: Any
    limits: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    graph: RunGraph | None = None


class ForkedFrom(Open):
    """A fork's origin: the job and the step it re-ran from."""

    job: str | None
    step: str | None
    input: Any


class AnswerView(Open):
    """The final answer with its citations (and, when checked, its claims)."""

    text: Any
    citations: Any
    claims: Any = None
    claims_summary: Any = None
    unsupported: Any = None


class ReceivedAnswer(Open):
    """A person's answer the job took: the first answer of each question."""

    question_id: str
    answer: Any
    received_at: str | None
    deliveries: int


class ForkRef(Open):
    """A fork made of this job."""

    id: str | None = None


class JobView(Open):
    """The job view a UI polls: status, plan, steps, question, usage, cost, run, answer, log and links."""

    id: str | None
    status: str = Field(description="A job status of GET /api/catalog (statuses.job).")
    finished: bool = Field(description="The job has ended (completed, failed or cancelled): nothing changes any more.")
    runtime_status: str | None
    question: str | None
    mode: str
    created_at: str | None
    updated_at: str | None
    current_step_index: int
    plan: PlanView
    steps: list[StepView]
    waiting: WaitingView | None
    usage: UsageView
    cost: dict[str, Any] = Field(description="Every meter of the job (shared/runtime/ledger.py).")
    quote: dict[str, Any] | None = Field(
        default=None, description="What the job may cost, made before it spent (shared/jobs/quote.py); null if none."
    )
    agent: AgentView | None
    run: RunView | None
    request: dict[str, Any] = Field(description="What the job was asked with besides its question.")
    forked_from: ForkedFrom | None
    answer: AnswerView | None
    answers: list[ReceivedAnswer]
    error: ErrorView | None
    log: LogPage
    links: dict[str, str]
    history_purged_after: str | None
    forks: list[dict[str, Any]] | None = Field(default=None, description="The forks of this job (GET only).")

    def dump(self) -> dict[str, Any]:
        """The view as JSON: every key the builder set (nulls included), none it did not."""
        return self.model_dump(mode="json", exclude_unset=True)
