"""Job models shared by the HTTP API and the orchestrator: the request, the policy and the compact state.

The compact ``JobState`` is the orchestration's custom status (16 KB at most), so every text in it
is bounded. Step outputs are not in it: they live in the Durable history as activity results.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from shared.jobs.agent import TOOL_NAME, AgentLimits
from shared.jobs.contracts import Constraints, Usage
from shared.jobs.costs import CallPrices
from shared.jobs.quote import Quote, QuotePrices
from shared.jobs.runs import RunReport, RunSpec

JobStatus = Literal["pending", "planning", "running", "waiting_for_user", "completed", "failed", "cancelled"]
StepStateName = Literal["pending", "running", "retrying", "waiting", "succeeded", "failed", "skipped", "cancelled"]
ORCHESTRATOR_NAME = "job_orchestrator"
# Durable runtime statuses of the orchestration behind a job (the app's one copy; devhost keeps its own,
# since it never imports the app).
RUNNING_RUNTIME = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
TERMINAL_RUNTIME = frozenset({"Completed", "Failed", "Terminated", "Canceled"})
FINISHED_STEP_STATES = frozenset({"succeeded", "failed", "skipped", "cancelled"})
# Durable refuses a custom status over 16 KB of UTF-16 JSON; the job state stays under this, with room to spare.
STATUS_BUDGET_BYTES = 14 * 1024


class Budget(BaseModel):
    """Job-wide limits; a step starts only if its worst case still fits."""

    model_config = ConfigDict(extra="forbid")

    max_total_tokens: int | None = Field(default=None, ge=1)
    max_estimated_cost: float | None = Field(default=None, ge=0)
    # Seconds of sandbox time (run_python steps) the job may use in all.
    max_sandbox_seconds: float | None = Field(default=None, gt=0)
    # USD across every priced meter (tokens, tools, sandbox, the Durable backend, Flex), checked before each call.
    max_cost: float | None = Field(default=None, ge=0)


class JobConstraints(Constraints):
    """Step constraints plus the job budget."""

    budget: Budget = Field(default_factory=Budget)


class ApprovalPolicy(BaseModel):
    """Which steps need a human yes before they run."""

    model_config = ConfigDict(extra="forbid")

    # never: no approval; always: every SQL query; sensitive: queries touching tables marked sensitive.
    sql: Literal["never", "always", "sensitive"] = "never"
    # never: code runs without asking; always: a human approves every run_python step's code before it runs;
    # writes_files: the code runs once keeping nothing, and a human approves it when it wrote files.
    python: Literal["never", "always", "writes_files"] = "never"
    # None: the app's JOB_USER_WAIT_TIMEOUT_SECONDS (3 days unless set), the same as every other wait.
    timeout_seconds: int | None = Field(default=None, ge=1, le=7 * 86_400)
    on_timeout: Literal["fail", "approve", "reject"] = "fail"
    # USD: a job whose quote's high end is over this asks a person (with the quote) before it spends past
    # planning (a workflow or team run: before it starts); reject stops it with QUOTE_REJECTED.
    cost_over: float | None = Field(default=None, ge=0)


class WaitPolicy(BaseModel):
    """What happens when a question to the user (other than an approval) is not answered in time."""

    model_config = ConfigDict(extra="forbid")

    # None: the app's JOB_USER_WAIT_TIMEOUT_SECONDS. "default": an expired question takes its default answer
    # (a clarifying question's first option, "skip" for a failed step) instead of failing with WAIT_EXPIRED.
    timeout_seconds: int | None = Field(default=None, ge=1, le=7 * 86_400)
    on_expiry: Literal["fail", "default"] = "fail"


class JobRequest(BaseModel):
    """Body of ``POST /api/jobs``."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000)
    constraints: JobConstraints = Field(default_factory=JobConstraints)
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    wait: WaitPolicy = Field(default_factory=WaitPolicy)
    mode: Literal["deterministic", "hybrid", "agent"] = "deterministic"
    # Agent mode: the tools of the families the Executor may call besides the step kinds ("http.weather", ...).
    tools: list[Annotated[str, StringConstraints(pattern=TOOL_NAME)]] = Field(default_factory=list, max_length=32)
    agent: AgentLimits = Field(default_factory=AgentLimits)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question must not be blank")
        return value.strip()


