"""Plumbing shared by the small stores beside a job (partial output, answer claims, artifacts): local SQLite
and Azure Blob."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from shared.jobs.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

logger = logging.getLogger(__name__)

# Blob calls give up after this many seconds (a store must never hold an activity or a request for long).
BLOB_TIMEOUT_S = 10


class SqliteFile:
    """One SQLite file with a schema made on first use; a short-lived connection per call.

    Threads and processes never share a connection, so the file is safe for both on one machine.
    """

    def __init__(self, path: Path, schema: str, *, synchronous: str | None = None) -> None:
        self.path = Path(path)
        self._schema = schema
        self._synchronous = synchronous
        self._ready = False
        self._lock = threading.Lock()

    def connect(self) -> sqlite3.Connection:
        """A new autocommit connection, after creating the file and its schema once per process."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    conn = sqlite3.connect(self.path, timeout=10)
                    try:
                        conn.execute("PRAGMA journal_mode=WAL")
                        conn.executescript(self._schema)
                        conn.commit()
                    finally:
                        conn.close()
                    self._ready = True
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=10000")
        if self._synchronous:
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        return conn


class ContainerOnce:
    """Creates a blob container the first time it is needed (an existing one is fine)."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._ready = False

    def ensure(self) -> None:
        """Create the container unless this process already did or found it."""
        from azure.core.exceptions import ResourceExistsError

        if self._ready:
            return
        try:
            self.container.create_container(timeout=BLOB_TIMEOUT_S)
        except ResourceExistsError:
            pass
        self._ready = True


def blob_service_client(
    *,
    blob_service_uri: str | None,
    connection_string: str | None,
    credential: Any,
    connection_verify: bool | str | None,
    client_id: str | None,
) -> Any:
    """A BlobServiceClient: on ``blob_service_uri`` with a token credential (the managed identity when none is
    given), or else from a connection string; the caller has checked that one of the two is there."""
    from azure.storage.blob import BlobServiceClient

    kwargs: dict[str, Any] = {"retry_total": 2}
    if connection_verify is not None:
        kwargs["connection_verify"] = connection_verify
    if not blob_service_uri and connection_string:
        return BlobServiceClient.from_connection_string(connection_string, **kwargs)
    if credential is None:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential(managed_identity_client_id=client_id)
    return BlobServiceClient(blob_service_uri or "", credential=credential, **kwargs)


class BlobAccess(TypedDict, total=False):
    """How a side store reaches Azure Blob besides its endpoint (each optional): a token credential (default: the
    managed identity), TLS verification, or a key-based connection string used when there is no endpoint."""

    credential: TokenCredential | None
    connection_verify: bool | str | None
    connection_string: str | None


def blob_container(
    container: str,
    *,
    store: str,
    blob_service_uri: str | None,
    client_id: str | None,
    hint: str = "",
    **access: Unpack[BlobAccess],
) -> Any:
    """The ContainerClient of a side store (no network until first use); ProviderError(CONFIG_ERROR) naming
    ``store`` (e.g. "ARTIFACT_STORE=azure_blob") when it cannot be built."""
    connection_string = access.get("connection_string")
    if not blob_service_uri and not connection_string:
        raise ProviderError(
            ErrorCode.CONFIG_ERROR,
            f"{store} needs AzureWebJobsStorage__blobServiceUri (the host storage's blob endpoint){hint}",
        )
    try:
        service = blob_service_client(
            blob_service_uri=blob_service_uri,
            connection_string=connection_string,
            credential=access.get("credential"),
            connection_verify=access.get("connection_verify"),
            client_id=client_id,
        )
    except ImportError as exc:  # pragma: no cover - the package is in requirements.txt
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"{store} needs the azure-storage-blob package") from exc
    except ValueError as exc:  # a malformed connection string
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"the blob storage connection string is not usable: {exc}") from exc
    logger.info(
        "%s: blobs in %s/%s (%s)",
        store,
        service.url.rstrip("/"),
        container,
        "identity" if blob_service_uri else "connection string",
    )
    return service.get_container_client(container)
