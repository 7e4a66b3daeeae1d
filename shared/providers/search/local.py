"""The local document index: SQLite FTS5 with BM25 ranking, built lazily from ``documents_dir``.

This is the embedded default ``Retriever`` (``settings.search_provider == "local"``).

Index. One SQLite file with an FTS5 table over ``title``, ``heading`` and ``content``
(``porter unicode61`` tokenizer, so "refunds"/"refunded"/"refund" match and accents fold) plus
unindexed columns for ids, path, tags and page. Ranking is ``bm25()`` with column weights
title 3, heading 2, content 1: a hit in a section heading says more than one in running text.

Queries. User text never reaches FTS5 syntax. It is cut into word tokens, common English stop
words are dropped, every token is double-quoted, and the tokens are OR-ed, together with a few
domain synonyms ("broken" also looks for "damaged" and "defective") and each pair of adjacent
tokens as a quoted phrase, so "refunds after 30 days" ranks the passage that says exactly that
first. OR plus BM25 means a passage need not contain every word, but more and rarer words rank
higher. Quotes, colons, ``AND``/``NOT``/``NEAR``, ``*``, ``-`` and parentheses in user text are
ordinary characters here and cannot cause a syntax error.

Filter (``search(..., filter=...)``): space- or comma-separated terms. ``doc:<prefix>`` keeps
chunks whose doc id starts with the prefix at a folder boundary or equals it (``doc:policies``,
``doc:policies/`` or ``doc:faq/customer-faq.md``; ``doc:pol`` matches nothing). ``tag:<tag>``
keeps chunks of documents with that tag (front-matter tags and the top-level folder, see
``shared.ingest.pipeline``); a bare term is a doc-id prefix. Terms of the same kind are OR-ed, the two kinds
are AND-ed. Anything else is ``ProviderError(INVALID_INPUT)``. The Azure retriever reads the same
syntax (``shared.providers.search.azure_fields.translate_filter``), so a filter works with either provider.

Lazy build. The first search builds the index from ``documents_dir`` into ``index_path`` and later
searches rebuild it when the folder's fingerprint (chunker version plus every file's path and
SHA-256, see ``shared.ingest.sources.folder_fingerprint``) differs from the one stored in the index; the
folder is re-checked at most every ``refresh_interval_s`` and files are only re-hashed when their
size or mtime changed. Builds write a temporary file next to the index and ``os.replace`` it into
place, so readers see the old or the new index, never half of one. Threads of one process share a
lock; processes share an ``flock`` on ``<index>.lock`` and re-check the fingerprint once they hold
it, so concurrent first use builds once. When the index folder is not writable (a read-only
deployment package), the index goes to the system temp folder instead. Each thread has its own
read-only connection, reopened when the index file is replaced.

Results are ``Chunk`` objects with ``score = -bm25`` (higher is better), ``title`` = document title
plus section heading, ``path`` relative to the documents folder, and ``content`` at most 800
characters, because results are stored in Durable history.

Why no embeddings. Hybrid vector search would need an embedding model at build and query time:
offline that means downloading model weights (not possible in CI or in a locked-down deployment)
or a toy hashing embedder that adds noise rather than meaning. For a corpus of policy documents
queried with the words those documents use, BM25 with stemming, phrases, synonyms and field weights
retrieves the right passage (see ``tests/providers/search/local``). Semantic ranking belongs to the Azure AI Search
provider, which has real vector and semantic ranking.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from shared.ingest.chunking import CHUNKER_VERSION
from shared.ingest.models import IngestedDocument, IngestError, IngestReport
from shared.ingest.pipeline import ingest, register_sink
from shared.ingest.sources import HashCache, folder_fingerprint
from shared.ingest.text import STOP_WORDS, SYNONYMS, bound_snippet
from shared.jobs.contracts import Chunk, ErrorCode, ProviderError
from shared.providers.search.filter import split_filter_terms

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

try:
    import fcntl
except ImportError:  # Windows: atomic replace still keeps readers safe; builds may just run twice.
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
MAX_TOP_K = 50
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
MAX_FILTER_CHARS = 1000
COLUMN_WEIGHTS = (3.0, 2.0, 1.0)  # title, heading, content

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


class IndexStats(BaseModel):
    """What an index file holds."""

    path: str
    documents: int
    chunks: int
    fingerprint: str | None
    built_at: str | None


def query_terms(query: str) -> list[str]:
    """The search words of a free-text query: lower-cased word tokens without stop words."""
    tokens = [t.lower() for t in _TOKEN.findall(query[:MAX_QUERY_CHARS])]
    tokens = [t for t in tokens if len(t) > 1 or t.isdigit()]
    kept = [t for t in tokens if t not in STOP_WORDS] or tokens
    return list(dict.fromkeys(kept))[:MAX_QUERY_TERMS]


def build_match_query(query: str) -> str | None:
    """An FTS5 MATCH expression for free text (quoted terms, synonyms and phrases, OR-ed); None if empty."""
    terms = query_terms(query)
    if not terms:
        return None
    parts = [f'"{t}"' for t in terms]
    for term in terms:
        key = term[:-1] if term.endswith("s") and len(term) > 3 else term
        parts += [f'"{s}"' for s in SYNONYMS.get(key, ()) if s not in terms]
    parts += [f'"{a} {b}"' for a, b in zip(terms, terms[1:], strict=False)]
    return " OR ".join(dict.fromkeys(parts))


def parse_filter(filter: str | None) -> tuple[str, list[str]]:
    """Turn a filter string into a SQL condition and its parameters (``("", [])`` for no filter)."""
    if filter is None or not filter.strip():
        return "", []
    if len(filter) > MAX_FILTER_CHARS:
        raise ProviderError(ErrorCode.INVALID_INPUT, f"filter is longer than {MAX_FILTER_CHARS} characters")
    prefixes, tags = split_filter_terms(filter)
    clauses: list[str] = []
    params: list[str] = []
    if prefixes:
        # Prefixes match at a folder boundary or the whole id, as in the Azure index's doc_prefixes.
        ors: list[str] = []
        for prefix in prefixes:
            escaped = re.sub(r"([\\%_])", r"\\\1", prefix)
            if prefix.endswith("/"):
                ors.append("doc_id LIKE ? ESCAPE '\\'")
                params.append(escaped + "%")
            else:
                ors.append("(doc_id = ? OR doc_id LIKE ? ESCAPE '\\')")
                params += [prefix, escaped + "/%"]
        clauses.append("(" + " OR ".join(ors) + ")")
    if tags:
        clauses.append("(" + " OR ".join(["instr(tags, ?) > 0"] * len(tags)) + ")")
        params += [f" {t} " for t in tags]
    return " AND ".join(clauses), params


_SCHEMA = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents(
    doc_id TEXT PRIMARY KEY, path TEXT NOT NULL, title TEXT NOT NULL, sha256 TEXT NOT NULL,
    tags TEXT NOT NULL, chunk_count INTEGER NOT NULL
);
CREATE VIRTUAL TABLE chunks USING fts5(
    title, heading, content,
    source_id UNINDEXED, doc_id UNINDEXED, chunk_no UNINDEXED, path UNINDEXED, tags UNINDEXED,
    page UNINDEXED,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO meta(key, value) VALUES ('schema_version', '{SCHEMA_VERSION}'), ('chunker_version', '{CHUNKER_VERSION}');
"""
_CHUNK_COLUMNS = "title, heading, content, source_id, doc_id, chunk_no, path, tags, page"


