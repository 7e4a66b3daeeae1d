"""The executor contract: one input and one output shape for every step of a job.

Executors are stateless. They never retry on their own and never leak raw exceptions: every
outcome, expected or not, comes back as an ``ExecutorOutput``. The orchestrator owns the policy
(retry, fall back to another model, ask the user, or fail) and decides it from ``error.code``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.jobs.claims import Claim


class ErrorCode(StrEnum):
    """Stable error codes of the contract. Only the codes in ``RETRYABLE_CODES`` are worth a retry."""

    RATE_LIMITED = "RATE_LIMITED"
    MODEL_TIMEOUT = "MODEL_TIMEOUT"
    TRANSIENT = "TRANSIENT"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"
    CONTENT_FILTERED = "CONTENT_FILTERED"
    AUTH_FAILED = "AUTH_FAILED"
    BAD_REQUEST = "BAD_REQUEST"
    INVALID_INPUT = "INVALID_INPUT"
    MODEL_NOT_ALLOWED = "MODEL_NOT_ALLOWED"
    SQL_REJECTED = "SQL_REJECTED"
    SQL_ERROR = "SQL_ERROR"
    SQL_TIMEOUT = "SQL_TIMEOUT"
    SEARCH_ERROR = "SEARCH_ERROR"
    CONFIG_ERROR = "CONFIG_ERROR"
    UNKNOWN_EXECUTOR = "UNKNOWN_EXECUTOR"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    # A tool answered with an error of its own (a bad lookup, a refused operation): final for that call.
    TOOL_ERROR = "TOOL_ERROR"
    # An agent's output schema that cannot go to the model: too large for the prompt, or refused by the provider.
    OUTPUT_SCHEMA_REFUSED = "OUTPUT_SCHEMA_REFUSED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


# Throttling, timeouts and transient faults deserve a retry; everything else is final for that input.
RETRYABLE_CODES: frozenset[ErrorCode] = frozenset(
    {ErrorCode.RATE_LIMITED, ErrorCode.MODEL_TIMEOUT, ErrorCode.TRANSIENT, ErrorCode.UPSTREAM_ERROR}
)


class Constraints(BaseModel):
    """Per-step limits. The job's constraints are copied into every step."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=1024, ge=1, le=128_000)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    allowed_models: list[str] = Field(default_factory=list, max_length=8)
    timeout_ms: int = Field(default=60_000, ge=100, le=600_000)


class ExecutorInput(BaseModel):
    """What the orchestrator hands an executor for one step."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=200)
    executor_type: str = Field(min_length=1, max_length=64)
    task: dict[str, Any] = Field(default_factory=dict)
    execution_context: ExecutionContext = Field(default_factory=lambda: ExecutionContext())
    constraints: Constraints = Field(default_factory=Constraints)


class PreviousError(BaseModel):
    """The error of an earlier attempt, as the model is shown it."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=64)
    message: str = Field(max_length=2000)


class PreviousAttempt(BaseModel):
    """A failed earlier attempt of this step, fed back so a retry does not repeat it (e.g. the rejected SQL)."""

    model_config = ConfigDict(extra="forbid")

    sql: str | None = Field(default=None, max_length=20_000)
    error: PreviousError


