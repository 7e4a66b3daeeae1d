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
import base64
import hashlib
import importlib
import io
import json
import logging
import os
import re
import stat as stat_mod
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from shared.ingest.chunking import (
    CHUNKER_VERSION,
    DEFAULT_MAX_CHARS,
    DEFAULT_OVERLAP_CHARS,
    ParsedText,
    chunk_sections,
    parse_markdown,
    parse_plain,
)
from shared.ingest.text import bound_snippet
from shared.jobs.contracts import Chunk

log = logging.getLogger(__name__)

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text"})
PDF_SUFFIXES = frozenset({".pdf"})
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | TEXT_SUFFIXES | PDF_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024

_DOC_ID_JUNK = re.compile(r"[^\w./-]+")


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


def doc_id_for(rel_path: str) -> str:
    """The stable document id for a relative path (rule in the module docstring)."""
    normalized = unicodedata.normalize("NFC", rel_path.replace("\\", "/")).lower()
    parts = [_DOC_ID_JUNK.sub("-", part).strip("-") or "-" for part in normalized.split("/") if part]
    return "/".join(parts)


def _is_hidden(rel: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in rel.parts)


HashCache = dict[str, tuple[int, int, str]]  # rel path -> (size, mtime_ns, sha256)


def _walk(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every entry under ``root`` that is a file or a link, as (path, is_link), without following links.

    ``os.walk`` with ``followlinks=False`` never descends into a linked folder, so a link loop
    cannot make this hang; linked folders are yielded as links so ingest can report them.
    """
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in dirnames:
            if (base / name).is_symlink():
                yield base / name, True
        for name in filenames:
            path = base / name
            yield path, path.is_symlink()


def _link_refusal(link: Path, root: Path) -> tuple[Path | None, str | None]:
    """The real file behind a link inside ``root``, or the reason the link is refused."""
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop on older Pythons
        return (
            None,
            f"symbolic link cannot be resolved ({getattr(exc, 'strerror', None) or 'a link loop'}); not followed",
        )
    if not target.is_relative_to(root):
        return None, "symbolic link to a path outside the documents folder; refused, not read"
    if _is_hidden(target.relative_to(root)):
        return None, "symbolic link to a hidden file; not read (hidden files are never ingested)"
    if target.is_dir():
        return None, "symbolic link to a folder; not followed (its content is ingested under its real path)"
    if not target.is_file():
        return None, "symbolic link to something that is not a regular file; not read"
    return target, None


def discover(folder: Path, *, hash_cache: HashCache | None = None) -> tuple[list[SourceFile], list[str]]:
    """Find candidate files (sorted by relative path) and the relative paths of unsupported ones.

    Links out of the folder are listed with ``refused`` set (see the module docstring). With
    ``hash_cache``, a file whose size and mtime are unchanged since the last call is not re-hashed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise IngestError(f"documents folder not found: {folder}")
    root = folder.resolve()
    found: list[SourceFile] = []
    ignored: list[str] = []
    for path, is_link in sorted(_walk(folder), key=lambda item: item[0].relative_to(folder).as_posix()):
        rel = path.relative_to(folder)
        if _is_hidden(rel):
            continue
        rel_path = rel.as_posix()
        real_path: Path | None = None
        if is_link:
            real_path, refusal = _link_refusal(path, root)
            if refusal is not None:
                # Listed (not silently dropped) so the run reports it; the digest names the reason so
                # the fingerprint changes when the link is fixed.
                found.append(
                    SourceFile(
                        doc_id=doc_id_for(rel_path),
                        rel_path=rel_path,
                        abs_path=path,
                        size=-1,
                        sha256=f"refused:{refusal}",
                        refused=refusal,
                    )
                )
                continue
        elif not path.is_file():
            continue  # sockets, FIFOs, devices: reading them could block or make no sense
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            ignored.append(rel_path)
            continue
        try:
            stat = (real_path or path).stat()
            size = stat.st_size
            cached = hash_cache.get(rel_path) if hash_cache is not None else None
            if cached is not None and cached[:2] == (size, stat.st_mtime_ns):
                digest = cached[2]
            else:
                digest = _sha256_file(real_path or path) if size <= MAX_FILE_BYTES else f"size:{size}"
                if hash_cache is not None:
                    hash_cache[rel_path] = (size, stat.st_mtime_ns, digest)
        except OSError as exc:
            # Still listed, so the fingerprint changes when it becomes readable and ingest reports it.
            size, digest = -1, f"unreadable:{exc.strerror or exc.errno}"
        found.append(
            SourceFile(
                doc_id=doc_id_for(rel_path),
                rel_path=rel_path,
                abs_path=path,
                size=size,
                sha256=digest,
                real_path=real_path,
            )
        )
    return found, ignored


def _read_regular_file(path: Path) -> bytes:
    """Read a file without following a link in the last path component, and only a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise DocumentError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_files(files: Sequence[SourceFile]) -> str:
    """A digest of the chunker version and every candidate file's id, path and content hash."""
    digest = hashlib.sha256(f"chunker={CHUNKER_VERSION};max={DEFAULT_MAX_CHARS};ov={DEFAULT_OVERLAP_CHARS}\n".encode())
    for item in sorted(files, key=lambda f: f.rel_path):
        digest.update(f"{item.rel_path}\0{item.sha256}\n".encode())
    return digest.hexdigest()


def folder_fingerprint(folder: Path, *, hash_cache: HashCache | None = None) -> str:
    """The fingerprint of a documents folder as ``ingest`` records it in the index."""
    files, _ = discover(folder, hash_cache=hash_cache)
    return fingerprint_files(files)


def _decode_text(data: bytes) -> str:
    """Decode UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is an error."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"invalid UTF-16 text ({exc.reason} at byte {exc.start})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise DocumentError(f"not valid UTF-8 (byte 0x{bad} at offset {exc.start}); save the file as UTF-8") from None
    if "\x00" in text:
        raise DocumentError("looks like a binary file (contains NUL bytes), not text")
    controls = sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t\f")
    if controls > max(8, len(text) // 100):
        raise DocumentError(f"looks like a binary file ({controls} control characters), not text")
    return text


def _read_pdf_text(data: bytes) -> str:
    """Extract the text of a PDF, pages separated by form feeds."""
    import pypdf  # imported here: parsing PDFs is the only use and it is not needed at app start
    from pypdf.errors import PdfReadError

    pypdf_logger = logging.getLogger("pypdf")
    level = pypdf_logger.level
    pypdf_logger.setLevel(logging.ERROR)  # pypdf logs a warning per recoverable glitch
    try:
        try:
            reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                try:
                    if not reader.decrypt(""):
                        raise DocumentError("PDF is encrypted with a password")
                except (NotImplementedError, PdfReadError) as exc:
                    raise DocumentError(f"PDF is encrypted ({exc})") from None
            pages = [page.extract_text() or "" for page in reader.pages]
        except DocumentError:
            raise
        except Exception as exc:  # pypdf raises many types on damaged files; all mean "unreadable"
            raise DocumentError(f"unreadable PDF ({type(exc).__name__}: {str(exc)[:200]})") from None
    finally:
        pypdf_logger.setLevel(level)
    text = "\f".join(pages)
    if not text.strip():
        raise DocumentError("PDF has no extractable text (a scanned image?); OCR it first")
    return text


def _pdf_title(data: bytes) -> str | None:
    import pypdf

    try:
        meta = pypdf.PdfReader(io.BytesIO(data), strict=False).metadata
        title = meta.title if meta else None
    except Exception:  # a missing title is fine; the text was already read successfully
        return None
    return title.strip() if isinstance(title, str) and title.strip() else None


def _humanize(stem: str) -> str:
    words = re.sub(r"[_\-]+", " ", stem).strip()
    return words[:1].upper() + words[1:] if words else stem


def load_document(source: SourceFile) -> IngestedDocument:
    """Read, parse and chunk one file; raise ``DocumentError`` with a plain reason when it cannot."""
    if source.refused is not None:
        raise DocumentError(source.refused)
    if source.size < 0:
        raise DocumentError(f"cannot read file ({source.sha256})")
    if source.size > MAX_FILE_BYTES:
        raise DocumentError(f"file too large ({source.size} bytes; limit {MAX_FILE_BYTES})")
    try:
        data = _read_regular_file(source.real_path or source.abs_path)
    except OSError as exc:
        raise DocumentError(f"cannot read file ({exc.strerror or exc})") from None
    if not data.strip():
        raise DocumentError("empty file")
    suffix = source.abs_path.suffix.lower()
    parsed: ParsedText
    if suffix in PDF_SUFFIXES:
        if not data.lstrip().startswith(b"%PDF-"):
            raise DocumentError("not a PDF file (no %PDF- header)")
        parsed = parse_plain(_read_pdf_text(data), page_breaks=True)
        parsed.title = _pdf_title(data) or parsed.title
    elif suffix in MARKDOWN_SUFFIXES:
        parsed = parse_markdown(_decode_text(data))
    else:
        parsed = parse_plain(_decode_text(data))
    pieces = chunk_sections(parsed.sections)
    if not pieces:
        raise DocumentError("no text content after parsing")
    title = (parsed.title or _humanize(source.abs_path.stem))[:200]
    top_folder = source.doc_id.split("/")[0] if "/" in source.doc_id else None
    tags = sorted(set(parsed.tags) | ({top_folder} if top_folder else set()))
    chunks = [
        IngestedChunk(
            source_id=f"{source.doc_id}#{n}",
            doc_id=source.doc_id,
            chunk_no=n,
            title=title,
            heading=piece.heading,
            content=piece.content,
            path=source.rel_path,
            tags=tags,
            page=piece.page,
            doc_sha256=source.sha256,
        )
        for n, piece in enumerate(pieces, start=1)
    ]
    return IngestedDocument(
        doc_id=source.doc_id, path=source.rel_path, title=title, sha256=source.sha256, tags=tags, chunks=chunks
    )


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
