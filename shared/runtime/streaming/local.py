"""Partial output of a running step: the answer as it streams, on a side channel next to Durable.

The LLM provider decodes the streamed answer once and hands prose deltas to ``on_delta``. The
generate_response executor wraps a ``DeltaBuffer`` around them: it keeps the deltas in memory and
appends them to a ``PartialOutputStore`` at most every ``flush_ms`` (or when ``flush_chars`` are
pending), never per token. The job view reads the store only for a running generate_response step
that has no output in the history yet; once the activity result is in the history, the history
wins and the store entry is ignored. The orchestrator never reads the store, so replay stays
deterministic, and the store never decides anything: losing it loses only the live preview.

Entries are keyed by (job id, step id) and carry the attempt they belong to: an append for a new
attempt replaces the text of an older one. A failed attempt drops its entry; a finished one is
marked complete and kept until it ages out (``prune``), so a poller sees the full text between the
activity's return and the orchestrator recording it, rather than a gap.

Stores, chosen by ``PARTIAL_OUTPUT_STORE``:
- ``local``: one SQLite file (WAL, busy timeout, a connection per call), safe across threads and
  processes on one machine; the default for devhost and tests.
- ``azure_blob``: append blobs in the function app's own storage account, reached with its managed
  identity, for apps scaled out over several instances.
- ``off``: no live preview.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.localstore import SqliteFile
from shared.runtime.streaming.base import DONE_TTL_S as DONE_TTL_S
from shared.runtime.streaming.base import MAX_AGE_S as MAX_AGE_S
from shared.runtime.streaming.base import PartialOutput as PartialOutput
from shared.runtime.streaming.base import PartialOutputStore as PartialOutputStore
from shared.runtime.streaming.base import PartialSlice as PartialSlice

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- local SQLite ----------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS partial_output (
    job_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    text TEXT NOT NULL,
    complete INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    updated_s REAL NOT NULL,
    PRIMARY KEY (job_id, step_id)
)
"""


