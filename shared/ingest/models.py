"""What ingestion reads and produces: supported files, found files, documents, chunks, skips, the report."""

from __future__ import annotations

import base64
from pathlib import Path

from pydantic import BaseModel, Field

from shared.ingest.text import bound_snippet
from shared.jobs.contracts import Chunk

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text"})
PDF_SUFFIXES = frozenset({".pdf"})
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | TEXT_SUFFIXES | PDF_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024


class IngestError(Exception):
    """The ingestion run cannot start (e.g. the folder does not exist)."""


class DocumentError(Exception):
    """One file cannot be ingested; the message says why in plain words."""


class SourceFile(BaseModel):
    """A candidate file found under the ingested folder."""

    doc_id: str
    rel_path: str
    abs_path: Path
    size: int
    sha256: str
    real_path: Path | None = None
    """The file to read when ``abs_path`` is a link to a file inside the folder."""
    refused: str | None = None
    """Why this entry must not be read (e.g. a link out of the folder); ingest reports it as skipped."""


class IngestedChunk(BaseModel):
    """One chunk ready for an index, with its stable ``source_id`` (``<doc_id>#<n>``)."""

    source_id: str
    doc_id: str
    chunk_no: int = Field(ge=1)
    title: str
    heading: str = ""
    content: str
    path: str
    tags: list[str] = Field(default_factory=list)
    page: int | None = None
    doc_sha256: str

    @property
    def display_title(self) -> str:
        """Document title plus the section heading, as shown in citations."""
        return f"{self.title} — {self.heading}" if self.heading and self.heading != self.title else self.title

    @property
    def search_key(self) -> str:
        """The source id as an Azure AI Search key (URL-safe base64: keys allow only ``[A-Za-z0-9_=-]``)."""
        return base64.urlsafe_b64encode(self.source_id.encode("utf-8")).decode("ascii")

    def to_chunk(self, score: float = 0.0) -> Chunk:
        """The retrieval contract's ``Chunk`` for this chunk."""
        return Chunk(
            source_id=self.source_id,
            title=self.display_title,
            content=bound_snippet(self.content),
            score=score,
            path=self.path,
        )


class IngestedDocument(BaseModel):
    """A parsed document and its chunks."""

    doc_id: str
    path: str
    title: str
    sha256: str
    tags: list[str] = Field(default_factory=list)
    chunks: list[IngestedChunk] = Field(default_factory=list)


class SkippedFile(BaseModel):
    """A file that was not ingested, and why."""

    path: str
    reason: str


class IngestReport(BaseModel):
    """What an ingestion run did."""

    folder: str
    target: str
    documents: int = 0
    reused: int = 0
    chunks: int = 0
    skipped: list[SkippedFile] = Field(default_factory=list)
    ignored: list[str] = Field(default_factory=list)
    fingerprint: str = ""

    @property
    def ok(self) -> bool:
        """At least one document is in the target."""
        return self.documents + self.reused > 0
