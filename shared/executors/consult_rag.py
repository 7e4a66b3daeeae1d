"""consult_rag: retrieve document chunks for a query. No hits is a success with no chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from shared.executors import register
from shared.jobs.contracts import ExecutorInput, ExecutorOutput, RagResult

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class RagTask(BaseModel):
    """The task of a consult_rag step: every field may be set by a plan or a user's edit."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000, title="Search query")
    top_k: int | None = Field(default=None, ge=1, le=50, title="Passages to fetch")
    filter: str | None = Field(default=None, max_length=500, title="Search filter")


@register(
    "consult_rag",
    description="Search the policy and FAQ documents; returns cited chunks.",
    uses_llm=False,
    input_model=RagTask,
    text_field="query",
    telemetry_operation="embeddings",
)
def consult_rag(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Search the document index."""
    task = RagTask.model_validate(inp.task)
    top_k = task.top_k or clients.settings.search_top_k
    chunks = clients.retriever.search(task.query, top_k=top_k, filter=task.filter)
    result = RagResult(query=task.query, chunks=chunks)
    return ExecutorOutput(status="success", result=result.model_dump(mode="json"))
