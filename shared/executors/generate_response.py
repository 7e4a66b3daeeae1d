"""generate_response: write the final answer from earlier steps' outputs, with citations."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.executors import register
from shared.executors.common import call_llm, usage_of
from shared.executors.streaming import STREAM_OBSERVER as STREAM_OBSERVER
from shared.executors.streaming import Chunks, StreamingRun, TextChunk
from shared.jobs.claims import ClaimSource, check_claims, summarize
from shared.jobs.contracts import AnswerResult, ExecutorInput, ExecutorOutput
from shared.providers.interfaces import LLMTask
from shared.runtime.output_schema import check_output_schema

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
    # The verified query the SQL step used (shared/providers/sql/verified.py), if any.
    verified_query: dict[str, Any] | None = None

    def titled(self) -> Source:
        """The source as the writer sees it: a verified query is named in its title, so the answer says so."""
        vq = self.verified_query
        if not vq:
            return self
        who = f", approved by {vq['approved_by']}" if vq.get("approved_by") else ""
        when = f" on {str(vq['approved_at'])[:10]}" if vq.get("approved_at") else ""
        note = f"verified query '{vq.get('name')}'{who}{when}"
        return self.model_copy(update={"title": f"{self.title} ({note})" if self.title else note})


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

    question: str = Field(min_length=1, max_length=4000, title="Step question")


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
    return _Answer(inp, clients).run()


class _Answer(StreamingRun):
    """The answer as a streaming executor: it yields the model's prose, the base does the rest."""

    def chunks(self) -> Chunks:
        """Stream the answer, then keep only the citations that point at real sources."""
        inp, clients = self.inp, self.clients
        task = ResponseTask.model_validate(inp.task)
        sources = [Source.model_validate(s).titled() for s in inp.execution_context.sources]
        step_notes = StepNotes.model_validate({"notes": inp.execution_context.step_notes}).notes
        inputs: dict[str, object] = {
            "question": task.question,
            "sources": [s.model_dump(mode="json", exclude={"verified_query"}) for s in sources],
            "step_notes": step_notes,
        }
        schema = inp.execution_context.output_schema
        if schema is not None:
            # Bounded before any call, whatever the provider: it goes into the prompt and the request.
            inputs["output_schema"] = check_output_schema(schema)
        elif not sources:
            # Nothing was found, and every statement must come from a source: the answer is "not found", said
            # plainly without a model call (a small model given no source tends to invent or to copy the prompt).
            text = not_found_answer(step_notes)
            yield TextChunk(text)
            nothing = {"claims_summary": summarize([]).model_dump(mode="json")}  # it states no fact to check
            return ExecutorOutput(
                status="success", result={"answer": text, "citations": [], "dropped_citations": 0} | nothing
            )
        response = yield from self.model(
            lambda on_delta: call_llm(
                inp, clients, LLMTask.WRITE_ANSWER, inputs, AnswerResult, on_delta=on_delta, output_schema=schema
            )
        )
        known = {s.source_id for s in sources}
        answer = response.output
        cited = [c for c in answer.citations if c.source_id in known]
        dropped = len(answer.citations) - len(cited)
        # Every claim is checked against the sources it cites, by code, never a model: a failing one is marked.
        claims = check_claims(
            answer.claims, [ClaimSource.model_validate(s.model_dump()) for s in sources], _formats(clients)
        )
        answer = AnswerResult(answer=answer.answer, citations=cited)
        unsupported: str | None = None
        if is_placeholder(answer.answer):
            # A small model may copy the reply shape's placeholder; it is no answer and never reaches a person.
            unsupported = f"the model wrote the prompt's placeholder {answer.answer.strip()[:80]!r}, not an answer"
            answer = AnswerResult(answer=f"No answer could be written: {unsupported}.", citations=[])
            claims = []
        elif dropped and not cited:
            unsupported = f"none of its {dropped} citations points at a source the job found"
        status: Literal["success", "partial"] = "partial" if unsupported else "success"
        extra: dict[str, Any] = {"dropped_citations": dropped}
        if unsupported:
            extra["unsupported"] = unsupported
        if claims:
            extra["claims"] = [c.model_dump(mode="json", exclude_defaults=False) for c in claims]
        # Always a summary: an answer whose writer gave no claims says that nothing in it is checked.
        extra["claims_summary"] = summarize(claims).model_dump(mode="json")
        return ExecutorOutput(
            status=status,
            result=answer.model_dump(mode="json", exclude={"claims"}) | extra,
            usage=usage_of(response, clients),
            model_used=response.model_used,
        )


def _formats(clients: Clients) -> dict[str, str]:
    """The catalog's formats by metric name (a ratio is written as a percentage); none when there is no catalog."""
    try:
        return {m.name: m.format for m in clients.catalog.metrics}
    except Exception:  # no SQL catalog configured: figures are compared as plain numbers
        return {}


def not_found_answer(step_notes: list[str]) -> str:
    """The answer when no lookup returned a source: not found, with what did not run and why."""
    text = "I could not find anything to answer this: no lookup returned a source."
    return " ".join([text, *step_notes])[:4000]


# The whole answer is one angle-bracketed phrase, as the prompts' reply shapes write them ("<the answer>").
_PLACEHOLDER_RE = re.compile(r"\s*<[^<>\n]{1,80}>\s*")


def is_placeholder(text: str) -> bool:
    """Whether an answer is only a template placeholder (``<the answer>``) copied from the prompt."""
    return _PLACEHOLDER_RE.fullmatch(text) is not None