def _ro_connect(path: Path) -> sqlite3.Connection:
    """A read-only connection (``mode=ro``: a missing file is an error, never an empty new database)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
    conn.execute("PRAGMA query_only = ON")
    return conn


def read_meta(path: Path) -> dict[str, str] | None:
    """The meta table of an index file, or None when the file is missing, damaged or of another schema."""
    if not path.is_file():
        return None
    try:
        with contextlib.closing(_ro_connect(path)) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error:
        return None
    return meta if meta.get("schema_version") == SCHEMA_VERSION else None


class LocalIndexSink:
    """``ChunkSink`` that writes a local FTS5 index: built in a temp file, then atomically renamed."""

    name = "local"

    def __init__(self, index_path: Path, *, lock: bool = True) -> None:
        """Target the index file at ``index_path`` (its folder is created when missing).

        With ``lock``, the run holds the build lock from ``start`` to ``finish``/``abort``, so a CLI
        run and the app's lazy build never interleave; pass False when the caller holds it already.
        """
        self.index_path = Path(index_path)
        self._conn: sqlite3.Connection | None = None
        self._tmp: Path | None = None
        self._has_old = False
        self._lock = lock
        self._held: contextlib.ExitStack | None = None

    def start(self, *, rebuild: bool) -> None:
        """Create the temp index; unless ``rebuild``, attach the current index for reuse."""
        self.index_path.parent.mkdir(parents=True, exist_ok=True)
        if self._lock:
            self._held = contextlib.ExitStack()
            self._held.enter_context(_process_lock(self.index_path))
        try:
            self._open(rebuild=rebuild)
        except BaseException:
            self.abort()
            raise

    def _open(self, *, rebuild: bool) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{self.index_path.name}.", suffix=".tmp", dir=self.index_path.parent)
        os.close(fd)
        self._tmp = Path(tmp)
        conn = sqlite3.connect(self._tmp.resolve().as_uri(), uri=True, isolation_level=None)
        self._conn = conn
        # The temp file is thrown away on any failure, so journaling buys nothing here.
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.executescript(_SCHEMA)
        meta = None if rebuild else read_meta(self.index_path)
        if meta is not None and meta.get("chunker_version") == CHUNKER_VERSION:
            try:
                conn.execute("ATTACH DATABASE ? AS old", (f"{self.index_path.resolve().as_uri()}?mode=ro",))
                conn.execute("SELECT count(*) FROM old.documents").fetchone()
                conn.execute("CREATE TEMP TABLE kept(doc_id TEXT PRIMARY KEY)")
                self._has_old = True
            except sqlite3.Error:
                self._has_old = False
        conn.execute("BEGIN")

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("LocalIndexSink used before start()")
        return self._conn

    def existing(self) -> dict[str, str]:
        """Documents in the current index, by doc id, with their content hash."""
        if not self._has_old:
            return {}
        return dict(self._db().execute("SELECT doc_id, sha256 FROM old.documents").fetchall())

    def keep(self, doc_id: str) -> int:
        """Mark an unchanged document for copying from the current index (copied in ``finish``)."""
        db = self._db()
        db.execute("INSERT INTO documents SELECT * FROM old.documents WHERE doc_id = ?", (doc_id,))
        db.execute("INSERT INTO temp.kept(doc_id) VALUES (?)", (doc_id,))
        row = db.execute("SELECT chunk_count FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
        return int(row[0]) if row else 0

    def write(self, document: IngestedDocument) -> None:
        """Insert a document and its chunks."""
        db = self._db()
        tags = " " + " ".join(document.tags) + " "
        db.execute(
            "INSERT INTO documents(doc_id, path, title, sha256, tags, chunk_count) VALUES (?, ?, ?, ?, ?, ?)",
            (document.doc_id, document.path, document.title, document.sha256, tags, len(document.chunks)),
        )
        db.executemany(
            f"INSERT INTO chunks({_CHUNK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (c.title, c.heading, c.content, c.source_id, c.doc_id, c.chunk_no, c.path, tags, c.page)
                for c in document.chunks
            ],
        )

    def finish(self, *, fingerprint: str) -> None:
        """Record the fingerprint, commit, and move the new index into place."""
        db = self._db()
        if self._has_old:
            # One pass over the old table: doc_id is an unindexed FTS column, so a copy per
            # document would scan the whole table each time.
            db.execute(
                f"INSERT INTO chunks({_CHUNK_COLUMNS}) SELECT {_CHUNK_COLUMNS} FROM old.chunks "
                "WHERE doc_id IN (SELECT doc_id FROM temp.kept)"
            )
        built_at = datetime.now(UTC).isoformat(timespec="seconds")
        db.executemany(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
            [("fingerprint", fingerprint), ("built_at", built_at)],
        )
        db.execute("COMMIT")
        if self._has_old:
            db.execute("DETACH DATABASE old")
        db.execute("INSERT INTO chunks(chunks) VALUES ('optimize')")
        db.close()
        self._conn = None
        assert self._tmp is not None
        with open(self._tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(self._tmp, 0o644)  # mkstemp makes it 0600; other local users of the app may read it
        os.replace(self._tmp, self.index_path)
        self._tmp = None
        self._release()

    def _release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    def abort(self) -> None:
        """Drop the temp index; the current index is left as it was."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        self._release()


