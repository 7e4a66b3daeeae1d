"""generate_response: write the final answer from earlier steps' outputs, with citations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.contracts import AnswerResult, ExecutorInput, ExecutorOutput
from shared.executors import register
from shared.executors.common import call_llm, usage_of
from shared.providers import LLMTask

if TYPE_CHECKING:
    from shared.clients import Clients


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


class ResponseTask(BaseModel):
    """The task of a generate_response step."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, max_length=4000)


@register(
    "generate_response",
    description="Write the final answer to the user from the earlier steps' outputs, citing them.",
    uses_llm=True,
)
def generate_response(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Write the answer and keep only citations that point at real sources."""
    task = ResponseTask.model_validate(inp.task)
    sources = [Source.model_validate(s) for s in inp.execution_context.get("sources", [])]
    stream = inp.execution_context.get("stream_sink")
    response = call_llm(
        inp,
        clients,
        LLMTask.WRITE_ANSWER,
        {"question": task.question, "sources": [s.model_dump(mode="json") for s in sources]},
        AnswerResult,
        on_delta=stream if callable(stream) else None,
    )
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
