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

from shared.providers.sql.catalog import load_catalog
from shared.providers.sql.sampledata import sensitive_db_path
from shared.providers.sql.sqlite import SqliteOdbcDatabase
from shared.runtime.sqlguard.guard import GuardReason, GuardResult, guard_sql

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
    # A statement the guard accepts over a sensitive table runs as an approved one (its file is attached).
    sensitive = bool(set(entry.get("allowed_tables", [])) & load_catalog().sensitive_tables())
    rows = sample_db.execute(result.sql, max_rows=max_rows, timeout_s=10, sensitive=sensitive)
    with sqlite3.connect(sample_db_path) as conn:
        conn.execute("ATTACH DATABASE ? AS sensitive", (str(sensitive_db_path(sample_db_path)),))
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


# -- hostile corpus: comments, depth, string growth, T-SQL hints, functions, bind parameters (issue 8 §2) --

HOSTILE: list[dict[str, Any]] = json.loads((Path(__file__).parent / "hostile_corpus.json").read_text(encoding="utf-8"))


def _hostile_sql(entry: dict[str, Any]) -> str:
    """An entry's SQL: ``sql``, or ``sql_parts`` where ``[text, n]`` stands for ``text`` repeated n times."""
    if "sql" in entry:
        return str(entry["sql"])
    return "".join(p if isinstance(p, str) else p[0] * p[1] for p in entry["sql_parts"])


def test_hostile_corpus_covers_every_class() -> None:
    ids = [e["id"] for e in HOSTILE]
    assert len(ids) == len(set(ids)) and len(HOSTILE) >= 100
    assert not set(ids) & {e["id"] for e in CORPUS}
    classes = {(e["class"], e["dialect"], e["expect"]) for e in HOSTILE}
    for cls in ("comment", "depth", "amplify"):
        for dialect in ("sqlite", "tsql"):
            assert (cls, dialect, "reject") in classes and (cls, dialect, "accept") in classes, (cls, dialect)
    assert {("tsql-hint", "tsql", "reject"), ("udf", "tsql", "reject"), ("param", "tsql", "reject")} <= classes
    assert sum(1 for e in HOSTILE if e.get("heavy")) >= 8
    reasons = {e["reason"] for e in HOSTILE if e["expect"] == "reject"}
    assert {"AMBIGUOUS_COMMENT", "TOO_DEEP", "RESOURCE_LIMIT", "HINT_NOT_ALLOWED", "FUNCTION_NOT_ALLOWED"} <= reasons


@pytest.mark.parametrize("entry", HOSTILE, ids=[e["id"] for e in HOSTILE])
def test_hostile_corpus_verdict(entry: dict[str, Any]) -> None:
    sql = _hostile_sql(entry)
    result = _guard(entry, sql)
    if entry["expect"] == "reject":
        assert not result.accepted, f"accepted: {result.sql}"
        assert result.reason_code == entry["reason"], result.message
        assert result.sql is None and result.message
        return
    assert result.accepted, f"{result.reason_code}: {result.message}"
    assert result.sql is not None and result.row_cap == entry["cap"]
    tokens = sqlglot.Dialect.get_or_raise(entry["dialect"]).tokenize(result.sql)
    assert not any(t.comments for t in tokens)
    assert "/*" not in result.sql and "--" not in result.sql
    again = _guard(entry, result.sql)
    assert again.accepted and again.sql == result.sql


# "runs": false marks statements the guard accepts but SQLite itself refuses (its expression depth limit).
HOSTILE_LIGHT_SQLITE = [
    e for e in HOSTILE
    if e["dialect"] == "sqlite" and e["expect"] == "accept" and not e.get("heavy") and e.get("runs", True)
]  # fmt: skip


@pytest.mark.parametrize("entry", HOSTILE_LIGHT_SQLITE, ids=[e["id"] for e in HOSTILE_LIGHT_SQLITE])
def test_accepted_hostile_sqlite_statements_run(entry: dict[str, Any], sample_db: SqliteOdbcDatabase) -> None:
    result = _guard(entry, _hostile_sql(entry))
    assert result.sql is not None
    rows = sample_db.execute(result.sql, max_rows=DEFAULT_MAX_ROWS, timeout_s=10)
    assert len(rows.rows) <= DEFAULT_MAX_ROWS


