"""The versioned definitions store: Azure Table Storage (the app's storage account; Azurite locally and in tests).

One partition per definition (``<kind>~<id>``): a ``head`` row (latest version, owner, archived flag,
content hash) and one immutable row per version (``v000001``, ...). A save writes the new version row and
moves the head in one entity-group transaction, conditional on the head's ETag, so two concurrent updates
never both win and a version row is never rewritten. The definition is kept as compact ASCII JSON cut into
properties of at most ``CHUNK`` characters (an Azure Table string property holds 64 KiB of UTF-16); with
``MAX_DEFINITION_BYTES`` the whole entity stays far below the 1 MiB entity limit, so nothing goes to blobs.

Delete archives: the head is marked archived (hidden from list and get), the version rows stay, so a run
pinned to a version still resolves it; saving the same id again continues its version numbers.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import TableClient, TableServiceClient, TableTransactionError, UpdateMode

from shared.definitions.models import KINDS, MAX_DEFINITION_BYTES, MODELS, Definition
from shared.definitions.validate import canonical_json

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

# UTF-16 code units per string property: ASCII JSON uses one per character, so a chunk is 60 KB < 64 KiB.
CHUNK = 30_000
MAX_CHUNKS = -(-MAX_DEFINITION_BYTES // CHUNK)
HEAD = "head"
# Listing reads at most this many definitions of a kind (definitions are few; a page would come later).
MAX_LIST = 1000


class StoreError(Exception):
    """A store problem with a stable code (the API maps each code to one status)."""

    code = "DEFINITIONS_STORE_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotConfigured(StoreError):
    """No table endpoint or connection string is configured."""

    code = "DEFINITIONS_NOT_CONFIGURED"


class Unavailable(StoreError):
    """The table service did not answer (down, unreachable, refused our identity)."""

    code = "DEFINITIONS_STORE_UNAVAILABLE"


class NotFound(StoreError):
    """No such (live) definition or version."""

    code = "DEFINITION_NOT_FOUND"


class Exists(StoreError):
    """A create for an id that is already taken."""

    code = "DEFINITION_EXISTS"


class Conflict(StoreError):
    """Another save moved the definition on first (or the expected version is not the latest)."""

    code = "DEFINITION_CONFLICT"


@dataclass(frozen=True)
class Owner:
    """Who created a definition (the Easy Auth principal); None without Easy Auth."""

    id: str
    name: str = ""


@dataclass(frozen=True)
class VersionInfo:
    """One version of a definition, without its body."""

    version: int
    created_at: str
    created_by: str | None
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        """The version as the API lists it."""
        return {"version": self.version, "created_at": self.created_at, "created_by": self.created_by}


@dataclass(frozen=True)
class Head:
    """The latest state of a definition."""

    kind: str
    id: str
    name: str
    description: str
    latest: int
    owner: Owner | None
    created_at: str
    updated_at: str
    archived: bool
    sha256: str
    etag: str

    def summary(self) -> dict[str, Any]:
        """The definition as the API lists it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "description": self.description,
            "latest_version": self.latest,
            "owner": self.owner.name or self.owner.id if self.owner else None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class Saved:
    """The outcome of a save: the head after it, and whether a new version was written."""

    head: Head
    created: bool


def partition(kind: str, def_id: str) -> str:
    """The partition of one definition."""
    return f"{kind}~{def_id}"


def row(version: int) -> str:
    """The row key of a version (zero-padded: rows sort by version)."""
    return f"v{version:06d}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _chunks(text: str) -> dict[str, str]:
    return {f"body_{i:02d}": text[start : start + CHUNK] for i, start in enumerate(range(0, len(text), CHUNK))}


def _body(entity: dict[str, Any]) -> str:
    count = int(entity.get("chunks", 0))
    return "".join(str(entity.get(f"body_{i:02d}", "")) for i in range(count))


def _head(entity: Any) -> Head:
    owner_id = entity.get("owner_id") or None
    return Head(
        kind=str(entity["kind"]),
        id=str(entity["def_id"]),
        name=str(entity.get("name", "")),
        description=str(entity.get("description", "")),
        latest=int(entity["latest"]),
        owner=Owner(owner_id, str(entity.get("owner_name", ""))) if owner_id else None,
        created_at=str(entity.get("created_at", "")),
        updated_at=str(entity.get("updated_at", "")),
        archived=bool(entity.get("archived", False)),
        sha256=str(entity.get("sha256", "")),
        etag=str(entity.metadata.get("etag", "")) if hasattr(entity, "metadata") else "",
    )