class RetryPolicy(BaseModel):
    """Retry settings resolved at submit time, so the orchestrator never reads the environment."""

    max_attempts_per_model: int = Field(default=3, ge=1, le=10)
    first_retry_ms: int = Field(default=1000, ge=1)
    max_retry_ms: int = Field(default=60_000, ge=1)
    user_wait_seconds: int = Field(default=259_200, ge=1)
    # USD per output token of each allowed model (for the cost reserve of the budget check).
    output_price: dict[str, float] = Field(default_factory=dict)
    # USD per call of each priced family tool the run may call (TOOL_PRICES), for the same check.
    tool_price: dict[str, float] = Field(default_factory=dict)
    # USD per call and per second of each priced infrastructure meter, from the price table at submit
    # (budget.max_cost); None for jobs started before it existed.
    call_prices: CallPrices | None = None
    # The prices of the job's quote (shared/jobs/quote.py), from the same table version; None: no quote.
    quote_prices: QuotePrices | None = None


class JobOwner(BaseModel):
    """Who started a job (the Easy Auth principal); only they, and admins, see it."""

    id: str = Field(min_length=1, max_length=200)
    name: str = Field(default="", max_length=200)
    idp: str = Field(default="", max_length=50)
    # Their app roles when they started it (whose verified queries the job's SQL steps may reuse).
    roles: list[str] = Field(default_factory=list, max_length=64)


class ForkSpec(BaseModel):
    """In a fork's JobInput: its origin, the step it re-runs from, and that step's edited input fields."""

    model_config = ConfigDict(extra="forbid")

    origin: str = Field(min_length=1, max_length=256)
    from_step: str = Field(min_length=1, max_length=64)
    # The step's editable fields (question, sql, query), checked against its kind's input model by the API.
    input: dict[str, Any] | None = None


class JobInput(BaseModel):
    """The orchestration input: the request plus what the API resolved when it accepted it."""

    job_id: str
    request: JobRequest
    # Set by the API from the authenticated principal, never from the request body; None without Easy Auth.
    owner: JobOwner | None = None
    policy: RetryPolicy = Field(default_factory=RetryPolicy)
    trace: dict[str, str] = Field(default_factory=dict)
    # A workflow or team run (the API pinned its definition); None: today's ask job (the built-in "ask").
    run: RunSpec | None = None
    # A fork of another job (shared/jobs/fork.py): the steps before ``fork.from_step`` are carried over.
    fork: ForkSpec | None = None
    # A workflow or team run: its quote, made by the API from the graph and the bounds before it started.
    quote: Quote | None = None


class ErrorInfo(BaseModel):
    """Where and why a job or step failed."""

    code: str
    message: str = Field(max_length=600)
    step_id: str | None = None
    # RUN_LIMIT_EXCEEDED: which of the run's limits was reached (a RunLimits field name); left out when None, so
    # every other error keeps its shape.
    limit: str | None = Field(default=None, exclude_if=lambda value: value is None)


