"""Each ended job's cost, summed once and kept, so the job list shows it without building a ledger per row.

A summary is written once, the first time the job is seen ended (api/job_costs.py: the job view, the job list,
the cost timer), from the same ledger as the view's ``cost`` (shared/runtime/ledger.py); later reads only
look it up. Kept where the artifacts are (``ARTIFACT_STORE``): one SQLite file beside the artifacts' file,
or a blob ``<job id>/cost.json`` in the artifacts' container.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from shared.runtime.artifacts import store_kind
from shared.runtime.localstore import BLOB_TIMEOUT_S, ContainerOnce, SqliteFile, blob_container

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

# A list page looks up at most this many summaries (the API's page limit is 100).
MAX_LOOKUP = 200


class CostSummary(BaseModel):
    """What the job list shows of an ended job's ledger: the priced total and how many meters had no price."""

    total: float = Field(ge=0)
    currency: str = Field(max_length=8)
    # Meters with a quantity but no price: the total leaves them out (never counted as 0).
    unknown: int = Field(ge=0)
    complete: bool
    status: str = Field(max_length=40)
    price_table: str | None = Field(default=None, max_length=40)


def summary_of(cost: dict[str, Any], status: str) -> CostSummary | None:
    """The summary of a view's ``cost``; None when it has no total (the price table could not be read)."""
    if not isinstance(cost, dict) or cost.get("total") is None:
        return None
    table = cost.get("price_table")
    return CostSummary(
        total=float(cost["total"]),
        currency=str(cost.get("currency") or "USD"),
        unknown=len(cost.get("unknown") or []),
        complete=bool(cost.get("complete")),
        status=status,
        price_table=str(table.get("version")) if isinstance(table, dict) and table.get("version") else None,
    )


class CostSummaries(Protocol):
    """Where ended jobs' cost summaries are kept."""

    def get_many(self, job_ids: list[str]) -> dict[str, CostSummary]:
        """The summaries kept for these jobs (absent ones are left out)."""
        ...

    def add(self, job_id: str, summary: CostSummary) -> bool:
        """Keep a job's summary unless one is kept already; whether this call kept it."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS cost_summaries (
    job_id TEXT PRIMARY KEY,
    summary TEXT NOT NULL
)
"""


def _parse(text: str | bytes) -> CostSummary | None:
    try:
        return CostSummary.model_validate_json(text)
    except ValidationError:
        return None


class SqliteCostSummaries:
    """One SQLite file; one query per page of the list."""

    def __init__(self, path: Path) -> None:
        self._file = SqliteFile(path, _SCHEMA, synchronous="NORMAL")

    def get_many(self, job_ids: list[str]) -> dict[str, CostSummary]:
        """The summaries of these jobs, in one query."""
        ids = list(dict.fromkeys(job_ids))[:MAX_LOOKUP]
        if not ids:
            return {}
        conn = self._file.connect()
        try:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(f"SELECT job_id, summary FROM cost_summaries WHERE job_id IN ({marks})", ids).fetchall()
        finally:
            conn.close()
        found = {str(job_id): _parse(text) for job_id, text in rows}
        return {job_id: summary for job_id, summary in found.items() if summary is not None}

    def add(self, job_id: str, summary: CostSummary) -> bool:
        """Insert unless present (the first writer wins)."""
        conn = self._file.connect()
        try:
            cur = conn.execute(
                "INSERT OR IGNORE INTO cost_summaries (job_id, summary) VALUES (?, ?)",
                (job_id, summary.model_dump_json()),
            )
            return cur.rowcount == 1
        finally:
            conn.close()


class BlobCostSummaries:
    """Blobs ``<job id>/cost.json`` in the artifacts' container."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self._container = ContainerOnce(container)

    def get_many(self, job_ids: list[str]) -> dict[str, CostSummary]:
        """One small GET per job (a list page holds at most 100)."""
        from azure.core.exceptions import ResourceNotFoundError

        found: dict[str, CostSummary] = {}
        for job_id in list(dict.fromkeys(job_ids))[:MAX_LOOKUP]:
            try:
                data = self.container.get_blob_client(f"{job_id}/cost.json").download_blob(timeout=BLOB_TIMEOUT_S)
                summary = _parse(data.readall())
            except ResourceNotFoundError:
                continue
            if summary is not None:
                found[job_id] = summary
        return found

    def add(self, job_id: str, summary: CostSummary) -> bool:
        """Upload unless the blob exists (the first writer wins)."""
        from azure.core.exceptions import ResourceExistsError

        self._container.ensure()
        blob = self.container.get_blob_client(f"{job_id}/cost.json")
        try:
            blob.upload_blob(summary.model_dump_json().encode(), overwrite=False, timeout=BLOB_TIMEOUT_S)
        except ResourceExistsError:
            return False
        return True


_stores: dict[tuple[str, str], CostSummaries] = {}
_lock = threading.Lock()


def summaries_path(settings: Settings) -> Path:
    """The local file: beside the artifacts' file."""
    return Path(settings.artifact_path).with_name("cost_summaries.sqlite3")


def get_cost_summaries(settings: Settings) -> CostSummaries:
    """The process-wide store for these settings (the artifacts' kind of store)."""
    import os

    kind = store_kind(settings)
    key = (kind, str(settings.artifact_path))
    with _lock:
        store = _stores.get(key)
        if store is None:
            if kind == "azure_blob":
                container = blob_container(
                    settings.artifact_container,
                    store="ARTIFACT_STORE=azure_blob",
                    blob_service_uri=os.environ.get("AzureWebJobsStorage__blobServiceUri"),
                    client_id=settings.azure_client_id,
                )
                store = BlobCostSummaries(container)
            else:
                store = SqliteCostSummaries(summaries_path(settings))
            _stores[key] = store
    return store


def as_json(summary: CostSummary | None) -> dict[str, Any] | None:
    """A summary as the job list's ``cost`` (None: not ended yet, or not summed yet)."""
    return summary.model_dump(mode="json") if summary is not None else None


def reset_cost_summaries() -> None:
    """Forget built stores (tests, or after a settings change)."""
    with _lock:
        _stores.clear()
