"""Artifacts: files a step produced (charts, CSV written by run_python), kept beside the job, not in Durable.

Durable payloads stay small: a step result holds only references ``{name, media_type, size, ref}``; the
bytes live in a side store keyed by (job id, ref) and the job's artifacts route serves them to whoever may
see the job. Stores, chosen by ``ARTIFACT_STORE``:
- ``local``: one SQLite file (WAL, a connection per call), safe across threads and processes on one machine.
- ``azure_blob``: blobs ``<job id>/<ref>`` in the host's storage account, with the app's managed identity
  (append blobs, written in blocks, the media type and file name in their metadata).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from pydantic import BaseModel, Field

from shared.runtime.localstore import BLOB_TIMEOUT_S, BlobAccess, ContainerOnce, SqliteFile, blob_container

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)

# A ref names one artifact of a job: "<step id>-a<attempt>-<index>" (what the route accepts, nothing else).
REF_PATTERN = r"^[a-z0-9_-]{1,64}-a[0-9]{1,4}-[0-9]{1,3}$"
_REF = re.compile(REF_PATTERN)
# Blocks of an append blob are at most 4 MiB (older service versions).
_BLOCK = 4 * 1024 * 1024


class ArtifactRef(BaseModel):
    """What a step result carries for one file: its name, type, size and the ref the route serves it by."""

    name: str = Field(min_length=1, max_length=120)
    media_type: str = Field(min_length=1, max_length=100)
    size: int = Field(ge=0)
    ref: str = Field(pattern=REF_PATTERN)


class ArtifactStore(Protocol):
    """Where artifact bytes are kept."""

    def put(self, job_id: str, artifact: ArtifactRef, data: bytes) -> None:
        """Keep the bytes of one artifact (a second put of the same ref replaces it)."""
        ...

    def get(self, job_id: str, ref: str) -> tuple[ArtifactRef, bytes] | None:
        """The artifact and its bytes, or None."""
        ...


def make_ref(step_id: str, attempt: int, index: int) -> str:
    """The ref of the ``index``-th file of one attempt of a step."""
    ref = f"{step_id.lower()[:64]}-a{attempt}-{index}"
    if not _REF.match(ref):
        raise ValueError(f"cannot name an artifact of step {step_id!r}")
    return ref


def valid_ref(ref: str) -> bool:
    """Whether ``ref`` has the shape of an artifact ref."""
    return bool(_REF.match(ref))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    job_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (job_id, ref)
)
"""


class SqliteArtifactStore:
    """One SQLite file; a short-lived connection per call."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self._file = SqliteFile(Path(path), _SCHEMA, synchronous="NORMAL")

    def put(self, job_id: str, artifact: ArtifactRef, data: bytes) -> None:
        """Insert or replace one artifact."""
        conn = self._file.connect()
        try:
            conn.execute(
                "INSERT OR REPLACE INTO artifacts (job_id, ref, name, media_type, data) VALUES (?, ?, ?, ?, ?)",
                (job_id, artifact.ref, artifact.name, artifact.media_type, data),
            )
        finally:
            conn.close()

    def get(self, job_id: str, ref: str) -> tuple[ArtifactRef, bytes] | None:
        """One artifact of a job, or None."""
        conn = self._file.connect()
        try:
            row = conn.execute(
                "SELECT name, media_type, data FROM artifacts WHERE job_id = ? AND ref = ?", (job_id, ref)
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        data = bytes(row[2])
        return ArtifactRef(name=row[0], media_type=row[1], size=len(data), ref=ref), data


class BlobArtifactStore:
    """Blobs ``<job id>/<ref>`` in one container (created on first use)."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._container = ContainerOnce(container)

    def put(self, job_id: str, artifact: ArtifactRef, data: bytes) -> None:
        """Write the blob in blocks; its metadata holds the file name and media type."""
        self._container.ensure()
        blob = self.container.get_blob_client(f"{job_id}/{artifact.ref}")
        metadata = {"name": artifact.name.encode("ascii", "replace").decode(), "media_type": artifact.media_type}
        blob.create_append_blob(metadata=metadata, timeout=BLOB_TIMEOUT_S)
        for start in range(0, len(data), _BLOCK):
            blob.append_block(data[start : start + _BLOCK], timeout=BLOB_TIMEOUT_S)

    def get(self, job_id: str, ref: str) -> tuple[ArtifactRef, bytes] | None:
        """The blob and its metadata in one GET; None when absent."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            download = self.container.get_blob_client(f"{job_id}/{ref}").download_blob(timeout=BLOB_TIMEOUT_S)
            data = download.readall()
        except ResourceNotFoundError:
            return None
        meta = download.properties.metadata or {}
        name = meta.get("name") or ref
        media_type = meta.get("media_type") or "application/octet-stream"
        return ArtifactRef(name=name, media_type=media_type, size=len(data), ref=ref), bytes(data)


def store_kind(settings: Settings) -> str:
    """The store ``ARTIFACT_STORE`` asks for ("auto": Azure Blob on Azure, else local)."""
    if settings.artifact_store == "auto":
        return "azure_blob" if os.environ.get("AzureWebJobsStorage__blobServiceUri") else "local"
    return settings.artifact_store


def build_blob_artifacts(
    settings: Settings,
    blob_service_uri: str | None,
    **access: Unpack[BlobAccess],
) -> BlobArtifactStore:
    """The blob store on ``blob_service_uri`` with the managed identity, or on a connection string (Azurite);
    no network until first use."""
    container = blob_container(
        settings.artifact_container,
        store="ARTIFACT_STORE=azure_blob",
        blob_service_uri=blob_service_uri,
        client_id=settings.azure_client_id,
        **access,
    )
    return BlobArtifactStore(container)


_stores: dict[tuple[str, str], ArtifactStore] = {}
_lock = threading.Lock()


def get_artifact_store(settings: Settings) -> ArtifactStore:
    """The process-wide store for these settings; ProviderError(CONFIG_ERROR) when it cannot be built."""
    kind = store_kind(settings)
    key = (kind, str(settings.artifact_path))
    with _lock:
        store = _stores.get(key)
        if store is None:
            if kind == "azure_blob":
                store = build_blob_artifacts(settings, os.environ.get("AzureWebJobsStorage__blobServiceUri"))
            else:
                store = SqliteArtifactStore(settings.artifact_path)
            _stores[key] = store
    return store


def reset_artifact_stores() -> None:
    """Forget built stores (tests, or after a settings change)."""
    with _lock:
        _stores.clear()
