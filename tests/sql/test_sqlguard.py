"""The SQL guard against a corpus of hostile, tricky and legitimate statements in both dialects.

Every accepted SQLite statement is also run through the real ODBC runner on the sample database.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from shared.catalog import load_catalog
from shared.sqldb import SqliteOdbcDatabase
from shared.sqlguard import GuardReason, GuardResult, guard_sql

CORPUS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "guard_corpus.json").read_text(encoding="utf-8"))
DEFAULT_ALLOWED = load_catalog().allowed_tables()
DEFAULT_MAX_ROWS = 50


def _guard(entry: dict[str, Any], sql: str | None = None) -> GuardResult:
    return guard_sql(
        entry["sql"] if sql is None else sql,
        dialect=entry["dialect"],
        allowed_tables=set(entry.get("allowed_tables", DEFAULT_ALLOWED)),
        max_rows=entry.get("max_rows", DEFAULT_MAX_ROWS),
        allow_system_catalogs=entry.get("allow_system_catalogs", False),
    )


def _outer_limit(sql: str, dialect: str) -> int | None:
    """The literal row limit on the outermost query, read straight from the sqlglot tree."""
    limit = sqlglot.parse_one(sql, read=dialect).args.get("limit")
    if isinstance(limit, exp.Fetch):
        node = limit.args.get("count")
    elif isinstance(limit, exp.Limit):
        node = limit.expression
    else:
        return None
    return int(node.this) if isinstance(node, exp.Literal) else None


def test_corpus_size_and_shape() -> None:
    ids = [e["id"] for e in CORPUS]
    assert len(ids) == len(set(ids))
    assert len(CORPUS) >= 150
    for dialect in ("sqlite", "tsql"):
        accepted = [e for e in CORPUS if e["dialect"] == dialect and e["expect"] == "accept"]
        rejected = [e for e in CORPUS if e["dialect"] == dialect and e["expect"] == "reject"]
        assert len(accepted) >= 30 and len(rejected) >= 60, dialect
    reasons = {e["reason"] for e in CORPUS if e["expect"] == "reject"}
    assert reasons <= {r.value for r in GuardReason}
    assert len(reasons) >= 14


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_corpus_verdict(entry: dict[str, Any]) -> None:
    result = _guard(entry)
    if entry["expect"] == "reject":
        assert not result.accepted, f"accepted: {result.sql}"
        assert result.reason_code == entry["reason"], result.message
        assert result.sql is None and result.message
        return
    assert result.accepted, f"{result.reason_code}: {result.message}"
    assert result.sql is not None
    assert result.row_cap == entry["cap"]
    assert _outer_limit(result.sql, entry["dialect"]) == entry["cap"]
    # Comments never survive into the SQL that runs.
    tokens = sqlglot.Dialect.get_or_raise(entry["dialect"]).tokenize(result.sql)
    assert not any(t.comments for t in tokens)
    # The rewrite is a fixpoint: guarding the output again changes nothing.
    again = _guard(entry, result.sql)
    assert again.accepted and again.sql == result.sql and again.tables == result.tables


SQLITE_ACCEPTED = [e for e in CORPUS if e["dialect"] == "sqlite" and e["expect"] == "accept"]


@pytest.mark.parametrize("entry", SQLITE_ACCEPTED, ids=[e["id"] for e in SQLITE_ACCEPTED])
def test_accepted_sqlite_statements_run_on_the_sample_db(
    entry: dict[str, Any], sample_db: SqliteOdbcDatabase, sample_db_path: Path
) -> None:
    result = _guard(entry)
    assert result.sql is not None
    max_rows = entry.get("max_rows", DEFAULT_MAX_ROWS)
    rows = sample_db.execute(result.sql, max_rows=max_rows, timeout_s=10)
    with sqlite3.connect(sample_db_path) as conn:
        uncapped = len(conn.execute(entry["sql"]).fetchall())
    # At most max_rows rows come back, and ``truncated`` says exactly whether the query had more.
    assert len(rows.rows) == min(uncapped, max_rows, entry["cap"])
    assert rows.truncated == (min(uncapped, entry["cap"]) > max_rows)
    assert all(name and ")" not in name for name in rows.columns), rows.columns
    json.dumps(rows.rows)


def test_truncated_is_reported_for_a_capped_query(sample_db: SqliteOdbcDatabase) -> None:
    verdict = guard_sql("SELECT order_id FROM orders", dialect="sqlite", allowed_tables={"orders"}, max_rows=10)
    assert verdict.sql == "SELECT order_id FROM orders LIMIT 11" and verdict.row_cap == 11
    rows = sample_db.execute(verdict.sql, max_rows=10, timeout_s=5)
    assert len(rows.rows) == 10 and rows.truncated
    exact = guard_sql("SELECT name FROM regions", dialect="sqlite", allowed_tables={"regions"}, max_rows=4)
    assert exact.sql is not None
    rows = sample_db.execute(exact.sql, max_rows=4, timeout_s=5)
    assert len(rows.rows) == 4 and not rows.truncated


def test_tables_are_reported_normalized() -> None:
    result = guard_sql(
        "WITH x AS (SELECT * FROM Orders) SELECT * FROM x JOIN dbo.REGIONS r ON r.region_id = x.region_id",
        dialect="tsql", allowed_tables={"orders", "regions"}, max_rows=10)  # fmt: skip
    assert result.accepted and result.tables == ["orders", "regions"]
    result = guard_sql("SELECT * FROM sales.orders", dialect="tsql", allowed_tables={"Sales.Orders"}, max_rows=10)
    assert result.accepted and result.tables == ["sales.orders"]


def test_unnamed_output_columns_get_readable_names(sample_db: SqliteOdbcDatabase) -> None:
    result = guard_sql(
        "SELECT r.name, COUNT(*), SUM(oi.quantity * oi.unit_price), COUNT(*) FROM order_items oi "
        "JOIN orders o ON o.order_id = oi.order_id JOIN regions r ON r.region_id = o.region_id GROUP BY r.name",
        dialect="sqlite", allowed_tables=DEFAULT_ALLOWED, max_rows=10)  # fmt: skip
    assert result.sql is not None
    rows = sample_db.execute(result.sql, max_rows=10, timeout_s=10)
    assert rows.columns == ["name", "count", "sum_oi_quantity_oi_unit_price", "count_2"]


def test_dialect_slips_are_noted() -> None:
    top = guard_sql("SELECT TOP 5 * FROM orders", dialect="sqlite", allowed_tables={"orders"}, max_rows=50)
    assert top.sql == "SELECT * FROM orders LIMIT 5" and any("TOP" in n for n in top.notes)
    limit = guard_sql("SELECT * FROM orders LIMIT 5", dialect="tsql", allowed_tables={"orders"}, max_rows=50)
    assert limit.sql == "SELECT TOP 5 * FROM orders" and any("LIMIT" in n for n in limit.notes)


def test_guard_never_raises_on_truncated_or_mangled_input() -> None:
    for entry in CORPUS:
        sql = entry["sql"]
        variants = [sql[:cut] for cut in range(1, len(sql), max(1, len(sql) // 8))]
        variants += [sql.replace(" ", ""), sql.upper(), sql + ")", "(" + sql, sql.replace("'", "")]
        for variant in variants:
            result = _guard(entry, variant)
            assert isinstance(result, GuardResult)
            assert result.accepted == (result.sql is not None)


def test_bad_arguments() -> None:
    assert (
        guard_sql("SELECT 1", dialect="oracle", allowed_tables=set(), max_rows=5).reason_code == "UNSUPPORTED_DIALECT"
    )
    assert guard_sql("x" * 20_001, dialect="sqlite", allowed_tables=set(), max_rows=5).reason_code == "TOO_LONG"
    with pytest.raises(ValueError):
        guard_sql("SELECT 1", dialect="sqlite", allowed_tables=set(), max_rows=0)
