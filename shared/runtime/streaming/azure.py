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

import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Unpack

from shared.runtime.localstore import BLOB_TIMEOUT_S as TIMEOUT_S
from shared.runtime.localstore import BlobAccess, ContainerOnce, blob_container
from shared.runtime.streaming.base import DONE_TTL_S, MAX_AGE_S, PartialOutput, PartialSlice, slice_of

if TYPE_CHECKING:
    from shared.runtime.settings import Settings


class BlobPartialOutputStore:
    """Append blobs in one container; the container is created on first use."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._created: dict[tuple[str, str], int] = {}
        # (job, step, attempt) -> (characters, bytes) read so far by this process's followers.
        self._positions: dict[tuple[str, str, int], tuple[int, int]] = {}
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

    def read_from(self, job_id: str, step_id: str, attempt: int, offset: int) -> PartialSlice | None:
        """A range read of the new bytes when this process read the attempt up to ``offset`` before, else whole.

        Offsets are characters, the blob holds UTF-8 bytes: the byte position of the last character read is
        remembered per (job, step, attempt), so a follower reads only what was appended since.
        """
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        known = self._positions.get((job_id, step_id, attempt))
        if known is None or known[0] != offset or known[1] == 0:
            return self._read_whole(job_id, step_id, attempt, offset)
        blob = self.container.get_blob_client(self.blob_name(job_id, step_id))
        # Read from the last byte already seen: an append blob only grows, so while it holds the same attempt
        # the range is always satisfiable; a 416 means it shrank, i.e. a new attempt replaced it.
        try:
            download = blob.download_blob(offset=known[1] - 1, timeout=TIMEOUT_S)
            data = download.readall()[1:]
        except ResourceNotFoundError:
            return None
        except HttpResponseError as exc:
            if exc.status_code != 416:
                raise
            return self._read_whole(job_id, step_id, attempt, offset)
        meta = download.properties.metadata or {}
        if int(meta.get("attempt", "0") or 0) != attempt:
            return self._read_whole(job_id, step_id, attempt, offset)
        # A block boundary never splits a character: each append is one whole UTF-8 text.
        text = data.decode("utf-8", errors="replace")
        found = PartialSlice(text, offset, attempt, meta.get("complete") == "true")
        return self._remember(job_id, step_id, found, known[1] + len(data))

    def _read_whole(self, job_id: str, step_id: str, attempt: int, offset: int) -> PartialSlice | None:
        """Read the whole blob (a follower this process has not seen, or a new attempt)."""
        entry = self.read(job_id, step_id)
        found = slice_of(entry, attempt, offset)
        if entry is not None and found is not None:
            self._remember(job_id, step_id, found, len(entry.text.encode("utf-8")))
        return found

    def _remember(self, job_id: str, step_id: str, found: PartialSlice, byte_end: int) -> PartialSlice:
        """Keep where the slice ended, in characters and bytes, for the next range read."""
        with self._lock:
            if len(self._positions) > 1024:  # followers of finished steps: forget them all
                self._positions.clear()
            self._positions[(job_id, step_id, found.attempt)] = (found.end, byte_end)
        return found

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
    **access: Unpack[BlobAccess],
) -> BlobPartialOutputStore:
    """The store on ``blob_service_uri`` with the managed identity, or on a key-based connection string;
    no network until first use."""
    container = blob_container(
        settings.partial_output_container,
        store="PARTIAL_OUTPUT_STORE=azure_blob",
        blob_service_uri=blob_service_uri,
        client_id=settings.azure_client_id,
        hint="; use PARTIAL_OUTPUT_STORE=local or off elsewhere",
        **access,
    )
    return BlobPartialOutputStore(container)
