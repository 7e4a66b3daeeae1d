"""The database-level barrier for sensitive tables, on its own: no guard, no orchestrator.

Every statement goes straight to ``SqliteOdbcDatabase.execute`` through the real ODBC driver. The
catalog's sensitive tables live in ``<name>-sensitive.db``, attached only for ``sensitive=True``; the
``durable_limits`` extension seals the connection so a statement cannot attach that file itself.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shared.runtime.sqlguard.guard
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.sql import sqlite_limits
from shared.providers.sql.sampledata import sensitive_db_path
from shared.providers.sql.sqlite import SqliteOdbcDatabase


@pytest.fixture(autouse=True)
def _no_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Proof the guard plays no part: any call to it fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the SQL guard must not be involved in the database barrier")

    monkeypatch.setattr(shared.runtime.sqlguard.guard, "guard_sql", refuse)
    yield


def _error(db: SqliteOdbcDatabase, sql: str, **kwargs: Any) -> ProviderError:
    with pytest.raises(ProviderError) as err:
        db.execute(sql, max_rows=500, timeout_s=10, **kwargs)
    return err.value


READS = [
    "SELECT * FROM customer_contacts",
    "SELECT email FROM customer_contacts WHERE customer_id = 1",
    "SELECT COUNT(*) FROM (SELECT email FROM customer_contacts)",
    "SELECT c.name FROM customers c WHERE EXISTS "
    "(SELECT 1 FROM customer_contacts cc WHERE cc.customer_id = c.customer_id)",
    "WITH x AS (SELECT phone FROM customer_contacts) SELECT * FROM x",
    "SELECT c.name, cc.email FROM customers c JOIN customer_contacts cc USING (customer_id)",
    "SELECT email FROM sensitive.customer_contacts",
    'SELECT email FROM "CUSTOMER_CONTACTS"',
    "SELECT name FROM regions UNION ALL SELECT email FROM customer_contacts",
]


@pytest.mark.parametrize("sql", READS)
def test_sensitive_reads_fail_unless_approved(sample_db: SqliteOdbcDatabase, sql: str) -> None:
    err = _error(sample_db, sql)
    assert err.code is ErrorCode.SQL_ERROR
    assert "no such table" in err.message.lower()
    rows = sample_db.execute(sql, max_rows=500, timeout_s=10, sensitive=True)
    assert rows.rows


def test_approved_statement_reads_every_row_unchanged(sample_db: SqliteOdbcDatabase) -> None:
    rows = sample_db.execute(
        "SELECT customer_id, email FROM customer_contacts", max_rows=500, timeout_s=10, sensitive=True
    )
    assert len(rows.rows) == 400 and not rows.truncated and "@" in rows.rows[0][1]


def test_approval_does_not_outlive_its_statement(sample_db: SqliteOdbcDatabase) -> None:
    assert sample_db.execute(
        "SELECT COUNT(*) FROM customer_contacts", max_rows=1, timeout_s=5, sensitive=True
    ).rows == [[400]]
    assert "no such table" in _error(sample_db, "SELECT COUNT(*) FROM customer_contacts").message


def test_metadata_does_not_reveal_the_table_unless_approved(sample_db: SqliteOdbcDatabase) -> None:
    names = sample_db.execute("SELECT name FROM sqlite_master", max_rows=500, timeout_s=5).rows
    assert ["customer_contacts"] not in names
    assert sample_db.execute("SELECT * FROM pragma_table_info('customer_contacts')", max_rows=5, timeout_s=5).rows == []
    assert sample_db.execute("PRAGMA database_list", max_rows=5, timeout_s=5).rows[0][1] == "main"


BYPASSES = [
    # The statement tries to attach the sensitive file itself.
    "ATTACH DATABASE '{uri}' AS s",
    "ATTACH '{path}' AS sensitive",
    # Extension loading would let a statement undo every limit (the driver enables it by default).
    "SELECT load_extension('{ext}')",
    # Raising a cap through a pragma, or creating objects that outlive the check.
    "PRAGMA cache_size = -1000000",
    "PRAGMA main.mmap_size = 1000000000",
    "CREATE TEMP VIEW v AS SELECT 1",
    "CREATE TEMP TABLE t (a)",
    "CREATE VIRTUAL TABLE temp.t USING fts5(a)",
]


@pytest.mark.parametrize("template", BYPASSES)
def test_a_statement_cannot_open_the_barrier_itself(
    sample_db: SqliteOdbcDatabase, sample_db_path: Path, template: str
) -> None:
    partner = sensitive_db_path(sample_db_path)
    sql = template.format(
        uri=f"file:{partner}?mode=ro", path=partner, ext=sqlite_limits.extension_path().with_suffix("")
    )
    err = _error(sample_db, sql)
    assert err.code is ErrorCode.SQL_ERROR
    assert "not authorized" in err.message
    # Nothing carried over: the next statement still cannot see the table.
    assert "no such table" in _error(sample_db, "SELECT * FROM customer_contacts").message


def test_a_second_statement_cannot_ride_along(sample_db: SqliteOdbcDatabase, sample_db_path: Path) -> None:
    partner = sensitive_db_path(sample_db_path)
    err = _error(sample_db, f"ATTACH '{partner}' AS s; SELECT * FROM s.customer_contacts")
    assert err.code is ErrorCode.SQL_ERROR


def _own_database(tmp_path: Path, *, leak: bool) -> Path:
    """A database of one's own: a view over the sensitive table, which lives in the partner file."""
    own = tmp_path / "own.db"
    with sqlite3.connect(own) as conn:
        conn.execute("CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'Ada')")
        conn.execute(
            "CREATE VIEW contact_names AS SELECT c.name, cc.email FROM customers c "
            "JOIN customer_contacts cc USING (customer_id)"
        )
        if leak:
            conn.execute("CREATE TABLE Customer_Contacts (customer_id INTEGER, email TEXT)")
    with sqlite3.connect(tmp_path / "own-sensitive.db") as conn:
        conn.execute("CREATE TABLE customer_contacts (customer_id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute("INSERT INTO customer_contacts VALUES (1, 'ada@example.com')")
        conn.execute("CREATE VIEW contact_emails AS SELECT email FROM customer_contacts")
    return own


def test_views_reach_the_table_only_from_the_partner_file_when_approved(tmp_path: Path) -> None:
    db = SqliteOdbcDatabase(_own_database(tmp_path, leak=False))
    # A view kept with the sensitive table: invisible unless approved, then it works unchanged.
    assert "no such table" in _error(db, "SELECT * FROM contact_emails").message
    assert db.execute("SELECT * FROM contact_emails", max_rows=5, timeout_s=5, sensitive=True).rows == [
        ["ada@example.com"]
    ]
    # A view in the main file binds to the main file's tables only: it never reaches the partner.
    for sensitive in (False, True):
        err = _error(db, "SELECT * FROM contact_names", sensitive=sensitive)
        assert err.code is ErrorCode.SQL_ERROR and "main.customer_contacts" in err.message


def test_a_main_file_holding_a_sensitive_table_is_refused(tmp_path: Path) -> None:
    own = _own_database(tmp_path, leak=True)
    db = SqliteOdbcDatabase(own)
    for sensitive in (False, True):
        err = _error(db, "SELECT name FROM customers", sensitive=sensitive)
        assert err.code is ErrorCode.CONFIG_ERROR
        assert "customer_contacts" in err.message and "own-sensitive.db" in err.message


def test_approved_read_without_the_partner_file_is_a_config_error(tmp_path: Path, sample_db_path: Path) -> None:
    copy = tmp_path / "alone.db"
    shutil.copy(sample_db_path, copy)
    db = SqliteOdbcDatabase(copy)
    assert db.execute("SELECT COUNT(*) FROM regions", max_rows=1, timeout_s=5).rows == [[4]]
    err = _error(db, "SELECT COUNT(*) FROM customer_contacts", sensitive=True)
    assert err.code is ErrorCode.CONFIG_ERROR and "alone-sensitive.db" in err.message


def test_explicit_partner_path_and_table_list(tmp_path: Path, sample_db_path: Path) -> None:
    elsewhere = tmp_path / "vault" / "contacts.db"
    elsewhere.parent.mkdir()
    shutil.copy(sensitive_db_path(sample_db_path), elsewhere)
    db = SqliteOdbcDatabase(sample_db_path, sensitive_path=elsewhere, sensitive_tables={"Regions"})
    # "regions" declared sensitive but present in the main file: refused, whatever the statement.
    assert _error(db, "SELECT 1").code is ErrorCode.CONFIG_ERROR
    db = SqliteOdbcDatabase(sample_db_path, sensitive_path=elsewhere)
    assert db.execute("SELECT COUNT(*) FROM customer_contacts", max_rows=1, timeout_s=5, sensitive=True).rows == [[400]]
