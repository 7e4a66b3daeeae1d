"""Provider interfaces: the LLM, the document retriever and the SQL database.

Executors depend on these protocols only; ``shared.providers.clients`` builds the configured implementation.
Implementations raise ``shared.jobs.contracts.ProviderError`` for classified faults and never let raw
SDK exceptions out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from shared.jobs.contracts import Chunk

T = TypeVar("T", bound=BaseModel)


class LLMTask(StrEnum):
    """The LLM calls the app makes; each has a versioned prompt file in ``prompts/``."""

    PLAN = "plan"
    WRITE_SQL = "write_sql"
    WRITE_ANSWER = "write_answer"
    SUPERVISE = "supervise"
    AGENT_TURN = "agent_turn"
    DECIDE = "decide"


@dataclass
class LLMRequest(Generic[T]):
    """One structured-output LLM call."""

    task: LLMTask
    inputs: dict[str, Any]
    output_type: type[T]
    model: str | None = None
    max_tokens: int = 1024
    temperature: float = 0.0
    timeout_s: float = 60.0
    # An agent's output schema: the output type's text field must hold an object of this JSON schema (its JSON
    # text); providers ask for the object itself and check it (shared/providers/llm/shaped.py).
    output_schema: dict[str, Any] | None = None
    # Called with each streamed text delta when the provider streams; None disables streaming.
    on_delta: Callable[[str], None] | None = field(default=None, repr=False)


@dataclass
class LLMResponse(Generic[T]):
    """The validated output of an LLM call, with usage taken from the response."""

    output: T
    tokens_input: int
    tokens_output: int
    model_used: str
    # True when the server reported no usage and the tokens were estimated from the text.
    usage_estimated: bool = False


class LLMProvider(Protocol):
    """Anything that can answer an ``LLMRequest`` with a validated ``LLMResponse``."""

    name: str
    default_model: str

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """Run one structured-output call."""
        ...


class Retriever(Protocol):
    """A document index: local SQLite FTS5 or Azure AI Search."""

    def search(self, query: str, *, top_k: int, filter: str | None = None) -> list[Chunk]:
        """Return the best chunks for a query (empty list when nothing matches)."""
        ...


@dataclass
class QueryRows:
    """Rows a query returned, capped by the caller's row limit."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False


class SqlDatabase(Protocol):
    """A read-only SQL database: a member of the database family (``shared/providers/sql/family.py``)."""

    @property
    def dialect(self) -> str:
        """The sqlglot dialect its SQL is written in (``sqlite``, ``tsql``, ``postgres``)."""
        ...

    def execute(self, sql: str, *, max_rows: int, timeout_s: int, sensitive: bool = False) -> QueryRows:
        """Run one guarded, read-only query: at most ``max_rows`` rows (``truncated`` says more were left).

        ``sensitive=True`` only for a statement a human approved: the SQLite sample attaches its
        sensitive tables' file only then, PostgreSQL connects as its sensitive reader only then; on
        Azure SQL it changes nothing (the app's database user is denied those tables).
        """
        ...
