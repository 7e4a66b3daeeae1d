"""Which forks a job has: one entry per fork, written by the API when it starts one, read by the origin's view.

The fork's own input names its origin (the source of truth); this ledger is only the reverse index, so the
origin's view lists its forks without scanning instances. It lives beside the answer claims (same backend
choice): a SQLite table locally, one empty blob ``<origin>/<fork>`` per fork on Azure Blob.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from shared.runtime.answer_claims import claims_kind
from shared.runtime.localstore import BLOB_TIMEOUT_S, ContainerOnce, SqliteFile, blob_container

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

LEDGER_FILE = "job_forks.sqlite3"
LEDGER_CONTAINER = "job-forks"
MAX_LISTED = 100

_SCHEMA = """
CREATE TABLE IF NOT EXISTS job_forks (
    origin TEXT NOT NULL,
    fork TEXT NOT NULL,
    from_step TEXT NOT NULL,
    created_s REAL NOT NULL,
    PRIMARY KEY (origin, fork)
)
"""


class ForkLedger(Protocol):
    """The forks of each job."""

    def add(self, origin: str, fork: str, from_step: str) -> None:
        """Record that ``fork`` was forked from ``origin`` at ``from_step``."""
        ...

    def forks_of(self, origin: str) -> list[dict[str, str]]:
        """The forks of ``origin``, oldest first: ``{"job", "step"}`` each (at most MAX_LISTED)."""
        ...


class SqliteForkLedger:
    """Forks as rows of one SQLite file."""

    def __init__(self, path: Path) -> None:
        self._file = SqliteFile(Path(path), _SCHEMA)

    def add(self, origin: str, fork: str, from_step: str) -> None:
        """Insert the row (a second add of the same fork changes nothing)."""
        conn = self._file.connect()
        try:
            conn.execute(
                "INSERT OR IGNORE INTO job_forks (origin, fork, from_step, created_s) VALUES (?, ?, ?, ?)",
                (origin, fork, from_step, time.time()),
            )
        finally:
            conn.close()

    def forks_of(self, origin: str) -> list[dict[str, str]]:
        """The rows of ``origin``, oldest first."""
        conn = self._file.connect()
        try:
            rows = conn.execute(
                "SELECT fork, from_step FROM job_forks WHERE origin=? ORDER BY created_s, fork LIMIT ?",
                (origin, MAX_LISTED),
            ).fetchall()
        finally:
            conn.close()
        return [{"job": str(fork), "step": str(step)} for fork, step in rows]


class BlobForkLedger:
    """Forks as empty blobs ``<origin>/<fork>`` whose metadata holds the fork point."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._container = ContainerOnce(container)

    def add(self, origin: str, fork: str, from_step: str) -> None:
        """Write the blob (overwriting the same fork's is harmless)."""
        self._container.ensure()
        blob = self.container.get_blob_client(f"{origin}/{fork}")
        blob.upload_blob(b"", overwrite=True, metadata={"from_step": from_step}, timeout=BLOB_TIMEOUT_S)

    def forks_of(self, origin: str) -> list[dict[str, str]]:
        """The blobs under ``<origin>/``, oldest first."""
        self._container.ensure()
        found = []
        for item in self.container.list_blobs(
            name_starts_with=f"{origin}/", include=["metadata"], timeout=BLOB_TIMEOUT_S
        ):
            found.append((item.creation_time, item.name.split("/", 1)[1], (item.metadata or {}).get("from_step", "")))
            if len(found) >= MAX_LISTED:
                break
        return [{"job": fork, "step": step} for _, fork, step in sorted(found)]


_ledgers: dict[tuple[str, str], ForkLedger] = {}
_lock = threading.Lock()


def get_fork_ledger(settings: Settings) -> ForkLedger:
    """The process-wide ledger for these settings (the backend the answer claims use), built once."""
    import os

    kind = claims_kind(settings)
    key = (kind, str(settings.partial_output_path))
    with _lock:
        if key not in _ledgers:
            if kind == "local":
                _ledgers[key] = SqliteForkLedger(Path(settings.partial_output_path).parent / LEDGER_FILE)
            else:
                container = blob_container(
                    LEDGER_CONTAINER,
                    store="the fork ledger on Azure Blob",
                    blob_service_uri=os.environ.get("AzureWebJobsStorage__blobServiceUri"),
                    client_id=settings.azure_client_id,
                )
                _ledgers[key] = BlobForkLedger(container)
        return _ledgers[key]
