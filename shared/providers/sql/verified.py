"""Verified queries: SQL statements a person approved, saved with the question they answer, reused by the SQL step.

A verified query holds a question template with variable parts (``Returns in the {region} region in Q3``),
the statement with the same slots (``... WHERE g.name = {region}``), the allowed values of each slot, the
catalog version it was written against, and who approved it and when. The SQL step looks for one whose
template matches the question, or that the question rewords (paraphrase.py), before it asks a writer; it fills
the slots with the question's values, each one of the slot's allowed values and written as a SQL string
literal (never spliced as code), and the statement then goes through the same guard and the same approval
as any other: a verified query that reads a sensitive table still needs a person's approval of this exact
statement in this job.

They are stored next to the definitions (Table Storage; Azurite locally), in the table
``<DEFINITIONS_TABLE>verified``: one row per query, retired rather than deleted. With Easy Auth on, a query is
its owner's unless its owner holds a role of VERIFIED_QUERIES_SHARED_ROLES (then everyone's); the admin role
sees all (``visible``); only the owner or an admin edits or retires it (``may_change``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.providers.sql.paraphrase import Vocabulary, reworded

if TYPE_CHECKING:
    from azure.data.tables import TableClient

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)
PARTITION = "verified"
SLOT = re.compile(r"\{([a-z][a-z0-9_]{0,31})\}")
# A value the question gives a slot: words, digits, spaces, dots and dashes (no quotes, no SQL punctuation).
VALUE = r"[A-Za-z0-9][A-Za-z0-9 .\-]{0,59}?"
MAX_QUERIES = 500
# The SQL step reads the store before writing SQL: an unreachable store must cost little, not a long retry.
_CLIENT: dict[str, Any] = {"retry_total": 1, "connection_timeout": 3, "read_timeout": 10}


class Slot(BaseModel):
    """A variable part: the values the question may give it (matched without regard to case)."""

    model_config = ConfigDict(extra="forbid")

    values: list[str] = Field(min_length=1, max_length=200)

    @field_validator("values")
    @classmethod
    def _plain(cls, values: list[str]) -> list[str]:
        for v in values:
            if not re.fullmatch(VALUE.removesuffix("?"), v):
                raise ValueError(f"value {v!r} must be 1-60 letters, digits, spaces, dots or dashes")
        return values


class VerifiedQueryIn(BaseModel):
    """What a person saves: the question template, the statement, its slots (the API's request body)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    name: str = Field(min_length=1, max_length=200)
    question: str = Field(min_length=3, max_length=500)
    sql: str = Field(min_length=1, max_length=20_000)
    variables: dict[str, Slot] = Field(default_factory=dict, max_length=8)
    # Where it was approved (a job and its SQL step), for the record.
    approved_in: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _slots_agree(self) -> VerifiedQueryIn:
        asked, used = set(SLOT.findall(self.question)), set(SLOT.findall(self.sql))
        declared = set(self.variables)
        if asked != declared or used != declared:
            raise ValueError(
                f"the question's slots {sorted(asked)}, the statement's {sorted(used)} and the variables "
                f"{sorted(declared)} must be the same"
            )
        return self


class QueryOwner(BaseModel):
    """Who saved a verified query (the Easy Auth principal) and their app roles then: whether it is shared."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1, max_length=200)
    name: str = Field(default="", max_length=200)
    roles: tuple[str, ...] = Field(default=(), max_length=64)


class Reader(BaseModel):
    """Who looks for verified queries: an API caller, or the owner of the job whose SQL step reuses one."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1, max_length=200)
    roles: frozenset[str] = frozenset()


class VerifiedQuery(VerifiedQueryIn):
    """A stored verified query: who approved it and when, against which catalog, and whether it is retired."""

    # Set from the principal by the API, never from a body (VerifiedQueryIn forbids it); None without Easy Auth.
    owner: QueryOwner | None = None
    approved_by: str | None = None
    approved_at: str
    catalog_version: str
    retired: bool = False


class Match(BaseModel):
    """A verified query matching a question, with the statement its values fill in."""

    query: VerifiedQuery
    values: dict[str, str]
    sql: str

    def describe(self) -> dict[str, Any]:
        """What the SQL step's output says about it (and the view shows)."""
        q = self.query
        return {
            "id": q.id,
            "name": q.name,
            "values": self.values,
            "approved_by": q.approved_by,
            "approved_at": q.approved_at,
            "catalog_version": q.catalog_version,
        }


# --- who sees which ------------------------------------------------------------------------------------


def shared(query: VerifiedQuery, shared_roles: frozenset[str]) -> bool:
    """Whether everyone sees the query: its owner held one of the shared roles (VERIFIED_QUERIES_SHARED_ROLES)."""
    return query.owner is not None and bool(shared_roles.intersection(query.owner.roles))


def visible(query: VerifiedQuery, reader: Reader | None, settings: Settings) -> bool:
    """Whether ``reader`` may see and reuse the query.

    Without Easy Auth the function key is the only gate: everything is visible. With it, a query is visible to
    its owner, to everyone when its owner holds a shared role, and to the admin role; a reader unknown to Easy
    Auth (a job started before it was turned on) sees only the shared ones, and an ownerless query (saved
    before) only admins see.
    """
    if not settings.website_auth_enabled:
        return True
    if shared(query, settings.shared_roles):
        return True
    if reader is None:
        return False
    if settings.jobs_admin_role in reader.roles:
        return True
    return query.owner is not None and query.owner.id == reader.id


def may_change(query: VerifiedQuery, reader: Reader | None, settings: Settings) -> bool:
    """Whether ``reader`` may edit or retire the query: its owner or an admin (seeing a shared one is not enough)."""
    if not settings.website_auth_enabled:
        return True
    if reader is None:
        return False
    if settings.jobs_admin_role in reader.roles:
        return True
    return query.owner is not None and query.owner.id == reader.id


def _normal(text: str) -> str:
    return " ".join(text.casefold().split()).strip(" ?.!")


def _pattern(template: str) -> re.Pattern[str]:
    """The template as a regular expression over normalised text: literal parts exact, each slot a value."""
    names = SLOT.findall(template)
    pieces = [re.escape(re.sub(r"\s+", " ", p)) for p in SLOT.sub("\x00", _normal(template)).split("\x00")]
    regex = "".join(p + (f"(?P<{names[i]}>{VALUE})" if i < len(names) else "") for i, p in enumerate(pieces))
    return re.compile(regex.replace(r"\ ", r"\s+"))


def literal(value: str) -> str:
    """A value as a SQL string literal (the value pattern has no quotes; doubling them is belt and braces)."""
    return "'" + value.replace("'", "''") + "'"


def match(question: str, queries: list[VerifiedQuery], vocab: Vocabulary | None = None) -> Match | None:
    """The first live verified query the question matches, its slots filled, or None.

    The template first (its literal words in order); then a rewording (shared/providers/sql/paraphrase.py):
    the question names one allowed value per slot, and its other content words, once phrases, synonyms
    (``vocab``: the catalog's) and inflections are made canonical, are the template's, apart from filler. So
    "Q2" never matches a "Q3" template, nor "average" a "total" one, nor "not ... through Online" an Online one.
    """
    live = [q for q in queries if not q.retired]
    for q in live:
        found = _pattern(q.question).fullmatch(_normal(question))
        values = _canonical(q, {name: found.group(name).strip() for name in q.variables}) if found else None
        if values is not None:
            return Match(query=q, values=values, sql=fill(q.sql, values))
    words = vocab or Vocabulary()
    for q in live:
        values = reworded(question, q.question, {n: s.values for n, s in q.variables.items()}, words)
        if values is not None:
            return Match(query=q, values=values, sql=fill(q.sql, values))
    return None


def _canonical(q: VerifiedQuery, given: dict[str, str]) -> dict[str, str] | None:
    """Each slot's value as the allowed list spells it; None when one is not allowed."""
    values: dict[str, str] = {}
    for name, slot in q.variables.items():
        canonical = next((v for v in slot.values if v.casefold() == given[name].casefold()), None)
        if canonical is None:
            return None
        values[name] = canonical
    return values


def fill(sql: str, values: dict[str, str]) -> str:
    """The statement with each slot replaced by its value as a SQL string literal."""
    return SLOT.sub(lambda m: literal(values[m.group(1)]), sql)


def sample_sql(query: VerifiedQueryIn) -> str:
    """The statement with each slot set to its first allowed value (to guard it when it is saved)."""
    return fill(query.sql, {name: slot.values[0] for name, slot in query.variables.items()})


def now() -> str:
    """The approval time as stored (UTC, ISO 8601)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# --- the store ------------------------------------------------------------------------------------------


class VerifiedQueryStore:
    """Verified queries as rows of one table (the definitions' storage account)."""

    def __init__(self, table: TableClient) -> None:
        self.table = table
        self._ready = False
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        from azure.core.exceptions import ResourceExistsError

        with self._lock:
            if self._ready:
                return
            try:
                self.table.create_table()
            except ResourceExistsError:
                pass
            self._ready = True

    def list(self, *, include_retired: bool = False) -> list[VerifiedQuery]:
        """Every verified query (the live ones unless asked), by id."""
        self._ensure()
        rows = self.table.query_entities(f"PartitionKey eq '{PARTITION}'", results_per_page=MAX_QUERIES)
        out = [VerifiedQuery.model_validate_json(r["body"]) for r in rows]
        return sorted((q for q in out if include_retired or not q.retired), key=lambda q: q.id)

    def get(self, query_id: str) -> VerifiedQuery | None:
        """One verified query (retired ones too), or None."""
        from azure.core.exceptions import ResourceNotFoundError

        self._ensure()
        try:
            row = self.table.get_entity(PARTITION, query_id)
        except ResourceNotFoundError:
            return None
        return VerifiedQuery.model_validate_json(row["body"])

    def put(self, query: VerifiedQuery, *, create: bool) -> bool:
        """Save a query; with ``create`` only when the id is free (False when it is taken)."""
        from azure.core.exceptions import ResourceExistsError
        from azure.data.tables import UpdateMode

        self._ensure()
        entity = {"PartitionKey": PARTITION, "RowKey": query.id, "body": query.model_dump_json()}
        if create:
            try:
                self.table.create_entity(entity)
            except ResourceExistsError:
                return False
            return True
        self.table.upsert_entity(entity, mode=UpdateMode.REPLACE)
        return True


def catalog_version(catalog_json: str) -> str:
    """A short digest of the catalog a query was verified against."""
    import hashlib

    return hashlib.sha256(catalog_json.encode("utf-8")).hexdigest()[:12]


def build_verified_store(settings: Settings) -> VerifiedQueryStore | None:
    """The store on the definitions' table service, or None when none is configured (no verified queries then)."""
    import os

    from azure.data.tables import TableServiceClient

    name = f"{settings.definitions_table}verified"
    if settings.definitions_table_endpoint or os.environ.get("AzureWebJobsStorage__tableServiceUri"):
        from azure.identity import DefaultAzureCredential

        endpoint = settings.definitions_table_endpoint or os.environ["AzureWebJobsStorage__tableServiceUri"]
        credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        service = TableServiceClient(endpoint=endpoint, credential=credential, **_CLIENT)
    elif settings.azurewebjobsstorage is not None:
        try:
            service = TableServiceClient.from_connection_string(
                settings.azurewebjobsstorage.get_secret_value(), **_CLIENT
            )
        except ValueError:
            return None
    else:
        return None
    return VerifiedQueryStore(service.get_table_client(name))


_stores: dict[str, VerifiedQueryStore | None] = {}
_stores_lock = threading.Lock()


def get_verified_store(settings: Settings) -> VerifiedQueryStore | None:
    """The process-wide store for these settings, built once (None when no table service is configured)."""
    key = json.dumps(
        [settings.definitions_table, settings.definitions_table_endpoint, bool(settings.azurewebjobsstorage)]
    )
    with _stores_lock:
        if key not in _stores:
            _stores[key] = build_verified_store(settings)
        return _stores[key]