class JobOwnerRef(BaseModel):
    """The job's owner as a step sees it (the Easy Auth principal's id and app roles): whose verified queries
    the step may reuse. Copied by the orchestrator from the job's input, which the API set; never from a task."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    roles: list[str] = Field(default_factory=list, max_length=64)


class ExecutionContext(BaseModel):
    """Everything an executor gets besides its task; written by the orchestrator alone.

    Unknown keys are an error: a field that decides what a step may do cannot arrive by accident. The
    SQL access fields (``sql_mode``, ``approved_sql``) are read through ``SqlAccess.of``.
    """

    model_config = ConfigDict(extra="forbid")

    job_id: str | None = Field(default=None, max_length=200)
    step_id: str | None = Field(default=None, max_length=64)
    attempt: int = Field(default=1, ge=1)
    # One call of a step, the same for all its attempts: "<step id>:<attempt it started on>". With the job id
    # it is the idempotency key tools send (a retry or a re-run after a crash repeats it; a new call does not).
    call_id: str | None = Field(default=None, max_length=100)
    model: str | None = Field(default=None, max_length=200)
    trace: dict[str, str] = Field(default_factory=dict)
    budget_tokens_left: int | None = None
    budget_cost_left: float | None = None
    sql_mode: Literal["draft", "run"] = "run"
    approved_sql: str | None = Field(default=None, max_length=20_000)
    sql_database: str | None = Field(default=None, max_length=64)
    sources: list[dict[str, Any]] = Field(default_factory=list, max_length=200)
    step_notes: list[str] = Field(default_factory=list, max_length=12)
    previous_attempt: PreviousAttempt | None = None
    # Agent mode: the tools of the families this job may call (from the job request, set by the orchestrator).
    allowed_tools: list[str] = Field(default_factory=list, max_length=32)
    # run_python: the named inputs the orchestrator resolved from earlier steps' outputs (never from the model),
    # "draft" (run, but keep no files: the approval policy looks at what it would write), and what is left of
    # the job's sandbox time budget.
    python_inputs: dict[str, Any] = Field(default_factory=dict, max_length=8)
    python_mode: Literal["draft", "run"] = "run"
    sandbox_seconds_left: float | None = None
    # A workflow agent's output schema (from the pinned agent definition): the answer writer is asked for an
    # object of this shape. Never in the task, which a plan or an edit may set.
    output_schema: dict[str, Any] | None = None
    # The job's owner (None without Easy Auth, or for a job started before it): what its SQL steps may reuse.
    owner: JobOwnerRef | None = None


class SqlAccess(BaseModel):
    """How an execute_azure_sql call may touch the data; set only by the orchestrator, in the execution context.

    ``sql_mode`` "draft" guards the statement and stops before it runs (sensitive tables may be named, as
    nothing is read). In "run" mode a statement reading a table the catalog marks sensitive runs only when
    ``approved_sql`` is exactly the guarded statement about to run: the one a human approved.
    """

    model_config = ConfigDict(extra="forbid")

    sql_mode: Literal["draft", "run"] = "run"
    approved_sql: str | None = Field(default=None, max_length=20_000)
    # The database the draft was made on (a human approves a statement on one database, and it runs there).
    sql_database: str | None = Field(default=None, max_length=64)

    @classmethod
    def of(cls, execution_context: ExecutionContext) -> SqlAccess:
        """Read the access fields from an execution context."""
        return cls(
            sql_mode=execution_context.sql_mode,
            approved_sql=execution_context.approved_sql,
            sql_database=execution_context.sql_database,
        )


class Usage(BaseModel):
    """Tokens and estimated cost of one step (or of a whole job when summed)."""

    tokens_input: int = Field(default=0, ge=0)
    tokens_output: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    estimated_cost: float = Field(default=0.0, ge=0.0)
    # True when some of the tokens were estimated because the server reported no usage (llama.cpp streams).
    estimated: bool = False

    @model_validator(mode="after")
    def _fill_total(self) -> Usage:
        if self.total_tokens == 0:
            self.total_tokens = self.tokens_input + self.tokens_output
        return self

    def __add__(self, other: Usage) -> Usage:
        """Sum two usages."""
        return Usage(
            tokens_input=self.tokens_input + other.tokens_input,
            tokens_output=self.tokens_output + other.tokens_output,
            total_tokens=self.total_tokens + other.total_tokens,
            estimated_cost=round(self.estimated_cost + other.estimated_cost, 8),
            estimated=self.estimated or other.estimated,
        )


class ExecutorError(BaseModel):
    """Why a step failed, in a form the orchestrator can act on."""

    code: ErrorCode
    message: str = Field(max_length=2000)
    retry_after_ms: int | None = Field(default=None, ge=0)
    # Set for a call that must not be repeated (a tool declared non-retryable): no retry whatever the code.
    final: bool = False

    @property
    def retryable(self) -> bool:
        """Whether the orchestrator may retry this failure."""
        return self.code in RETRYABLE_CODES and not self.final


class ExecutorOutput(BaseModel):
    """What every executor returns."""

    status: Literal["success", "failed", "partial"]
    result: dict[str, Any] | None = None
    usage: Usage = Field(default_factory=Usage)
    model_used: str | None = None
    error: ExecutorError | None = None

    @model_validator(mode="after")
    def _error_iff_failed(self) -> ExecutorOutput:
        if self.status == "failed" and self.error is None:
            raise ValueError("a failed output needs an error")
        return self

    @classmethod
    def failure(
        cls,
        code: ErrorCode,
        message: str,
        *,
        retry_after_ms: int | None = None,
        model_used: str | None = None,
        usage: Usage | None = None,
        result: dict[str, Any] | None = None,
        final: bool = False,
    ) -> ExecutorOutput:
        """Build a failed output (usage spent before the failure still counts)."""
        return cls(
            status="failed",
            error=ExecutorError(code=code, message=message[:2000], retry_after_ms=retry_after_ms, final=final),
            model_used=model_used,
            usage=usage or Usage(),
            result=result,
        )


class ProviderError(Exception):
    """A classified fault from a provider (LLM, search, SQL). Executors turn it into a failed output."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retry_after_ms: int | None = None,
        usage: Usage | None = None,
        model_used: str | None = None,
        output: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms
        # Tokens spent before the failure (a cut or invalid output was still generated and billed).
        self.usage = usage
        self.model_used = model_used
        # The model's output that failed validation (bounded), so a repair turn can show it back.
        self.output = output[:8000] if output else None


# Typed results carried in ExecutorOutput.result. Keep them small: they are stored in Durable history.


class Chunk(BaseModel):
    """A retrieved passage with a stable source id (``<doc-id>#<chunk-no>``)."""

    source_id: str
    title: str
    content: str
    score: float = 0.0
    path: str | None = None


class RagResult(BaseModel):
    """Result of consult_rag. No hits is a success with an empty list."""

    query: str
    chunks: list[Chunk] = Field(default_factory=list)


class SqlResult(BaseModel):
    """Result of execute_azure_sql: the SQL that actually ran and what it returned."""

    question: str | None = None
    sql: str
    dialect: str
    tables: list[str] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    source_id: str | None = None


class Citation(BaseModel):
    """A source the answer relies on: a document chunk or a SQL query with its rows."""

    source_id: str
    kind: Literal["document", "sql"]
    title: str | None = None
    quote: str | None = None


class AnswerResult(BaseModel):
    """Result of generate_response."""

    answer: str
    citations: list[Citation] = Field(default_factory=list)
    # Each statement with the cells or passage span it rests on; the answer step checks them (shared/jobs/claims.py).
    claims: list[Claim] = Field(default_factory=list)