class SqlitePartialOutputStore:
    """One SQLite file; a short-lived connection per call, so threads and processes never share one."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = SqliteFile(self.path, _SCHEMA, synchronous="NORMAL")

    def _connect(self) -> sqlite3.Connection:
        return self._file.connect()

    def append(self, job_id: str, step_id: str, attempt: int, text: str, *, complete: bool = False) -> None:
        """Append in one upsert: concatenate for the same attempt, replace for another."""
        conn = self._connect()
        try:
            conn.execute(
                """
                INSERT INTO partial_output (job_id, step_id, attempt, text, complete, updated_at, updated_s)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (job_id, step_id) DO UPDATE SET
                    text = CASE WHEN attempt = excluded.attempt THEN text || excluded.text ELSE excluded.text END,
                    attempt = excluded.attempt,
                    complete = excluded.complete,
                    updated_at = excluded.updated_at,
                    updated_s = excluded.updated_s
                """,
                (job_id, step_id, attempt, text, int(complete), _now_iso(), time.time()),
            )
        finally:
            conn.close()

    def read(self, job_id: str, step_id: str) -> PartialOutput | None:
        """The entry of a step, or None."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT text, attempt, updated_at, complete FROM partial_output WHERE job_id = ? AND step_id = ?",
                (job_id, step_id),
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else PartialOutput(row[0], int(row[1]), row[2], bool(row[3]))

    def read_from(self, job_id: str, step_id: str, attempt: int, offset: int) -> PartialSlice | None:
        """Only the new text of the followed attempt (substr in SQLite), or the whole text of a newer one."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT attempt, complete, length(text), CASE WHEN attempt = ? THEN substr(text, ? + 1) ELSE text END "
                "FROM partial_output WHERE job_id = ? AND step_id = ?",
                (attempt, offset, job_id, step_id),
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        stored, complete, length, text = int(row[0]), bool(row[1]), int(row[2]), str(row[3])
        if stored != attempt:
            return PartialSlice(text, 0, stored, complete, superseded=attempt != 0)
        return PartialSlice(text, min(offset, length), stored, complete)

    def drop(self, job_id: str, step_id: str) -> None:
        """Forget the entry of a step."""
        conn = self._connect()
        try:
            conn.execute("DELETE FROM partial_output WHERE job_id = ? AND step_id = ?", (job_id, step_id))
        finally:
            conn.close()

    def prune(self, now_s: float | None = None) -> int:
        """Remove finished entries older than DONE_TTL_S and orphans older than MAX_AGE_S."""
        now_s = time.time() if now_s is None else now_s
        conn = self._connect()
        try:
            cur = conn.execute(
                "DELETE FROM partial_output WHERE (complete = 1 AND updated_s < ?) OR updated_s < ?",
                (now_s - DONE_TTL_S, now_s - MAX_AGE_S),
            )
            return int(cur.rowcount or 0)
        finally:
            conn.close()


# --- choosing the store ----------------------------------------------------------------------

_stores: dict[tuple[str, str], PartialOutputStore | None] = {}
_stores_lock = threading.Lock()


def store_kind(settings: Settings) -> str:
    """The store ``PARTIAL_OUTPUT_STORE`` asks for ("auto" resolved: Azure Blob on Azure, else local)."""
    kind = settings.partial_output_store
    # The host's own storage account (identity-based connection), a platform setting on Azure.
    if kind == "auto":
        return "azure_blob" if os.environ.get("AzureWebJobsStorage__blobServiceUri") else "local"
    return kind


def build_store(settings: Settings) -> PartialOutputStore | None:
    """Build the configured store (None when off); raises ProviderError(CONFIG_ERROR) when misconfigured."""
    kind = store_kind(settings)
    if kind == "off":
        return None
    if kind == "local":
        local = SqlitePartialOutputStore(settings.partial_output_path)
        local.prune()  # creates the file: an unusable path fails here, once, not on every flush
        return local
    if kind == "azure_blob":
        from shared.runtime.streaming.azure import build_blob_store

        return build_blob_store(settings, os.environ.get("AzureWebJobsStorage__blobServiceUri"))
    raise ProviderError(ErrorCode.CONFIG_ERROR, f"PARTIAL_OUTPUT_STORE={kind} is not a known store")


def get_store(settings: Settings) -> PartialOutputStore | None:
    """The process-wide store for these settings, built once; None when off or not buildable (logged)."""
    key = (store_kind(settings), str(settings.partial_output_path))
    with _stores_lock:
        if key in _stores:
            return _stores[key]
        try:
            store = build_store(settings)
        except Exception as exc:  # the live preview is optional: never fail a job or a view over it
            logger.warning("partial output store %s unavailable, answers will not stream: %s", key[0], exc)
            store = None
        _stores[key] = store
    prune = getattr(store, "prune", None)
    if callable(prune) and not isinstance(store, SqlitePartialOutputStore):
        # Remote stores prune once per process, off the caller's path; a failure costs a log line.
        threading.Thread(target=_prune_quietly, args=(prune, key[0]), name="partial-output-prune", daemon=True).start()
    return store


def _prune_quietly(prune: Callable[[], int], kind: str) -> None:
    try:
        removed = prune()
        if removed:
            logger.info("partial output store %s: pruned %d old entries", kind, removed)
    except Exception as exc:
        logger.warning("partial output store %s: prune failed: %s", kind, exc)


def reset_stores() -> None:
    """Forget built stores (tests, or after a settings change)."""
    with _stores_lock:
        _stores.clear()


# --- the executor side -----------------------------------------------------------------------


class DeltaBuffer:
    """An ``on_delta`` that batches deltas and appends them to the store at most every ``flush_ms``.

    Store failures are logged once and switch the buffer off: the answer itself never depends on
    the live preview.
    """

    def __init__(
        self,
        store: PartialOutputStore,
        job_id: str,
        step_id: str,
        attempt: int,
        *,
        flush_ms: int = 250,
        flush_chars: int = 2048,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.key = (job_id, step_id)
        self.attempt = attempt
        self.flush_s = flush_ms / 1000
        self.flush_chars = flush_chars
        self.clock = clock
        self.pending: list[str] = []
        self.pending_chars = 0
        self.chars = 0
        self.flushes = 0
        self.broken = False
        # The first delta waits one interval too, so a fast model writes once, at the end.
        self.last_flush = clock()

    def __call__(self, delta: str) -> None:
        """Take one delta; append the batch when the interval has passed or enough text is pending."""
        if not delta or self.broken:
            return
        self.pending.append(delta)
        self.pending_chars += len(delta)
        self.chars += len(delta)
        if self.pending_chars >= self.flush_chars or self.clock() - self.last_flush >= self.flush_s:
            self.flush()

    def flush(self, *, complete: bool = False) -> None:
        """Append what is pending (and mark the entry complete when asked)."""
        if self.broken or (not self.pending and not complete):
            return
        text = "".join(self.pending)
        self.pending.clear()
        self.pending_chars = 0
        self.last_flush = self.clock()
        try:
            self.store.append(*self.key, self.attempt, text, complete=complete)
            self.flushes += 1
        except Exception as exc:
            self.broken = True
            logger.warning("partial output of %s/%s not stored, preview stops: %s", *self.key, exc)

    def finish(self, *, succeeded: bool) -> None:
        """Write the rest and mark the entry complete, or drop it when the attempt failed."""
        if self.broken:
            return
        if succeeded:
            if self.chars:
                self.flush(complete=True)
            return
        try:
            self.store.drop(*self.key)
        except Exception as exc:
            logger.warning("partial output of %s/%s not dropped: %s", *self.key, exc)
