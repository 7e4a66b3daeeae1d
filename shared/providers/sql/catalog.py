"""The semantic catalog of the SQL database (``data/catalog.json``): tables, metrics, dimensions.

The catalog is what the SQL writers (LLM or offline) know about the data: table and column
descriptions, business metrics as SQL expressions, dimensions to group and filter by, synonyms for
business words, and the join paths between tables. It also defines the default SQL allow-list
(the non-sensitive tables) and marks sensitive tables.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.runtime.settings import DATA_DIR

CATALOG_PATH = DATA_DIR / "catalog.json"
# The dialects of the database family's members (shared/providers/sql/family.py): each needs its time grains.
DIALECTS = ("sqlite", "tsql", "postgres")
TimeGrain = Literal["year", "quarter", "month"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CatalogColumn(_Model):
    """One column of a table."""

    name: str
    type: str
    description: str
    sensitive: bool = False
    values: list[str] = Field(default_factory=list)


class CatalogTable(_Model):
    """One table (or view) the SQL step may read."""

    name: str
    description: str
    sensitive: bool = False
    primary_key: list[str] = Field(default_factory=list)
    columns: list[CatalogColumn]

    def column(self, name: str) -> CatalogColumn | None:
        """The column called ``name`` (case-insensitive), if any."""
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


class JoinPath(_Model):
    """A many-to-one join from ``from_table`` to ``to_table``."""

    from_table: str = Field(alias="from")
    to_table: str = Field(alias="to")
    on: str


class Fact(_Model):
    """The row grain a metric aggregates over: a base table, optional extra joins and its date column."""

    name: str
    description: str
    table: str
    extra_joins: list[str] = Field(default_factory=list)
    time_column: str
    # The metric a question about this fact's rows counts when it names no metric ("return reasons").
    default_metric: str | None = None


class Metric(_Model):
    """A business measure as an aggregate SQL expression over a fact."""

    name: str
    description: str
    sql: str
    fact: str
    format: Literal["currency", "count", "ratio", "number"] = "number"
    aliases: list[str] = Field(default_factory=list)


class Dimension(_Model):
    """Something to group or filter by: a column expression, or a time grain of the metric's date."""

    name: str
    description: str
    sql: str | None = None
    table: str | None = None
    time_grain: TimeGrain | None = None
    aliases: list[str] = Field(default_factory=list)
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _column_or_grain(self) -> Dimension:
        if (self.sql is None) == (self.time_grain is None):
            raise ValueError(f"dimension {self.name!r} needs exactly one of sql or time_grain")
        if self.sql is not None and self.table is None:
            raise ValueError(f"dimension {self.name!r} needs the table its sql reads")
        return self


class DataPeriod(_Model):
    """The dates the data covers; relative time words ("last quarter") resolve against its end."""

    start: str
    end: str


