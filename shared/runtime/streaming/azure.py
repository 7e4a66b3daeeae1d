"""Partial output on Azure Blob Storage: one append blob per (job, step) in the host's storage account.

Reached with the app's managed identity (``AZURE_CLIENT_ID``) at ``AzureWebJobsStorage__blobServiceUri``,
the same account and role (Storage Blob Data Owner) the Functions host already uses, so scaled-out
instances share it: the instance running the activity appends, any instance serving the view reads.
Each blob is ``<job id>/<step id>``; its metadata holds the attempt it belongs to and whether it is
complete. A new attempt recreates the blob (empty) before appending. One attempt runs in one
activity invocation, so the attempt a blob was created for is remembered in this process and each
flush is a single Append Block call. ``build_blob_store`` also takes a key-based connection string
(e.g. Azurite's, the local storage emulator).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.localstore import BLOB_TIMEOUT_S as TIMEOUT_S
from shared.runtime.localstore import ContainerOnce, blob_service_client
from shared.runtime.streaming.base import DONE_TTL_S, MAX_AGE_S, PartialOutput

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)


class BlobPartialOutputStore:
    """Append blobs in one container; the container is created on first use."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._created: dict[tuple[str, str], int] = {}
        self._container = ContainerOnce(container)
        self._lock = threading.Lock()

    @staticmethod
    def blob_name(job_id: str, step_id: str) -> str:
        """The blob of one step's partial output."""
        return f"{job_id}/{step_id}"

    def _ensure_container(self) -> None:
        self._container.ensure()

    def append(self, job_id: str, step_id: str, attempt: int, text: str, *, complete: bool = False) -> None:
        """Append a block (creating the blob for a new attempt); mark it complete in its metadata."""
        key = (job_id, step_id)
        blob = self.container.get_blob_client(self.blob_name(job_id, step_id))
        with self._lock:
            created = self._created.get(key) == attempt
        if not created:
            self._ensure_container()
            blob.create_append_blob(metadata={"attempt": str(attempt), "complete": "false"}, timeout=TIMEOUT_S)
            with self._lock:
                self._created[key] = attempt
        if text:
            blob.append_block(text.encode("utf-8"), timeout=TIMEOUT_S)
        if complete:
            blob.set_blob_metadata({"attempt": str(attempt), "complete": "true"}, timeout=TIMEOUT_S)
            with self._lock:
                self._created.pop(key, None)

    def read(self, job_id: str, step_id: str) -> PartialOutput | None:
        """Body and metadata in one GET; None when the blob does not exist."""
        from azure.core.exceptions import ResourceNotFoundError

        blob = self.container.get_blob_client(self.blob_name(job_id, step_id))
        try:
            download = blob.download_blob(timeout=TIMEOUT_S)
            data = download.readall()
        except ResourceNotFoundError:
            return None
        props = download.properties
        meta = props.metadata or {}
        modified = props.last_modified
        return PartialOutput(
            text=data.decode("utf-8", errors="replace"),
            attempt=int(meta.get("attempt", "0") or 0),
            updated_at=modified.isoformat().replace("+00:00", "Z") if modified else "",
            complete=meta.get("complete") == "true",
        )

    def drop(self, job_id: str, step_id: str) -> None:
        """Delete the blob (absent is fine)."""
        from azure.core.exceptions import ResourceNotFoundError

        with self._lock:
            self._created.pop((job_id, step_id), None)
        try:
            self.container.get_blob_client(self.blob_name(job_id, step_id)).delete_blob(timeout=TIMEOUT_S)
        except ResourceNotFoundError:
            pass

    def prune(self, now_s: float | None = None) -> int:
        """Delete finished blobs older than DONE_TTL_S and orphans older than MAX_AGE_S (one listing)."""
        from azure.core.exceptions import ResourceNotFoundError

        now = datetime.now(UTC) if now_s is None else datetime.fromtimestamp(now_s, UTC)
        removed = 0
        try:
            for item in self.container.list_blobs(include=["metadata"], timeout=TIMEOUT_S):
                age = (now - item.last_modified).total_seconds()
                done = (item.metadata or {}).get("complete") == "true"
                if (done and age > DONE_TTL_S) or age > MAX_AGE_S:
                    try:
                        self.container.delete_blob(item.name, timeout=TIMEOUT_S)
                        removed += 1
                    except ResourceNotFoundError:
                        pass
        except ResourceNotFoundError:
            return removed  # no container yet: nothing to prune
        return removed


def build_blob_store(
    settings: Settings,
    blob_service_uri: str | None,
    *,
    credential: TokenCredential | None = None,
    connection_verify: bool | str | None = None,
    connection_string: str | None = None,
) -> BlobPartialOutputStore:
    """The store on ``blob_service_uri`` with the managed identity, or on a key-based connection string;
    no network until first use."""
    if not blob_service_uri and not connection_string:
        raise ProviderError(
            ErrorCode.CONFIG_ERROR,
            "PARTIAL_OUTPUT_STORE=azure_blob needs AzureWebJobsStorage__blobServiceUri (the host storage's "
            "blob endpoint); use PARTIAL_OUTPUT_STORE=local or off elsewhere",
        )
    try:
        service = blob_service_client(
            blob_service_uri=blob_service_uri,
            connection_string=connection_string,
            credential=credential,
            connection_verify=connection_verify,
            client_id=settings.azure_client_id,
        )
    except ImportError as exc:  # pragma: no cover - the package is in requirements.txt
        raise ProviderError(
            ErrorCode.CONFIG_ERROR, "PARTIAL_OUTPUT_STORE=azure_blob needs the azure-storage-blob package"
        ) from exc
    except ValueError as exc:  # a malformed connection string
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"the blob storage connection string is not usable: {exc}") from exc
    logger.info(
        "partial output: append blobs in %s/%s (%s)",
        service.url.rstrip("/"),
        settings.partial_output_container,
        "identity" if blob_service_uri else "connection string",
    )
    return BlobPartialOutputStore(service.get_container_client(settings.partial_output_container))