@pytest.mark.parametrize(
    ("terminator", "accepted"),
    [("\n", True), ("\r\n", True), ("\r", False), ("\v", False), ("\f", False), ("\x85", False),
     ("\u2028", False), ("\u2029", False)],
)  # fmt: skip
@pytest.mark.parametrize("dialect", ["sqlite", "tsql"])
def test_line_comment_terminators(terminator: str, accepted: bool, dialect: str) -> None:
    sql = f"SELECT order_id FROM orders -- note{terminator}WHERE order_id < 3"
    result = guard_sql(sql, dialect=dialect, allowed_tables={"orders"}, max_rows=5)
    assert result.accepted == accepted, result.message
    if accepted:
        # The comment is gone and what followed it is kept: the WHERE clause after the line end.
        assert result.sql is not None and "note" not in result.sql and "order_id < 3" in result.sql
    else:
        assert result.reason_code == GuardReason.AMBIGUOUS_COMMENT and "--" in result.message


@pytest.mark.parametrize("dialect", ["sqlite", "tsql"])
def test_block_comment_tricks(dialect: str) -> None:
    def verdict(sql: str) -> GuardResult:
        return guard_sql(sql, dialect=dialect, allowed_tables={"orders"}, max_rows=5)

    assert verdict("SELECT 1 /*! UNION SELECT 2 */ AS x").reason_code == GuardReason.AMBIGUOUS_COMMENT
    assert verdict("SELECT 1 /*+ hint */ AS x").reason_code == GuardReason.AMBIGUOUS_COMMENT
    nested = verdict("SELECT 1 AS x /* a /* b */ FROM orders")
    assert not nested.accepted and nested.reason_code in {GuardReason.AMBIGUOUS_COMMENT, GuardReason.PARSE_ERROR}
    harmless = verdict("SELECT 1 AS x /* CR\r LS\u2028 PS\u2029 NEL\x85 */ FROM orders")
    assert harmless.accepted and harmless.sql == ("SELECT 1 AS x FROM orders LIMIT 6" if dialect == "sqlite"
                                                  else "SELECT TOP 6 1 AS x FROM orders")  # fmt: skip


def _nest(shape: str, n: int) -> str:
    shapes = {
        "paren": "SELECT " + "(" * n + "1" + ")" * n,
        "not": "SELECT " + "(NOT " * n + "1" + ")" * n,
        "case": "SELECT " + "(CASE WHEN 1 = 1 THEN " * n + "1" + " END)" * n,
        "subquery": "SELECT * FROM " + "(SELECT * FROM " * n + "orders" + ") x" * n,
        "scalar": "SELECT " + "(SELECT " * n + "1" + ")" * n,
        "function": "SELECT " + "upper(" * n + "'a'" + ")" * n,
        "prefix": "SELECT " + "(" + "- " * 30 + "" * n + "(NOT " * n + "1" + ")" * (n + 1),
    }
    return shapes[shape]


@pytest.mark.parametrize("shape", ["paren", "not", "case", "subquery", "scalar", "function", "prefix"])
@pytest.mark.parametrize("dialect", ["sqlite", "tsql"])
def test_deep_nesting_is_rejected_never_raised(shape: str, dialect: str) -> None:
    per_level = 2 if shape == "case" else 1  # "(CASE" opens two levels
    for n in (5, 9, 10, 11, 19, 20, 21, 25, 40, 100, 1000):
        result = guard_sql(_nest(shape, n)[:20_000], dialect=dialect, allowed_tables={"orders"}, max_rows=5)
        depth = n * per_level + (1 if shape == "prefix" else 0)
        if depth <= 20:
            assert result.accepted, (n, result.message)
        else:
            assert result.reason_code == GuardReason.TOO_DEEP, (n, result.reason_code, result.message)


def test_recursion_error_is_a_rejection_even_with_a_deep_caller() -> None:
    def deep_call(depth: int) -> GuardResult:
        if depth:
            return deep_call(depth - 1)
        return guard_sql(_nest("not", 20), dialect="sqlite", allowed_tables=set(), max_rows=5)

    import sys

    result = deep_call(sys.getrecursionlimit() - 300)
    assert not result.accepted and result.reason_code == GuardReason.TOO_DEEP


