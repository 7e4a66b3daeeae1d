"""First-wins claims on human answers: of several answers to one question, exactly one is accepted.

The feedback endpoint validates an answer, then claims (job id, question id) before it raises the
Durable event. The claim records the answer itself (its JSON and a digest) and the instance it goes
to, so the claim and the delivery are never two writes with nothing between them: if the app dies after
the claim, the same answer posted again (or the job view, read later) raises it again, while a different
answer to the same question is refused with 409. A duplicate delivery is harmless: question ids are
never reused, and the orchestrator waits for ``answer:<question id>`` once. The claim must be atomic
across app instances, so it lives next to the partial output store (``PARTIAL_OUTPUT_STORE`` chooses
the backend):
- ``local``: a SQLite table with a primary key; ``INSERT OR IGNORE`` creates the claim or changes nothing.
- ``azure_blob``: a blob per claim in the host's storage account holding the record, created with
  ``If-None-Match: *`` (the service refuses a second create with 409), reached with the app's managed
  identity (``build_claims`` also takes a key-based connection string, e.g. Azurite's).
Claims made before answers were recorded (an empty blob, a row without a record) still refuse every
later answer. The orchestrator never reads claims, so replay stays deterministic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    record TEXT,
    PRIMARY KEY (job_id, question_id)
)
"""
# Columns added since the first schema: a file made before them gets them on first use.
_ADDED_COLUMNS = {"record": "TEXT"}
# The largest record kept (an answer body is at most the API's 64 KB body cap).
MAX_RECORD_BYTES = 128 * 1024


def answer_digest(answer: Any) -> str:
    """The sha256 of the answer's canonical JSON: equal for the same content, whatever the key order."""
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AnswerRecord(BaseModel):
    """What a claim records: the answer as accepted, its digest, and the instance it is delivered to."""

    model_config = ConfigDict(extra="forbid")

    question_id: str = Field(max_length=200)
    instance: str = Field(max_length=400)
    answer: str | dict[str, Any]
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    claimed_s: float = 0.0

    @classmethod
    def of(
        cls, question_id: str, instance: str, answer: str | dict[str, Any], now: float | None = None
    ) -> AnswerRecord:
        """The record of ``answer`` to ``question_id``, delivered to ``instance``."""
        claimed = time.time() if now is None else now
        return cls(
            question_id=question_id, instance=instance, answer=answer, digest=answer_digest(answer), claimed_s=claimed
        )

    def payload(self) -> dict[str, Any]:
        """The Durable event's payload (the same on every delivery)."""
        return {"answer": self.answer, "question_id": self.question_id}

    def same_answer(self, other: AnswerRecord) -> bool:
        """Whether ``other`` is the same answer to the same question (a client posting it again)."""
        return self.question_id == other.question_id and self.digest == other.digest


def _parse_record(raw: str | bytes | None) -> AnswerRecord | None:
    """A stored record, or None for a claim that recorded none (made before records, or unreadable)."""
    if not raw:
        return None
    try:
        record = AnswerRecord.model_validate_json(raw)
    except ValidationError:
        logger.warning("an answer claim holds a record that is not valid; it is treated as a bare claim")
        return None
    return record if record.digest == answer_digest(record.answer) else None


class AnswerClaims(Protocol):
    """An atomic first-wins claim per (job, question), recording the answer that won."""

    def claim(self, job_id: str, question_id: str, record: AnswerRecord | None = None) -> bool:
        """True for the one caller that claims the question first; False for every later one."""
        ...

    def recorded(self, job_id: str, question_id: str) -> AnswerRecord | None:
        """The answer the claim on this question recorded; None when unclaimed or claimed without a record."""
        ...

    def claimed(self, job_id: str, question_id: str) -> bool:
        """Whether the question is claimed (with or without a record)."""
        ...


class SqliteAnswerClaims:
    """Claims as rows of one SQLite file (safe across threads and processes on one machine)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = SqliteFile(self.path, _SCHEMA)

        self._migrated = False

    def _connect(self) -> sqlite3.Connection:
        conn = self._file.connect()
        if not self._migrated:
            have = {row[1] for row in conn.execute("PRAGMA table_info(answer_claims)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in have:
                    try:
                        conn.execute(f"ALTER TABLE answer_claims ADD COLUMN {column} {kind}")
                    except sqlite3.OperationalError as exc:  # another process added it first
                        if "duplicate column" not in str(exc):
                            raise
            self._migrated = True
        return conn

    def claim(self, job_id: str, question_id: str, record: AnswerRecord | None = None) -> bool:
        """Insert the claim with its record unless it exists; the primary key makes exactly one insert succeed."""
        conn = self._connect()
        try:
            cur = conn.execute(
                "INSERT OR IGNORE INTO answer_claims (job_id, question_id, claimed_s, record) VALUES (?, ?, ?, ?)",
                (job_id, question_id, time.time(), record.model_dump_json() if record else None),
            )
            return cur.rowcount == 1
        finally:
            conn.close()

    def _row(self, job_id: str, question_id: str) -> tuple[Any, ...] | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT record FROM answer_claims WHERE job_id = ? AND question_id = ?", (job_id, question_id)
            ).fetchone()
            return tuple(row) if row is not None else None
        finally:
            conn.close()

    def recorded(self, job_id: str, question_id: str) -> AnswerRecord | None:
        """The record the claim holds, if any."""
        row = self._row(job_id, question_id)
        return _parse_record(row[0]) if row else None

    def claimed(self, job_id: str, question_id: str) -> bool:
        """Whether a row exists for the question."""
        return self._row(job_id, question_id) is not None


class BlobAnswerClaims:
    """Claims as blobs ``<job id>/<question id>`` holding the record, created only if none exists (If-None-Match: *)."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._container = ContainerOnce(container)

    def _ensure_container(self) -> None:
        self._container.ensure()

    def claim(self, job_id: str, question_id: str, record: AnswerRecord | None = None) -> bool:
        """Create the claim blob with its record in one write; a blob that already exists means another came first."""
        from azure.core.exceptions import ResourceExistsError

        self._ensure_container()
        blob = self.container.get_blob_client(f"{job_id}/{question_id}")
        body = record.model_dump_json().encode("utf-8") if record else b""
        try:
            # One Put Blob with If-None-Match: * (overwrite=False): the service arbitrates between instances,
            # one create wins, the others get 409; the record is in the blob from the start.
            blob.upload_blob(body, blob_type="BlockBlob", overwrite=False, timeout=TIMEOUT_S)
        except ResourceExistsError:
            return False
        return True

    def _read(self, job_id: str, question_id: str) -> bytes | None:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self.container.get_blob_client(f"{job_id}/{question_id}")
        try:
            data: bytes = blob.download_blob(timeout=TIMEOUT_S).readall()
        except ResourceNotFoundError:
            return None
        return data

    def recorded(self, job_id: str, question_id: str) -> AnswerRecord | None:
        """The record the claim blob holds (an empty blob is a claim made before records)."""
        data = self._read(job_id, question_id)
        return _parse_record(data[:MAX_RECORD_BYTES]) if data else None

    def claimed(self, job_id: str, question_id: str) -> bool:
        """Whether the claim blob exists."""
        return self._read(job_id, question_id) is not None


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