class DefinitionStore:
    """Agents, workflows and teams in one table; every call is one or two requests to the table service."""

    def __init__(self, table: TableClient) -> None:
        self.table = table
        self._ready = False
        self._lock = threading.Lock()

    def _ensure_table(self) -> None:
        if self._ready:
            return
        with self._lock:
            if not self._ready:
                try:
                    self.table.create_table()
                except ResourceExistsError:
                    pass
                self._ready = True

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One request, with transport and authorization failures as ``Unavailable``."""
        self._ensure_table_guarded()
        try:
            return fn(*args, **kwargs)
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise Unavailable(f"the definitions table did not answer ({what}): {exc}") from exc
        except HttpResponseError as exc:
            if exc.status_code in (401, 403):
                raise Unavailable(
                    f"the definitions table refused the app's identity ({what}, {exc.status_code}); "
                    "grant it Storage Table Data Contributor"
                ) from exc
            raise

    def _ensure_table_guarded(self) -> None:
        try:
            self._ensure_table()
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise Unavailable(f"the definitions table did not answer: {exc}") from exc
        except HttpResponseError as exc:
            raise Unavailable(f"the definitions table cannot be used ({exc.status_code}): {exc.message}") from exc

    # --- reads ------------------------------------------------------------------------------------------

    def head(self, kind: str, def_id: str) -> Head | None:
        """The head of a definition (archived ones too), or None."""
        try:
            entity = self._call("read", self.table.get_entity, partition(kind, def_id), HEAD)
        except ResourceNotFoundError:
            return None
        return _head(entity)

    def heads(self, kind: str) -> list[Head]:
        """The live definitions of a kind, by id."""
        query = "PartitionKey ge @lo and PartitionKey lt @hi and RowKey eq @head"
        params = {"lo": f"{kind}~", "hi": f"{kind}\x7f", "head": HEAD}
        select = ["kind", "def_id", "name", "description", "latest", "owner_id", "owner_name"]
        select += ["created_at", "updated_at", "archived", "sha256"]

        def read() -> list[Head]:
            found = []
            for entity in self.table.query_entities(query, parameters=params, select=select, results_per_page=200):
                head = _head(entity)
                if not head.archived:
                    found.append(head)
                if len(found) >= MAX_LIST:
                    break
            return found

        heads: list[Head] = self._call("list", read)
        return sorted(heads, key=lambda h: h.id)

    def versions(self, kind: str, def_id: str) -> list[VersionInfo]:
        """Every version of a definition, oldest first."""
        query = "PartitionKey eq @pk and RowKey ge 'v' and RowKey lt 'w'"
        select = ["version", "created_at", "created_by", "sha256"]

        def read() -> list[VersionInfo]:
            return [
                VersionInfo(int(e["version"]), str(e.get("created_at", "")), e.get("created_by"), str(e["sha256"]))
                for e in self.table.query_entities(query, parameters={"pk": partition(kind, def_id)}, select=select)
            ]

        found: list[VersionInfo] = self._call("versions", read)
        return sorted(found, key=lambda v: v.version)

    def get_version(self, kind: str, def_id: str, version: int) -> Definition:
        """One version of a definition, archived or not (a run pins it); NotFound when there is none."""
        try:
            entity = self._call("read", self.table.get_entity, partition(kind, def_id), row(version))
        except ResourceNotFoundError:
            raise NotFound(f"there is no version {version} of {kind} {def_id!r}") from None
        return MODELS[kind].model_validate(json.loads(_body(entity)))

    def get(self, kind: str, def_id: str) -> tuple[Head, Definition]:
        """The head and latest version of a live definition; NotFound when there is none (or it is archived)."""
        head = self.head(kind, def_id)
        if head is None or head.archived:
            raise NotFound(f"there is no {kind} {def_id!r}")
        return head, self.get_version(kind, def_id, head.latest)

    def find(self, kind: str, def_id: str, version: int | None) -> Definition | None:
        """The resolver validation uses: a version (even archived), or the latest live one."""
        try:
            return self.get(kind, def_id)[1] if version is None else self.get_version(kind, def_id, version)
        except NotFound:
            return None

    # --- writes -----------------------------------------------------------------------------------------

    def save(
        self,
        definition: Definition,
        *,
        owner: Owner | None,
        create: bool,
        expected_version: int | None = None,
    ) -> Saved:
        """Write a (validated) definition as a new version; the same content as the latest writes nothing.

        ``create``: Exists when the id is live; otherwise NotFound when it is not. ``expected_version``:
        Conflict when the latest version is another one.
        """
        kind = definition.kind
        text = canonical_json(definition.model_dump(mode="json", by_alias=True, exclude_defaults=True))
        if len(text) > MAX_DEFINITION_BYTES:
            raise ValueError(f"a definition is at most {MAX_DEFINITION_BYTES} bytes as JSON")
        sha = hashlib.sha256(text.encode()).hexdigest()
        head = self.head(kind, definition.id)
        live = head is not None and not head.archived
        if create and live:
            raise Exists(f"{kind} {definition.id!r} already exists; update it instead")
        if not create and not live:
            raise NotFound(f"there is no {kind} {definition.id!r}")
        if expected_version is not None and (head is None or head.latest != expected_version):
            raise Conflict(
                f"{kind} {definition.id!r} is at version {head.latest if head else 0}, not {expected_version}"
            )
        if head is not None and live and head.sha256 == sha:
            return Saved(head, created=False)
        return Saved(self._write(definition, text, sha, head, owner), created=True)

    def _write(self, definition: Definition, text: str, sha: str, head: Head | None, owner: Owner | None) -> Head:
        kind, now = definition.kind, _now()
        version = head.latest + 1 if head else 1
        keep_owner = head is not None and not head.archived
        who = head.owner if keep_owner and head is not None else owner
        created_at = head.created_at if keep_owner and head is not None else now
        pk = partition(kind, definition.id)
        body = _chunks(text)
        version_row: dict[str, Any] = {
            "PartitionKey": pk,
            "RowKey": row(version),
            "kind": kind,
            "def_id": definition.id,
        }
        version_row |= {"version": version, "created_at": now, "created_by": owner.id if owner else None}
        version_row |= {"sha256": sha, "chunks": len(body), **body}
        head_row: dict[str, Any] = {"PartitionKey": pk, "RowKey": HEAD, "kind": kind, "def_id": definition.id}
        head_row |= {"name": definition.name, "description": definition.description, "latest": version}
        head_row |= {"owner_id": who.id if who else "", "owner_name": who.name if who else ""}
        head_row |= {"created_at": created_at, "updated_at": now, "archived": False, "sha256": sha}
        head_op: tuple[Any, ...]
        if head is None:
            head_op = ("create", head_row)
        else:
            head_op = ("update", head_row, {"mode": UpdateMode.REPLACE, "etag": head.etag,
                                            "match_condition": MatchConditions.IfNotModified})  # fmt: skip
        try:
            self._call("save", self.table.submit_transaction, [("create", version_row), head_op])
        except TableTransactionError as exc:
            raise Conflict(f"{kind} {definition.id!r} was changed at the same time; read it again and retry") from exc
        saved = self.head(kind, definition.id)
        if saved is None:  # pragma: no cover - the transaction just wrote it
            raise Conflict(f"{kind} {definition.id!r} was removed at the same time")
        return saved

    def archive(self, kind: str, def_id: str) -> Head:
        """Hide a definition from list and get (its versions stay for pinned runs); NotFound when not live."""
        head = self.head(kind, def_id)
        if head is None or head.archived:
            raise NotFound(f"there is no {kind} {def_id!r}")
        entity: dict[str, Any] = {"PartitionKey": partition(kind, def_id), "RowKey": HEAD}
        entity |= {"archived": True, "updated_at": _now()}
        try:
            self._call(
                "archive",
                self.table.update_entity,
                entity,
                mode=UpdateMode.MERGE,
                etag=head.etag,
                match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceNotFoundError, HttpResponseError) as exc:
            if getattr(exc, "status_code", None) in (404, 409, 412):
                raise Conflict(f"{kind} {def_id!r} was changed at the same time; retry") from exc
            raise
        return head


# --- Building from settings -------------------------------------------------------------------------------


def table_source(settings: Settings) -> tuple[str, str] | None:
    """Where the table service is: ("endpoint", url) with the managed identity, ("connection", string), or None.

    DEFINITIONS_TABLE_ENDPOINT first, then the host storage's table endpoint (AzureWebJobsStorage__tableServiceUri,
    set by the Bicep), then the AzureWebJobsStorage connection string (Azurite: devhost puts the real one there).
    """
    import os

    if settings.definitions_table_endpoint:
        return "endpoint", settings.definitions_table_endpoint
    uri = os.environ.get("AzureWebJobsStorage__tableServiceUri")
    if uri:
        return "endpoint", uri
    if settings.azurewebjobsstorage is not None:
        return "connection", settings.azurewebjobsstorage.get_secret_value()
    return None


def build_store(settings: Settings, *, credential: Any = None) -> DefinitionStore:
    """The store the settings name (no request until first use); NotConfigured when they name none."""
    source = table_source(settings)
    if source is None:
        raise NotConfigured(
            "the definitions store is not configured: set DEFINITIONS_TABLE_ENDPOINT, or AzureWebJobsStorage "
            "(UseDevelopmentStorage=true runs it on Azurite under devhost)"
        )
    how, where = source
    kwargs: dict[str, Any] = {"retry_total": 2}
    if how == "connection":
        try:
            service = TableServiceClient.from_connection_string(where, **kwargs)
        except ValueError as exc:
            raise NotConfigured(f"AzureWebJobsStorage is not a storage connection string: {exc}") from None
    else:
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        service = TableServiceClient(endpoint=where, credential=credential, **kwargs)
    return DefinitionStore(service.get_table_client(settings.definitions_table))


_stores: dict[tuple[Any, ...], DefinitionStore] = {}
_stores_lock = threading.Lock()


def get_store(settings: Settings) -> DefinitionStore:
    """The process-wide store for these settings, built once."""
    key = (table_source(settings), settings.definitions_table)
    with _stores_lock:
        if key not in _stores:
            _stores[key] = build_store(settings)
        return _stores[key]


def reset_stores() -> None:
    """Forget built stores (tests, or after a settings change)."""
    with _stores_lock:
        _stores.clear()


__all__ = ["KINDS", "DefinitionStore", "Head", "Owner", "build_store", "get_store", "reset_stores"]