class StepState(BaseModel):
    """Progress of one plan step (compact)."""

    id: str
    kind: str
    # Empty in a brief step (see ``custom_status``): the job view fills it and the rest in from the history.
    title: str = Field(default="", max_length=200)
    state: StepStateName = "pending"
    attempts: int = 0
    started_at: str | None = None
    ended_at: str | None = None
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None
    # While state is "retrying": when the next attempt starts, which one, and of how many on this model.
    retry_at: str | None = None
    next_attempt: int | None = None
    max_attempts: int | None = None
    # Time spent waiting for a human (not an attempt; excluded from the step's duration).
    waited_ms: int = 0
    waiting_since: str | None = None
    # Why a skipped step did not run (rejected by the user, skipped after a failure, ...).
    note: str | None = Field(default=None, max_length=300)
    # Agent mode: the Executor turn that made this tool call, and the call's arguments and result, cut short.
    turn: int | None = None
    tool_input: str | None = Field(default=None, max_length=200)
    tool_output: str | None = Field(default=None, max_length=200)
    # A fork's step carried over from this job (its result, timings and usage are the origin's, not the fork's).
    carried_from: str | None = Field(default=None, max_length=256)

    def published(self) -> tuple[dict[str, Any], int]:
        """The step as JSON and its size in UTF-16 bytes; a finished tool call's are made once (it stays as it is)."""
        if self.turn is not None and self.state in FINISHED_STEP_STATES:
            return self._finished
        return self._dump()

    def published_brief(self) -> tuple[dict[str, Any], int]:
        """The brief form of a finished tool call and its size in UTF-16 bytes (made once)."""
        return self._finished_brief

    def _dump(self) -> tuple[dict[str, Any], int]:
        return self.model_dump(mode="json", exclude_none=True), _utf16_size(self.model_dump_json(exclude_none=True))

    @cached_property
    def _finished(self) -> tuple[dict[str, Any], int]:
        return self._dump()

    @cached_property
    def _finished_brief(self) -> tuple[dict[str, Any], int]:
        brief = self.brief()
        return brief, _utf16_size(json.dumps(brief, ensure_ascii=False, separators=(",", ":")))

    def brief(self) -> dict[str, Any]:
        """The step cut to what the history cannot tell: its id, kind, state, turn and error code."""
        brief: dict[str, Any] = {"id": self.id, "kind": self.kind, "state": self.state, "turn": self.turn}
        if self.error is not None:
            brief["error"] = {"code": self.error.code, "message": "", "step_id": self.id}
        return brief


# What a job may ask a person (api/catalog.py describes each; the view's contract reuses this).
QuestionKind = Literal["approval", "error", "clarify", "cost"]


class Waiting(BaseModel):
    """The question a waiting job asks the user."""

    question_id: str
    # None: a question of the job itself (planning out of tries); the published state omits it then.
    step_id: str | None = None
    kind: QuestionKind
    question: str = Field(max_length=1000)
    options: list[str]
    free_text: bool = False
    details: dict[str, Any] = Field(default_factory=dict)
    asked_at: str
    expires_at: str
    # The answer the job takes at expires_at; None: the job fails then (WAIT_EXPIRED).
    expiry_default: str | None = None
    # Set by the orchestrators only. The instance that waits for the answer: None for the job itself, else a
    # part of its run (a parallel branch, a sub-workflow) whose question the job shows and the API answers.
    instance: str | None = None
    # The kind of the step that asks: edits are checked against it (a sub-workflow's steps are not the job's).
    step_kind: str | None = None


class PartNews(BaseModel):
    """What a part of a run tells its root run of a question: asked (the root shows it) or over."""

    model_config = ConfigDict(extra="forbid")

    instance: str = Field(min_length=1, max_length=256)
    question_id: str = Field(min_length=1, max_length=300)
    asked: Waiting | None = None  # the question, while it waits
    ended: Literal["answered", "expired"] | None = None
    # The asking step as the part shows it now (a branch's node is one of the root's steps too).
    step: dict[str, Any] | None = None
    # The root's step the question belongs to when the asking step is not one of the root's (RunReport.anchor).
    anchor: str | None = Field(default=None, max_length=32)