def test_string_growth_is_bounded_through_ctes_and_subqueries() -> None:
    def verdict(sql: str, dialect: str = "sqlite") -> GuardResult:
        return guard_sql(sql, dialect=dialect, allowed_tables={"customers"}, max_rows=5)

    eight = "name || name || name || name || name || name || name || name"
    assert verdict(f"SELECT {eight} AS s FROM customers").accepted
    assert verdict(f"SELECT s || s || s || s AS t FROM (SELECT {eight} AS s FROM customers)").accepted
    five = verdict(f"SELECT s || s || s || s || s AS t FROM (SELECT {eight} AS s FROM customers)")
    assert five.reason_code == GuardReason.RESOURCE_LIMIT and "40 x" in five.message
    star = verdict(f"SELECT x || x || x || x || x AS t FROM (SELECT * FROM (SELECT {eight} AS x FROM customers) a) b")
    assert star.reason_code == GuardReason.RESOURCE_LIMIT
    cte = verdict(f"WITH a AS (SELECT {eight} AS s FROM customers) SELECT s || s || s || s || s AS t FROM a")
    assert cte.reason_code == GuardReason.RESOURCE_LIMIT
    # Constants: a literal may be repeated up to 64K characters in all, however it is built.
    assert verdict("SELECT REPLICATE('x', 1000) AS s", "tsql").accepted
    assert verdict("SELECT REPLICATE(REPLICATE('x', 1000), 1000) AS s", "tsql").reason_code == "RESOURCE_LIMIT"
    assert verdict("SELECT printf('%1000s|%1000s', 'a', 'b') AS s").accepted
    assert verdict("SELECT printf('%.5s', name) AS s FROM customers").accepted


def test_recursive_cte_rules_name_the_cte() -> None:
    def verdict(sql: str, dialect: str = "sqlite") -> GuardResult:
        return guard_sql(sql, dialect=dialect, allowed_tables={"customers", "regions"}, max_rows=5)

    doubling = verdict("WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT s FROM r")
    assert doubling.reason_code == GuardReason.RESOURCE_LIMIT and "recursive CTE 'r'" in doubling.message
    join = verdict("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r, regions) SELECT i FROM r")
    assert "no join" in join.message
    distinct = verdict("WITH RECURSIVE r(i) AS (SELECT 1 UNION SELECT i + 1 FROM r) SELECT i FROM r")
    assert "UNION ALL" in distinct.message
    counter = verdict("WITH n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 9) SELECT i FROM n", "tsql")
    assert counter.accepted
    grow = verdict("WITH n(s) AS (SELECT name FROM customers UNION ALL SELECT s + 'x' FROM n) SELECT s FROM n", "tsql")
    assert grow.reason_code == GuardReason.RESOURCE_LIMIT


def test_function_and_hint_messages_name_the_culprit() -> None:
    tsql = {"orders"}
    udf = guard_sql("SELECT dbo.calc(order_id) AS c FROM orders", dialect="tsql", allowed_tables=tsql, max_rows=5)
    assert udf.reason_code == GuardReason.FUNCTION_NOT_ALLOWED and "dbo.calc" in udf.message
    unknown = guard_sql("SELECT frobnicate(order_id) AS c FROM orders", dialect="sqlite", allowed_tables=tsql,
                        max_rows=5)  # fmt: skip
    assert unknown.reason_code == GuardReason.FUNCTION_NOT_ALLOWED and "frobnicate()" in unknown.message
    hint = guard_sql("SELECT order_id FROM orders WITH (NOLOCK, FORCESEEK)", dialect="tsql", allowed_tables=tsql,
                     max_rows=5)  # fmt: skip
    assert hint.reason_code == GuardReason.HINT_NOT_ALLOWED and "FORCESEEK" in hint.message
    printf = guard_sql("SELECT printf('%*d', 9, 1) AS s", dialect="sqlite", allowed_tables=tsql, max_rows=5)
    assert printf.reason_code == GuardReason.RESOURCE_LIMIT and "'%*d'" in printf.message


def test_guard_never_raises_on_mangled_hostile_input() -> None:
    for entry in HOSTILE:
        sql = _hostile_sql(entry)[:4000]
        variants = [sql[:cut] for cut in range(1, len(sql), max(1, len(sql) // 6))]
        variants += [sql.replace(" ", ""), sql + ")", "(" + sql, sql.replace("'", ""), sql.replace("\n", "\r")]
        for variant in variants:
            result = _guard(entry, variant)
            assert result.accepted == (result.sql is not None)