@contextlib.contextmanager
def _process_lock(index_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<index>.lock`` (no-op where ``fcntl`` is missing)."""
    if fcntl is None:
        yield
        return
    lock_path = index_path.with_name(index_path.name + ".lock")
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def build_index(documents_dir: Path, index_path: Path, *, rebuild: bool = True) -> IngestReport:
    """Build (or refresh) an index file from a folder (the sink holds the cross-process build lock)."""
    return ingest(documents_dir, LocalIndexSink(index_path), rebuild=rebuild)


def fallback_index_path(index_path: Path) -> Path:
    """Where the index goes when ``index_path``'s folder is not writable: the system temp folder."""
    tag = hashlib.sha256(str(index_path.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "durable-ai-jobs" / f"{index_path.stem}-{tag}{index_path.suffix}"


class _ThreadConn(threading.local):
    conn: sqlite3.Connection | None = None
    identity: tuple[str, int, int] | None = None


class LocalIndex:
    """The local ``Retriever``: BM25 search over an FTS5 index kept in step with a documents folder."""

    def __init__(self, index_path: Path, documents_dir: Path | None = None, *, refresh_interval_s: float = 2.0) -> None:
        """Search ``index_path``; with ``documents_dir``, build it lazily and rebuild it when the folder changes."""
        self.index_path = Path(index_path)
        self.documents_dir = Path(documents_dir) if documents_dir is not None else None
        self.refresh_interval_s = refresh_interval_s
        self.builds = 0  # index builds done by this object (observability and tests)
        self._lock = threading.Lock()
        self._local = _ThreadConn()
        self._active: Path | None = None
        self._checked_at = 0.0
        self._hashes: HashCache = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalIndex:
        """The process-wide index for ``settings.local_index_path`` built from ``settings.documents_dir``."""
        return get_default_index(settings.local_index_path, settings.documents_dir)

    # --- keeping the index current -------------------------------------------------------------

    def ensure_current(self) -> Path:
        """Build or rebuild the index if the documents changed; return the index file in use."""
        active = self._active
        if active is not None and time.monotonic() - self._checked_at < self.refresh_interval_s:
            return active
        with self._lock:
            if self._active is not None and time.monotonic() - self._checked_at < self.refresh_interval_s:
                return self._active
            try:
                self._active = self._check_or_build()
            except (OSError, sqlite3.Error, IngestError) as exc:
                # Providers never leak raw exceptions: e.g. no disk space or an unreadable folder.
                raise ProviderError(ErrorCode.SEARCH_ERROR, f"cannot build the document index: {exc}") from None
            self._checked_at = time.monotonic()
            return self._active

    def _check_or_build(self) -> Path:
        if self.documents_dir is None:
            if read_meta(self.index_path) is None:
                raise ProviderError(
                    ErrorCode.CONFIG_ERROR,
                    f"document index {self.index_path} is missing or unreadable; "
                    "build it with: python -m shared.ingest <folder> --index <path>",
                )
            return self.index_path
        try:
            wanted = folder_fingerprint(self.documents_dir, hash_cache=self._hashes)
        except IngestError as exc:
            raise ProviderError(ErrorCode.CONFIG_ERROR, f"{exc} (settings.documents_dir)") from None
        fallback = fallback_index_path(self.index_path)
        for candidate in (self.index_path, fallback):
            meta = read_meta(candidate)
            if meta is not None and meta.get("fingerprint") == wanted:
                return candidate
        try:
            return self._build(self.index_path, wanted)
        except OSError as exc:
            log.warning("cannot write document index at %s (%s); using %s", self.index_path, exc, fallback)
            return self._build(fallback, wanted)

    def _build(self, target: Path, wanted: str) -> Path:
        assert self.documents_dir is not None
        target.parent.mkdir(parents=True, exist_ok=True)
        with _process_lock(target):
            meta = read_meta(target)  # another process may have built it while we waited
            if meta is not None and meta.get("fingerprint") == wanted:
                return target
            started = time.perf_counter()
            report = ingest(self.documents_dir, LocalIndexSink(target, lock=False), rebuild=False)
            self.builds += 1
        for skipped in report.skipped:
            log.warning("document skipped: %s: %s", skipped.path, skipped.reason)
        log.info(
            "document index built at %s: %d documents (%d reused), %d chunks in %.0f ms",
            target,
            report.documents + report.reused,
            report.reused,
            report.chunks,
            (time.perf_counter() - started) * 1000,
        )
        return target

    def _connection(self, path: Path) -> sqlite3.Connection:
        """This thread's read-only connection to ``path``, reopened if the file was replaced."""
        try:
            stat = path.stat()
        except OSError as exc:
            raise ProviderError(ErrorCode.SEARCH_ERROR, f"document index unavailable: {exc}") from None
        identity = (str(path), stat.st_ino, stat.st_mtime_ns)
        local = self._local
        if local.conn is None or local.identity != identity:
            if local.conn is not None:
                local.conn.close()
            local.conn = None
            try:
                local.conn = _ro_connect(path)
            except sqlite3.Error as exc:
                raise ProviderError(ErrorCode.SEARCH_ERROR, f"cannot open document index: {exc}") from None
            local.identity = identity
        return local.conn

    # --- Retriever -----------------------------------------------------------------------------

    def search(self, query: str, *, top_k: int, filter: str | None = None) -> list[Chunk]:
        """Return the best chunks for a free-text query (empty list when nothing matches)."""
        if top_k < 1:
            raise ProviderError(ErrorCode.INVALID_INPUT, f"top_k must be at least 1, got {top_k}")
        top_k = min(top_k, MAX_TOP_K)
        where, params = parse_filter(filter)
        match = build_match_query(query)
        if match is None:
            return []
        path = self.ensure_current()
        sql = (
            f"SELECT source_id, title, heading, content, path, bm25(chunks, {', '.join(map(str, COLUMN_WEIGHTS))}) "
            "AS rank FROM chunks WHERE chunks MATCH ?"
            + (f" AND {where}" if where else "")
            + " ORDER BY rank, source_id LIMIT ?"
        )
        try:
            rows = self._connection(path).execute(sql, [match, *params, top_k]).fetchall()
        except sqlite3.DatabaseError as exc:
            self._drop_connection()
            self._active = None  # re-check (and rebuild, if damaged) on the next call
            raise ProviderError(ErrorCode.SEARCH_ERROR, f"document search failed: {exc}") from None
        return [
            Chunk(
                source_id=source_id,
                title=f"{title} — {heading}" if heading and heading != title else title,
                content=bound_snippet(content),
                score=round(-float(rank), 6),
                path=rel_path,
            )
            for source_id, title, heading, content, rel_path, rank in rows
        ]

    def stats(self) -> IndexStats:
        """Counts and fingerprint of the index in use (building it first if needed)."""
        path = self.ensure_current()
        conn = self._connection(path)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        (documents,) = conn.execute("SELECT count(*) FROM documents").fetchone()
        (chunks,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
        return IndexStats(
            path=str(path),
            documents=documents,
            chunks=chunks,
            fingerprint=meta.get("fingerprint"),
            built_at=meta.get("built_at"),
        )

    def document_titles(self) -> list[str]:
        """Titles of the indexed documents, sorted (empty when the index cannot be built)."""
        try:
            path = self.ensure_current()
            rows = self._connection(path).execute("SELECT DISTINCT title FROM documents ORDER BY title").fetchall()
        except (ProviderError, sqlite3.Error) as exc:
            log.warning("document titles unavailable: %s", exc)
            return []
        return [title for (title,) in rows]

    def _drop_connection(self) -> None:
        if self._local.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._local.conn.close()
        self._local.conn = None
        self._local.identity = None

    def close(self) -> None:
        """Close the calling thread's connection (other threads' close when their thread ends)."""
        self._drop_connection()


_DEFAULTS: dict[tuple[str, str], LocalIndex] = {}
_DEFAULTS_LOCK = threading.Lock()


def get_default_index(index_path: Path | None = None, documents_dir: Path | None = None) -> LocalIndex:
    """The process-wide index for the given (default: configured) paths; cheap, builds nothing yet."""
    if index_path is None or documents_dir is None:
        from shared.runtime.settings import get_settings

        settings = get_settings()
        index_path = index_path or settings.local_index_path
        documents_dir = documents_dir or settings.documents_dir
    key = (str(Path(index_path).resolve()), str(Path(documents_dir).resolve()))
    with _DEFAULTS_LOCK:
        if key not in _DEFAULTS:
            _DEFAULTS[key] = LocalIndex(Path(index_path), Path(documents_dir))
        return _DEFAULTS[key]


def _ingest_sink(args: Any) -> LocalIndexSink:
    """The ``--target local`` sink of ``python -m shared.ingest``."""
    return LocalIndexSink(Path(args.index))


register_sink("local", _ingest_sink)
