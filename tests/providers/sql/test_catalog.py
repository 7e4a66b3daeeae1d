"""The semantic catalog matches the sample database and both schemas, and renders a small prompt view."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pydantic
import pytest
import sqlglot
from sqlglot import exp

import shared.providers.sql.sampledata as sampledata
from shared.providers.sql.catalog import CATALOG_PATH, Catalog, load_catalog
from shared.providers.sql.sqlite import SqliteOdbcDatabase


def _db_columns(path: Path) -> dict[str, list[str]]:
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")]  # fmt: skip
        return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}


def test_catalog_matches_the_sqlite_database(sample_db_path: Path) -> None:
    catalog = load_catalog()
    # Sensitive tables live in the partner file, attached only for approved statements.
    db = _db_columns(sample_db_path) | _db_columns(sampledata.sensitive_db_path(sample_db_path))
    assert {t.name for t in catalog.tables} == set(db)
    for table in catalog.tables:
        assert [c.name for c in table.columns] == db[table.name], table.name


def test_catalog_matches_the_tsql_schema() -> None:
    catalog = load_catalog()
    found: dict[str, list[str]] = {}
    for stmt in sqlglot.parse(sampledata.TSQL_SCHEMA.read_text(), read="tsql"):
        if isinstance(stmt, exp.Create) and stmt.kind == "TABLE":
            schema = stmt.this
            found[schema.this.name] = [c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)]
    assert found == {t.name: [c.name for c in t.columns] for t in catalog.tables}


def test_listed_values_are_the_distinct_values_in_the_data(sample_db_path: Path) -> None:
    catalog = load_catalog()
    with sqlite3.connect(sample_db_path) as conn:
        for dim in catalog.dimensions:
            if dim.values:
                assert dim.sql is not None
                table_name, column = dim.sql.split(".")
                actual = {r[0] for r in conn.execute(f"SELECT DISTINCT {column} FROM {table_name}")}
                assert actual == set(dim.values), dim.name
        for table in catalog.tables:
            for col in table.columns:
                if col.values:
                    actual = {r[0] for r in conn.execute(f"SELECT DISTINCT {col.name} FROM {table.name}")}
                    assert actual == set(col.values), f"{table.name}.{col.name}"


def test_allow_list_and_sensitivity() -> None:
    catalog = load_catalog()
    assert "customer_contacts" not in catalog.allowed_tables()
    assert "customer_contacts" in catalog.allowed_tables(include_sensitive=True)
    assert catalog.sensitive_tables() == {"customer_contacts"}
    assert catalog.is_sensitive("dbo.Customer_Contacts") and catalog.is_sensitive("[customer_contacts]")
    assert not catalog.is_sensitive("orders") and not catalog.is_sensitive("nope")


def test_prompt_view_is_small_and_hides_sensitive_columns() -> None:
    view = load_catalog().prompt_view()
    text = json.dumps(view)
    print(f"prompt_view: {len(text)} characters")
    assert len(text) < 8000
    assert "email" not in text and "phone" not in text
    assert view["restricted_tables"] == ["customer_contacts"]
    assert {m["name"] for m in view["metrics"]} >= {"revenue", "return_count", "return_rate"}
    assert set(load_catalog().prompt_view("tsql")["time_grains"]) == {"tsql"}


def test_time_grains_run_on_sqlite(sample_db: SqliteOdbcDatabase) -> None:
    catalog = load_catalog()
    date = "'2025-08-15'"
    parts = [f"{catalog.time_expression(g, date, 'sqlite')} AS {g}" for g in ("year", "quarter", "month")]
    rows = sample_db.execute("SELECT " + ", ".join(parts), max_rows=1, timeout_s=5)
    assert rows.rows == [[2025, 3, "2025-08"]]
    assert catalog.time_expression("quarter", "o.d", "tsql") == "DATEPART(quarter, o.d)"
    with pytest.raises(ValueError):
        catalog.time_expression("month", "d", "oracle")


def test_metric_expressions_run_over_their_facts(sample_db: SqliteOdbcDatabase) -> None:
    catalog = load_catalog()
    joins = {(j.from_table, j.to_table): j.on for j in catalog.join_paths}
    for metric in catalog.metrics:
        fact = catalog.fact(metric.fact)
        assert fact is not None
        sql = f"SELECT {metric.sql} AS v FROM {fact.table}"
        if fact.table == "returns":
            sql += f" JOIN order_items ON {joins[('returns', 'order_items')]}"
        sql += f" JOIN orders ON {joins[('order_items', 'orders')]} " + " ".join(fact.extra_joins)
        rows = sample_db.execute(sql, max_rows=1, timeout_s=10)
        assert isinstance(rows.rows[0][0], int | float) and rows.rows[0][0] > 0, metric.name


def test_invalid_catalog_is_rejected(tmp_path: Path) -> None:
    data = json.loads(CATALOG_PATH.read_text())
    data["metrics"][0]["fact"] = "nope"
    with pytest.raises(pydantic.ValidationError, match="unknown fact"):
        Catalog.model_validate(data)
    path = tmp_path / "catalog.json"
    path.write_text(CATALOG_PATH.read_text())
    assert load_catalog(path) is load_catalog(path)
