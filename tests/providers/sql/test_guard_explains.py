"""The guard names unknown columns before the database sees them, and says parse errors in plain words."""

from __future__ import annotations

import pytest

from shared.providers.sql.catalog import load_catalog
from shared.runtime.sqlguard.guard import GuardReason, GuardResult, guard_sql

CATALOG = load_catalog()
COLUMNS = CATALOG.columns()
ALLOWED = CATALOG.allowed_tables(include_sensitive=True)


def guard(sql: str, dialect: str = "sqlite", columns: dict[str, list[str]] | None = COLUMNS) -> GuardResult:
    return guard_sql(sql, dialect=dialect, allowed_tables=ALLOWED, max_rows=50, columns=columns)


@pytest.mark.parametrize(
    ("sql", "column", "table"),
    [
        ("SELECT o.bogus FROM orders o", "bogus", "orders"),
        ("SELECT orders.nope FROM orders", "nope", "orders"),
        ("SELECT region_name FROM orders", "region_name", None),
        ("SELECT o.name FROM orders o JOIN regions r ON o.region_id = r.region_id", "name", "orders"),
        ("SELECT COUNT(*) FROM orders WHERE shipped_on > '2025-01-01'", "shipped_on", None),
        ("SELECT c.phone_number FROM customer_contacts c", "phone_number", "customer_contacts"),
    ],
)
@pytest.mark.parametrize("dialect", ["sqlite", "tsql"])
def test_an_unknown_column_is_rejected_naming_it_and_the_real_ones(
    sql: str, column: str, table: str | None, dialect: str
) -> None:
    verdict = guard(sql, dialect)
    assert not verdict.accepted and verdict.reason_code == GuardReason.UNKNOWN_COLUMN, verdict
    assert f"unknown column `{column}`" in verdict.message
    if table:
        assert f"in `{table}`" in verdict.message
    assert "order_id" in verdict.message or "customer_id" in verdict.message  # the columns that do exist


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT r.name, COUNT(*) AS n FROM orders o JOIN regions r ON o.region_id = r.region_id "
        "GROUP BY r.name ORDER BY n DESC",
        "WITH t AS (SELECT region_id, COUNT(*) AS n FROM orders GROUP BY region_id) SELECT region_id, n FROM t",
        "SELECT x.n FROM (SELECT COUNT(*) AS n FROM orders) AS x",
        "SELECT channel, ROW_NUMBER() OVER (PARTITION BY channel ORDER BY order_date) AS rn FROM orders",
        "SELECT * FROM orders WHERE order_id IN (SELECT order_id FROM order_items WHERE quantity > 2)",
        "WITH n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i FROM n",
    ],
)
def test_names_the_statement_defines_itself_are_not_unknown(sql: str) -> None:
    assert guard(sql).accepted, guard(sql)


def test_without_the_catalog_columns_nothing_is_checked() -> None:
    assert guard("SELECT bogus FROM orders", columns=None).accepted


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("SELEC * FROM orders", "something is missing at line 1, column 12"),
        ("SELECT (1 FROM orders", "expected ')' at line 1, column 14"),
        ("SELECT a FROM orders WHERE", "something is missing"),
        ("SELECT 'abc FROM orders", "an unclosed '"),
        ("SELECT [a FROM orders", "an unclosed ["),
    ],
)
def test_a_parse_error_is_said_in_plain_words(sql: str, said: str) -> None:
    verdict = guard(sql)
    assert verdict.reason_code == GuardReason.PARSE_ERROR and said in verdict.message, verdict.message
    for internal in ("<class", "sqlglot", "\x1b", "Required keyword", "Error tokenizing"):
        assert internal not in verdict.message