class JobState(BaseModel):
    """The orchestration's custom status."""

    status: JobStatus = "planning"
    step_index: int = -1
    steps: list[StepState] = Field(default_factory=list)
    waiting: Waiting | None = None
    usage: Usage = Field(default_factory=Usage)
    plan_usage: Usage = Field(default_factory=Usage)
    # Hybrid mode: the Supervisor's calls, counted apart from planning.
    supervisor_usage: Usage = Field(default_factory=Usage)
    # Agent mode: the Executor's turns (each a model call), counted apart from the tools it called.
    executor_usage: Usage = Field(default_factory=Usage)
    turns: int = 0
    # How planning ended: "failed" when the job stopped before it had a plan (the view never says "Planning…").
    # Agent mode has no plan: "agent" while the Executor works the job.
    plan_status: Literal["planning", "planned", "failed", "agent"] = "planning"
    error: ErrorInfo | None = None
    questions_asked: int = 0
    replans: int = 0
    # A fork: what its carried-over steps (and an agent's earlier turns) used in the origin; not in ``usage``.
    carried_over: Usage | None = None
    # What the job may cost: its quote after planning (an agent job, a run: before it starts).
    quote: Quote | None = None


def custom_status(state: JobState) -> dict[str, Any]:
    """The state as the orchestration's custom status, kept under Durable's limit of 16 KB of UTF-16 JSON.

    An agent job may make up to 64 tool calls, more steps than that limit holds in full: when the state
    would not fit, its oldest finished tool calls are cut to ``StepState.brief`` (the job view reads their
    title, attempts, times, usage and input from the history) until it does.
    """
    # Sizes are of compact, unescaped JSON, as the host measures it. A replay publishes the state a few times per
    # tool call and a job may have 64 of them, so each finished tool call is serialized once.
    entries = [step.published() for step in state.steps]
    steps = [entry for entry, _ in entries]
    size = _utf16_size(state.model_dump_json(exclude_none=True, exclude={"steps"}))
    size += sum(n for _, n in entries) + 2 * (len(',"steps":[]') + max(0, len(entries) - 1))
    for index, step in enumerate(state.steps):
        if size <= STATUS_BUDGET_BYTES:
            break
        if step.turn is None or step.state not in FINISHED_STEP_STATES or index == state.step_index:
            continue
        brief, brief_size = step.published_brief()
        size -= entries[index][1] - brief_size
        steps[index] = brief
    # Calls of one turn start together: when they still do not fit, the ones waiting behind the current one
    # are shown brief too (the view reads their input from the history, where they are already scheduled).
    for index, step in enumerate(state.steps):
        if size <= STATUS_BUDGET_BYTES:
            break
        if step.turn is None or step.state in FINISHED_STEP_STATES or index == state.step_index:
            continue
        brief = step.brief()
        size -= entries[index][1] - _utf16_size(json.dumps(brief, ensure_ascii=False, separators=(",", ":")))
        steps[index] = brief
    payload = state.model_dump(mode="json", exclude_none=True, exclude={"steps"})
    payload["steps"] = steps
    return payload


def _utf16_size(text: str) -> int:
    return len(text.encode("utf-16-le"))


class JobResult(BaseModel):
    """The orchestration output."""

    status: Literal["completed", "failed"]
    answer: str | None = None
    citations: list[dict[str, Any]] = Field(default_factory=list)
    # Why the answer has no support (no valid citation, or no answer at all): a person must not take it as found.
    unsupported: str | None = None
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None
    # A workflow or team run: its named outputs.
    outputs: dict[str, Any] | None = None


class UserAnswer(BaseModel):
    """Body of ``POST /api/jobs/{id}/feedback``: an option, or an edit with the new step input."""

    model_config = ConfigDict(extra="forbid")

    answer: str | dict[str, Any]
    question_id: str | None = None

    def action(self) -> str:
        """The chosen option (``edit`` for an edit object)."""
        if isinstance(self.answer, str):
            return self.answer.strip()
        return str(self.answer.get("action", "edit"))

    def edits(self) -> dict[str, Any]:
        """The new step input given with an edit (e.g. ``{"sql": "..."}``)."""
        if isinstance(self.answer, dict):
            given = self.answer.get("input")
            if isinstance(given, dict):
                return given
            return {k: v for k, v in self.answer.items() if k != "action"}
        return {}


class PartReport(BaseModel):
    """The ``report_part`` activity's input: a part's news for its root run."""

    model_config = ConfigDict(extra="forbid")

    to: RunReport
    news: PartNews
