"""generate_response: write the final answer from earlier steps' outputs, with citations."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.executors import register
from shared.executors.common import call_llm, usage_of
from shared.jobs.contracts import AnswerResult, ExecutorInput, ExecutorOutput
from shared.providers.interfaces import LLMTask
from shared.runtime.streaming.local import DeltaBuffer, get_store

# An in-process observer of the answer's text deltas (tests, local tools). Not part of the contract:
# a callable cannot travel in an activity payload.
STREAM_OBSERVER: ContextVar[Callable[[str], object] | None] = ContextVar("stream_observer", default=None)

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class Source(BaseModel):
    """One source the answer may cite: a document chunk or a SQL result."""

    model_config = ConfigDict(extra="ignore")

    source_id: str
    kind: Literal["document", "sql"]
    title: str | None = None
    content: str = ""
    sql: str | None = None
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    # Size of the SQL result: its row count, whether the query hit the row cap, how many rows are shown here.
    row_count: int | None = Field(default=None, ge=0)
    truncated: bool = False
    rows_shown: int | None = Field(default=None, ge=0)


class StepNotes(BaseModel):
    """What the orchestrator says about earlier steps that did not run (skipped, rejected by the user)."""

    notes: list[str] = Field(default_factory=list, max_length=12)

    @field_validator("notes")
    @classmethod
    def _bounded(cls, notes: list[str]) -> list[str]:
        return [n[:300] for n in notes]


class ResponseTask(BaseModel):
    """The task of a generate_response step (the sources come from the orchestrator, not the plan)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)


def _partial_output_buffer(inp: ExecutorInput, clients: Clients) -> DeltaBuffer | None:
    """A buffer that streams the answer to the partial output store, when the step is part of a job."""
    ctx = inp.execution_context
    job_id, step_id = ctx.job_id, ctx.step_id
    if not job_id or not step_id:
        return None
    store = get_store(clients.settings)
    if store is None:
        return None
    return DeltaBuffer(
        store,
        job_id,
        step_id,
        ctx.attempt,
        flush_ms=clients.settings.partial_output_flush_ms,
    )


def _fan_out(sinks: list[Callable[[str], object]]) -> Callable[[str], None] | None:
    """One on_delta feeding every sink (None when there is none, so the provider does not stream)."""
    if not sinks:
        return None

    def feed(delta: str) -> None:
        for sink in sinks:
            sink(delta)

    return feed


@register(
    "generate_response",
    description="Write the final answer to the user from the earlier steps' outputs, citing them.",
    uses_llm=True,
    input_model=ResponseTask,
    streams=True,
    writes_answer=True,
)
def generate_response(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Write the answer and keep only citations that point at real sources."""
    task = ResponseTask.model_validate(inp.task)
    sources = [Source.model_validate(s) for s in inp.execution_context.sources]
    step_notes = StepNotes.model_validate({"notes": inp.execution_context.step_notes}).notes
    buffer = _partial_output_buffer(inp, clients)
    sink = STREAM_OBSERVER.get()
    on_delta = _fan_out([f for f in (buffer, sink) if callable(f)])
    try:
        response = call_llm(
            inp,
            clients,
            LLMTask.WRITE_ANSWER,
            {
                "question": task.question,
                "sources": [s.model_dump(mode="json") for s in sources],
                "step_notes": step_notes,
            },
            AnswerResult,
            on_delta=on_delta,
        )
    except BaseException:
        if buffer is not None:
            buffer.finish(succeeded=False)
        raise
    if buffer is not None:
        buffer.finish(succeeded=True)
    known = {s.source_id for s in sources}
    answer = response.output
    cited = [c for c in answer.citations if c.source_id in known]
    dropped = len(answer.citations) - len(cited)
    answer = AnswerResult(answer=answer.answer, citations=cited)
    status: Literal["success", "partial"] = "partial" if dropped and not cited else "success"
    return ExecutorOutput(
        status=status,
        result=answer.model_dump(mode="json") | {"dropped_citations": dropped},
        usage=usage_of(response, clients),
        model_used=response.model_used,
    )
