"""``python -m shared.ingest <folder> --target azure``: the Azure AI Search sink for ingestion.

``shared.ingest.pipeline`` imports this module on demand (``SINK_MODULES``); importing it registers the
``azure`` target. The sink creates or updates the index, reuses documents whose content hash is
unchanged, uploads new and changed chunks in batches (with vectors when an embedding deployment is
configured) and, at the end, deletes chunks that no longer exist (removed files, shorter documents).

Azure AI Search has no transactions: when a run fails, batches already uploaded stay in the index.
They are upserts of the new content, so running the command again converges.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from typing import TYPE_CHECKING

from shared.ingest.models import IngestError
from shared.ingest.pipeline import register_sink
from shared.jobs.contracts import ProviderError
from shared.providers.search.azure_index import AzureSearchSink, build_azure_sink, document_key

if TYPE_CHECKING:
    from shared.ingest.models import IngestedChunk, IngestedDocument

logger = logging.getLogger(__name__)


class AzureIngestSink:
    """``shared.ingest.pipeline.ChunkSink`` over an Azure AI Search index."""

    name = "azure"

    def __init__(self, sink: AzureSearchSink, *, batch_size: int = 500) -> None:
        self._sink = sink
        self._batch_size = batch_size
        self._stored: dict[str, tuple[str, str | None]] = {}
        self._kept: set[str] = set()
        self._written: set[str] = set()
        self._buffer: list[IngestedChunk] = []
        self.uploaded = 0
        self.deleted = 0

    def _fail(self, what: str, exc: ProviderError) -> IngestError:
        return IngestError(f"Azure AI Search {what} failed [{exc.code.value}]: {exc.message}")

    def start(self, *, rebuild: bool) -> None:
        """Create (or, with ``rebuild``, recreate) the index and read what it already holds."""
        try:
            if rebuild and self._sink.delete_index():
                logger.info("Azure AI Search: deleted the index to rebuild it")
            self._sink.create_or_update_index()
            self._stored = {} if rebuild else self._sink.stored_documents()
        except ProviderError as exc:
            raise self._fail("index set-up", exc) from exc

    def existing(self) -> dict[str, str]:
        """Doc ids whose chunks all carry the same content hash (reusable as they are)."""
        hashes: dict[str, set[str | None]] = {}
        for doc_id, sha in self._stored.values():
            hashes.setdefault(doc_id, set()).add(sha)
        reusable: dict[str, str] = {}
        for doc_id, shas in hashes.items():
            [only] = shas if len(shas) == 1 else [None]
            if only is not None:
                reusable[doc_id] = only
        return reusable

    def keep(self, doc_id: str) -> int:
        """Keep a stored, unchanged document; return its number of chunks."""
        self._kept.add(doc_id)
        return Counter(d for d, _ in self._stored.values())[doc_id]

    def write(self, document: IngestedDocument) -> None:
        """Queue a document's chunks; full batches are uploaded at once."""
        for chunk in document.chunks:
            self._buffer.append(chunk)
            self._written.add(document_key(chunk.source_id))
        if len(self._buffer) >= self._batch_size:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        try:
            report = self._sink.upload(batch)
        except ProviderError as exc:
            raise self._fail("upload", exc) from exc
        self.uploaded += report.uploaded
        if report.failed:
            raise IngestError(f"Azure AI Search rejected {len(report.failed)} chunk(s), first: {report.failed[0]}")

    def finish(self, *, fingerprint: str) -> None:
        """Upload what is queued, then delete chunks that are neither kept nor rewritten."""
        self._flush()
        stale = [
            key for key, (doc_id, _) in self._stored.items() if doc_id not in self._kept and key not in self._written
        ]
        try:
            self.deleted = self._sink.delete(stale) if stale else 0
        except ProviderError as exc:
            raise self._fail("clean-up", exc) from exc
        logger.info(
            "Azure AI Search: uploaded %d chunk(s), deleted %d stale chunk(s), folder fingerprint %s",
            self.uploaded,
            self.deleted,
            fingerprint[:12],
        )

    def abort(self) -> None:
        """Drop what is queued; batches already uploaded stay (see the module docstring)."""
        self._buffer = []
        if self.uploaded:
            logger.warning("Azure AI Search: run aborted after %d chunk(s) were uploaded", self.uploaded)


def azure_sink_factory(args: argparse.Namespace) -> AzureIngestSink:
    """Build the sink from settings (``AZURE_SEARCH_*``, and the embedding deployment when set)."""
    from shared.runtime.settings import get_settings

    try:
        return AzureIngestSink(build_azure_sink(get_settings()))
    except ProviderError as exc:
        raise IngestError(f"target azure: {exc.message}") from exc


register_sink("azure", azure_sink_factory)
