"""First-wins claims on human answers: of several answers to one question, exactly one is accepted.

The feedback endpoint validates an answer, then claims (job id, question id) before it raises the
Durable event; only the request that created the claim raises it, every other one gets 409. The claim
must be atomic across app instances, so it lives next to the partial output store
(``PARTIAL_OUTPUT_STORE`` chooses the backend):
- ``local``: a SQLite table with a primary key; ``INSERT OR IGNORE`` creates the claim or changes nothing.
- ``azure_blob``: an empty blob per claim in the host's storage account, created with ``If-None-Match: *``
  (the service refuses a second create with 409), reached with the app's managed identity (``build_claims``
  also takes a key-based connection string, e.g. Azurite's).
The orchestrator never reads claims, so replay stays deterministic.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from shared.runtime.localstore import BLOB_TIMEOUT_S as TIMEOUT_S
from shared.runtime.localstore import BlobAccess, ContainerOnce, SqliteFile, blob_container

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)
CLAIMS_FILE = "answer_claims.sqlite3"
CLAIMS_CONTAINER = "job-answer-claims"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answer_claims (
    job_id TEXT NOT NULL,
    question_id TEXT NOT NULL,
    claimed_s REAL NOT NULL,
    PRIMARY KEY (job_id, question_id)
)
"""


class AnswerClaims(Protocol):
    """An atomic first-wins claim per (job, question)."""

    def claim(self, job_id: str, question_id: str) -> bool:
        """True for the one caller that claims the question first; False for every later one."""
        ...


class SqliteAnswerClaims:
    """Claims as rows of one SQLite file (safe across threads and processes on one machine)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = SqliteFile(self.path, _SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return self._file.connect()

    def claim(self, job_id: str, question_id: str) -> bool:
        """Insert the claim unless it exists; the primary key makes exactly one insert succeed."""
        conn = self._connect()
        try:
            cur = conn.execute(
                "INSERT OR IGNORE INTO answer_claims (job_id, question_id, claimed_s) VALUES (?, ?, ?)",
                (job_id, question_id, time.time()),
            )
            return cur.rowcount == 1
        finally:
            conn.close()


class BlobAnswerClaims:
    """Claims as empty blobs ``<job id>/<question id>``, created only if none exists (If-None-Match: *)."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._container = ContainerOnce(container)

    def _ensure_container(self) -> None:
        self._container.ensure()

    def claim(self, job_id: str, question_id: str) -> bool:
        """Create the claim blob; a blob that already exists means another answer came first."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError

        self._ensure_container()
        blob = self.container.get_blob_client(f"{job_id}/{question_id}")
        try:
            # If-None-Match: * makes the service itself arbitrate between instances: one create wins, others 409.
            blob.create_append_blob(match_condition=MatchConditions.IfMissing, timeout=TIMEOUT_S)
        except ResourceExistsError:
            return False
        return True


def claims_kind(settings: Settings) -> str:
    """``azure_blob`` where the partial output store is on Azure Blob, else ``local``.

    Claims cannot be switched off (PARTIAL_OUTPUT_STORE=off still needs one answer per question): on
    Azure they use the host storage whenever its blob endpoint is configured.
    """
    from shared.runtime.streaming.local import store_kind

    kind = store_kind(settings)
    if kind == "azure_blob" or (kind == "off" and os.environ.get("AzureWebJobsStorage__blobServiceUri")):
        return "azure_blob"
    return "local"


def build_claims(
    settings: Settings,
    *,
    blob_service_uri: str | None = None,
    **access: Unpack[BlobAccess],
) -> AnswerClaims:
    """Build the claims store the settings choose; ProviderError(CONFIG_ERROR) when it cannot be built."""
    if blob_service_uri is None and access.get("connection_string") is None and claims_kind(settings) == "local":
        return SqliteAnswerClaims(Path(settings.partial_output_path).parent / CLAIMS_FILE)
    uri = blob_service_uri or os.environ.get("AzureWebJobsStorage__blobServiceUri")
    container = blob_container(
        CLAIMS_CONTAINER,
        store="the answer claims store on Azure Blob",
        blob_service_uri=uri,
        client_id=settings.azure_client_id,
        **access,
    )
    return BlobAnswerClaims(container)


_claims: dict[tuple[str, str], AnswerClaims] = {}
_claims_lock = threading.Lock()


def get_claims(settings: Settings) -> AnswerClaims:
    """The process-wide claims store for these settings, built once."""
    key = (claims_kind(settings), str(settings.partial_output_path))
    with _claims_lock:
        if key not in _claims:
            _claims[key] = build_claims(settings)
        return _claims[key]


def reset_claims() -> None:
    """Forget built stores (tests, or after a settings change)."""
    with _claims_lock:
        _claims.clear()