class Catalog(_Model):
    """The whole semantic catalog."""

    version: int
    description: str
    data_period: DataPeriod
    tables: list[CatalogTable]
    join_paths: list[JoinPath]
    facts: list[Fact]
    metrics: list[Metric]
    dimensions: list[Dimension]
    time_grains: dict[str, dict[TimeGrain, str]]
    synonyms: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        names = {t.name.lower() for t in self.tables}
        if len(names) != len(self.tables):
            raise ValueError("duplicate table names in the catalog")
        for join in self.join_paths:
            for table in (join.from_table, join.to_table):
                if table.lower() not in names:
                    raise ValueError(f"join path names unknown table {table!r}")
        facts = {f.name for f in self.facts}
        for fact in self.facts:
            if fact.table.lower() not in names:
                raise ValueError(f"fact {fact.name!r} names unknown table {fact.table!r}")
        for metric in self.metrics:
            if metric.fact not in facts:
                raise ValueError(f"metric {metric.name!r} names unknown fact {metric.fact!r}")
        metric_names = {m.name for m in self.metrics}
        for fact in self.facts:
            if fact.default_metric is not None and fact.default_metric not in metric_names:
                raise ValueError(f"fact {fact.name!r} names unknown default metric {fact.default_metric!r}")
        for dim in self.dimensions:
            if dim.table is not None and dim.table.lower() not in names:
                raise ValueError(f"dimension {dim.name!r} names unknown table {dim.table!r}")
        for dialect in DIALECTS:
            grains = self.time_grains.get(dialect, {})
            missing = {"year", "quarter", "month"} - set(grains)
            if missing:
                raise ValueError(f"time_grains for {dialect} miss {sorted(missing)}")
        return self

    # -- look-ups ----------------------------------------------------------------------------------

    def table(self, name: str) -> CatalogTable | None:
        """The table called ``name``; schema prefixes (``dbo.``, ``main.``) and case are ignored."""
        bare = _bare_name(name)
        return next((t for t in self.tables if t.name.lower() == bare), None)

    def metric(self, name: str) -> Metric | None:
        """The metric called ``name``."""
        return next((m for m in self.metrics if m.name == name), None)

    def dimension(self, name: str) -> Dimension | None:
        """The dimension called ``name``."""
        return next((d for d in self.dimensions if d.name == name), None)

    def fact(self, name: str) -> Fact | None:
        """The fact called ``name``."""
        return next((f for f in self.facts if f.name == name), None)

    def allowed_tables(self, *, include_sensitive: bool = False) -> set[str]:
        """The default SQL allow-list: every catalog table, sensitive ones only when asked for."""
        return {t.name for t in self.tables if include_sensitive or not t.sensitive}

    def columns(self) -> dict[str, list[str]]:
        """Each table's column names, for the guard's column check."""
        return {t.name: [c.name for c in t.columns] for t in self.tables}

    def sensitive_tables(self) -> set[str]:
        """Tables marked sensitive (personal data)."""
        return {t.name for t in self.tables if t.sensitive}

    def is_sensitive(self, name: str) -> bool:
        """Whether ``name`` (possibly schema-qualified) is a sensitive table."""
        table = self.table(name)
        return bool(table and table.sensitive)

    def time_expression(self, grain: TimeGrain, date_sql: str, dialect: str) -> str:
        """The SQL for a time grain (year, quarter, month) of a date expression in a dialect."""
        try:
            template = self.time_grains[dialect][grain]
        except KeyError as exc:
            raise ValueError(f"no {grain} expression for dialect {dialect!r}") from exc
        return template.replace("{date}", date_sql)

    # -- prompt rendering ----------------------------------------------------------------------------

    def prompt_view(self, dialect: str | None = None) -> dict[str, Any]:
        """A compact dict of the catalog for LLM prompts (sensitive tables named, never described)."""
        dialects = [dialect] if dialect in DIALECTS else list(DIALECTS)
        tables = []
        for t in self.tables:
            if t.sensitive:
                continue
            cols = []
            for c in t.columns:
                text = f"{c.name} {c.type}: {c.description}"
                if c.values:
                    text += f" Values: {', '.join(c.values)}."
                cols.append(text)
            tables.append({"name": t.name, "description": t.description, "columns": cols})
        return {
            "description": self.description,
            "data_period": self.data_period.model_dump(),
            "tables": tables,
            "restricted_tables": sorted(self.sensitive_tables()),
            "joins": [j.on for j in self.join_paths if not self._touches_sensitive(j)],
            "metrics": [{"name": m.name, "sql": m.sql, "description": m.description} for m in self.metrics],
            "dimensions": [
                {"name": d.name, "sql": d.sql or f"{d.time_grain} of the metric's date"} for d in self.dimensions
            ],
            "time_grains": {d: dict(self.time_grains[d]) for d in dialects},
            "synonyms": dict(self.synonyms),
            "notes": list(self.notes),
        }

    def _touches_sensitive(self, join: JoinPath) -> bool:
        return self.is_sensitive(join.from_table) or self.is_sensitive(join.to_table)


def _bare_name(name: str) -> str:
    parts = [p.strip().strip('[]"`') for p in name.split(".")]
    return parts[-1].lower()


@lru_cache(maxsize=4)
def _load(path: Path) -> Catalog:
    return Catalog.model_validate_json(path.read_text(encoding="utf-8"))


def load_catalog(path: Path | None = None) -> Catalog:
    """Load and validate the catalog (default ``data/catalog.json``); cached per path."""
    return _load(Path(path or CATALOG_PATH).resolve())
