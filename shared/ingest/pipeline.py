"""Document ingestion: read md/txt/pdf files, chunk them, and hand the chunks to a sink.

Library::

    for item in iter_documents(folder):          # IngestedDocument or SkippedFile, in path order
        ...
    for chunk in iter_chunks(folder):            # flattened IngestedChunk stream
        ...
    report = ingest(folder, LocalIndexSink(path), rebuild=False)

CLI::

    python -m shared.ingest <folder> [--index PATH] [--rebuild] [--target local] [--json]

Document ids. ``doc_id`` is the file's path relative to the ingested folder, with ``/`` separators,
Unicode NFC, lower case, and every run of characters other than letters, digits, ``_ . / -``
replaced by one ``-`` (``Policies/Returns & Refunds.md`` -> ``policies/returns-refunds.md``). It
depends only on the relative path, so it is the same on every machine and every run. A chunk's
``source_id`` is ``<doc_id>#<n>`` with ``n`` counting from 1 in document order; it is stable as long
as the file's content and ``CHUNKER_VERSION`` are unchanged. Two files that map to the same doc id
are an error for the second one (reported and skipped).

Tags. A document's tags are the ``tags:`` of its markdown front matter plus its top-level folder
name (``policies/warranty.md`` gets ``policies``). ``shared.providers.search.local`` can filter on them.

Bad files (empty, binary, not UTF-8/UTF-16, unreadable or encrypted PDF, PDF without text, too big)
are reported one by one as ``SkippedFile`` with a reason and skipped; the rest is ingested.

Symbolic links. The folder is a trust boundary: a link whose target lies outside the folder (say
``passwd.txt -> /etc/passwd``) is refused and reported with its reason, never read. A link to a file
inside the folder is read like that file; links to folders are not descended (they could loop, and
their content is ingested under its real path anyway) and are reported. Files are opened without
following a link in the last path component, so a file swapped for a link after discovery is not read. The CLI
exits 1 only when nothing at all could be ingested, 2 on usage errors.

Sinks. ``ingest`` writes through the ``ChunkSink`` protocol; ``LocalIndexSink`` (SQLite FTS5, in
``shared.providers.search.local``) is the default. Another target (e.g. Azure AI Search) is added by writing a
sink and registering a factory with ``register_sink("azure", factory)``: parsing and chunking stay
untouched. The CLI's ``--target NAME`` picks a registered factory; a factory that is not
registered yet is looked up in ``SINK_MODULES`` and imported on demand.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from shared.ingest.models import (
    DocumentError,
    IngestedChunk,
    IngestedDocument,
    IngestError,
    IngestReport,
    SkippedFile,
    SourceFile,
)
from shared.ingest.sources import discover, fingerprint_files, load_document

log = logging.getLogger(__name__)


def _unique(files: Sequence[SourceFile]) -> Iterator[SourceFile | SkippedFile]:
    seen: dict[str, str] = {}
    for source in files:
        if source.doc_id in seen:
            yield SkippedFile(
                path=source.rel_path,
                reason=f"doc id {source.doc_id!r} already used by {seen[source.doc_id]}; rename one",
            )
            continue
        seen[source.doc_id] = source.rel_path
        yield source


def iter_documents(folder: Path) -> Iterator[IngestedDocument | SkippedFile]:
    """Yield every document under ``folder`` parsed and chunked, or a ``SkippedFile`` saying why not."""
    files, _ = discover(folder)
    for item in _unique(files):
        if isinstance(item, SkippedFile):
            yield item
            continue
        try:
            yield load_document(item)
        except DocumentError as exc:
            yield SkippedFile(path=item.rel_path, reason=str(exc))


def iter_chunks(folder: Path, *, on_skip: Callable[[SkippedFile], None] | None = None) -> Iterator[IngestedChunk]:
    """Yield every chunk of every readable document under ``folder``; report skipped files to ``on_skip``."""
    for item in iter_documents(folder):
        if isinstance(item, SkippedFile):
            if on_skip is not None:
                on_skip(item)
            continue
        yield from item.chunks


class ChunkSink(Protocol):
    """Where ``ingest`` puts documents. Calls: ``start``, then ``keep``/``write`` per document, then
    ``finish`` (or ``abort`` on failure). Documents neither kept nor written are removed by ``finish``.
    """

    name: str

    def start(self, *, rebuild: bool) -> None:
        """Prepare the target; with ``rebuild`` nothing already stored may be reused."""
        ...

    def existing(self) -> dict[str, str]:
        """Doc ids already stored and reusable as-is, mapped to their content hash."""
        ...

    def keep(self, doc_id: str) -> int:
        """Keep a stored, unchanged document; return its number of chunks."""
        ...

    def write(self, document: IngestedDocument) -> None:
        """Store a document and its chunks, replacing any older version."""
        ...

    def finish(self, *, fingerprint: str) -> None:
        """Commit the run and record the folder fingerprint."""
        ...

    def abort(self) -> None:
        """Discard everything written in this run."""
        ...


def ingest(
    folder: Path,
    sink: ChunkSink,
    *,
    rebuild: bool = False,
    on_skip: Callable[[SkippedFile], None] | None = None,
    keep_target_if_empty: bool = False,
) -> IngestReport:
    """Ingest a folder into a sink. Unchanged documents are reused unless ``rebuild`` is set.

    With ``keep_target_if_empty``, a run that ingests nothing aborts instead of emptying the target.
    """
    files, ignored = discover(folder)
    report = IngestReport(folder=str(folder), target=sink.name, ignored=ignored, fingerprint=fingerprint_files(files))
    try:
        sink.start(rebuild=rebuild)
        stored = {} if rebuild else sink.existing()
        for item in _unique(files):
            if isinstance(item, SkippedFile):
                report.skipped.append(item)
                if on_skip:
                    on_skip(item)
                continue
            if stored.get(item.doc_id) == item.sha256:
                report.chunks += sink.keep(item.doc_id)
                report.reused += 1
                continue
            try:
                document = load_document(item)
            except DocumentError as exc:
                skipped = SkippedFile(path=item.rel_path, reason=str(exc))
                report.skipped.append(skipped)
                if on_skip:
                    on_skip(skipped)
                continue
            sink.write(document)
            report.documents += 1
            report.chunks += len(document.chunks)
        if keep_target_if_empty and not report.ok:
            sink.abort()
        else:
            sink.finish(fingerprint=report.fingerprint)
    except BaseException:
        sink.abort()
        raise
    return report


# --- sinks registry and CLI ----------------------------------------------------------------------

SinkFactory = Callable[[argparse.Namespace], ChunkSink]
_SINK_FACTORIES: dict[str, SinkFactory] = {}
# Targets whose factory lives in another module, imported only when asked for. That module must
# call ``register_sink(name, factory)`` at import time.
# Ingestion sits below the search providers: it names their modules here and never imports them.
SINK_MODULES: dict[str, str] = {"local": "shared.providers.search.local", "azure": "shared.providers.search.azure_sink"}


def register_sink(name: str, factory: SinkFactory) -> None:
    """Make ``--target name`` available; the factory gets the parsed CLI arguments."""
    _SINK_FACTORIES[name] = factory


def sink_for(name: str, args: argparse.Namespace) -> ChunkSink:
    """Build the sink registered for ``name`` (importing its module on demand)."""
    if name not in _SINK_FACTORIES and name in SINK_MODULES:
        try:
            importlib.import_module(SINK_MODULES[name])
        except ModuleNotFoundError as exc:
            raise IngestError(f"target {name!r} is not available: module {SINK_MODULES[name]} not found") from exc
    if name not in _SINK_FACTORIES and name in SINK_MODULES:
        raise IngestError(f"target {name!r} is not available: {SINK_MODULES[name]} registers no sink for it")
    if name not in _SINK_FACTORIES:
        raise IngestError(f"unknown target {name!r}; known: {', '.join(sorted({*_SINK_FACTORIES, *SINK_MODULES}))}")
    return _SINK_FACTORIES[name](args)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m shared.ingest`` argument parser."""
    from shared.runtime.settings import get_settings

    parser = argparse.ArgumentParser(
        prog="python -m shared.ingest", description="Ingest md/txt/pdf documents into a search index."
    )
    parser.add_argument("folder", type=Path, help="folder with the documents (searched recursively)")
    parser.add_argument(
        "--index", type=Path, default=get_settings().local_index_path, help="local index file (target local)"
    )
    parser.add_argument("--rebuild", action="store_true", help="re-parse every document instead of reusing")
    parser.add_argument(
        "--target", default="local", help=f"where to write: local (default) or {', '.join(sorted(SINK_MODULES))}"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)

    def report_skip(item: SkippedFile) -> None:
        print(f"skipped {item.path}: {item.reason}", file=sys.stderr)

    try:
        sink = sink_for(args.target, args)
        report = ingest(args.folder, sink, rebuild=args.rebuild, on_skip=report_skip, keep_target_if_empty=True)
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.model_dump(), indent=2))
    else:
        where = args.index if args.target == "local" else args.target
        print(
            f"ingested {report.documents} new or changed and {report.reused} unchanged documents "
            f"({report.chunks} chunks) into {where}; skipped {len(report.skipped)}, "
            f"ignored {len(report.ignored)} unsupported files"
        )
        for name in report.ignored:
            print(f"ignored {name}: unsupported file type", file=sys.stderr)
    if not report.ok:
        print("error: nothing could be ingested; the target was left unchanged", file=sys.stderr)
        return 1
    return 0
