"""The pyodbc runner against the real SQLite ODBC driver and the real sample database."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.sql import sqlite_limits
from shared.providers.sql.sqlite import (
    MAX_CELL_CHARS,
    MAX_RESULT_CHARS,
    OdbcDatabase,
    SqliteOdbcDatabase,
    json_safe,
    open_sample_database,
)
from shared.runtime.settings import Settings

SLOW = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 500000000) SELECT COUNT(*) FROM c"


def test_rows_columns_and_truncation(sample_db: SqliteOdbcDatabase) -> None:
    rows = sample_db.execute(
        "SELECT order_id, order_date, channel FROM orders ORDER BY order_id", max_rows=5, timeout_s=10
    )
    assert rows.columns == ["order_id", "order_date", "channel"]
    assert len(rows.rows) == 5 and rows.truncated
    assert rows.rows[0] == [1, "2025-01-01", rows.rows[0][2]]
    exact = sample_db.execute("SELECT name FROM regions ORDER BY region_id", max_rows=4, timeout_s=10)
    assert exact.rows == [["North"], ["South"], ["East"], ["West"]] and not exact.truncated
    json.dumps(rows.rows)


def test_mixed_type_column_keeps_every_value(sample_db: SqliteOdbcDatabase) -> None:
    # The driver types an untyped column by its first row; the runner must not truncate 1.5 to 1.
    rows = sample_db.execute(
        "SELECT x FROM (SELECT 1 AS x UNION ALL SELECT 1.5 UNION ALL SELECT 'abc' UNION ALL SELECT NULL)",
        max_rows=10,
        timeout_s=10,
    )
    assert [r[0] for r in rows.rows] == [1, 1.5, "abc", None]


def test_money_sums_match_sqlite(sample_db: SqliteOdbcDatabase, sample_db_path: Path) -> None:
    sql = (
        "SELECT strftime('%m', o.order_date) AS month, ROUND(SUM(oi.quantity * oi.unit_price), 2) AS revenue "
        "FROM orders o JOIN order_items oi ON oi.order_id = o.order_id GROUP BY 1 ORDER BY 1"
    )
    got = sample_db.execute(sql, max_rows=50, timeout_s=10).rows
    with sqlite3.connect(sample_db_path) as conn:
        expected = [list(r) for r in conn.execute(sql)]
    assert got == expected and isinstance(got[0][0], str)


def test_writes_are_refused_by_the_engine(sample_db: SqliteOdbcDatabase, sample_db_path: Path) -> None:
    # Bypassing the guard on purpose: the read-only open is the next layer.
    with pytest.raises(ProviderError) as err:
        sample_db.execute("DELETE FROM returns", max_rows=5, timeout_s=5)
    assert err.value.code is ErrorCode.SQL_ERROR and "readonly" in err.value.message.replace(" ", "")
    with sqlite3.connect(sample_db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM returns").fetchone()[0] > 0


def test_sql_error_is_classified(sample_db: SqliteOdbcDatabase) -> None:
    with pytest.raises(ProviderError) as err:
        sample_db.execute("SELECT nope FROM orders", max_rows=5, timeout_s=5)
    assert err.value.code is ErrorCode.SQL_ERROR and "nope" in err.value.message


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_timeout_interrupts_a_long_query(sample_db: SqliteOdbcDatabase) -> None:
    started = time.monotonic()
    with pytest.raises(ProviderError) as err:
        sample_db.execute(SLOW, max_rows=5, timeout_s=1)
    print(f"timeout=1s query stopped after {time.monotonic() - started:.3f}s")
    assert err.value.code is ErrorCode.SQL_TIMEOUT
    # The database is fine afterwards.
    assert sample_db.execute("SELECT COUNT(*) FROM regions", max_rows=1, timeout_s=5).rows == [[4]]


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_locked_database_is_transient(tmp_path: Path, sample_db_path: Path) -> None:
    copy = tmp_path / "locked.db"
    shutil.copy(sample_db_path, copy)
    holder = sqlite3.connect(copy, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ProviderError) as err:
            SqliteOdbcDatabase(copy).execute("SELECT COUNT(*) FROM orders", max_rows=1, timeout_s=1)
        assert err.value.code is ErrorCode.TRANSIENT
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_missing_driver_names_the_package(sample_db_path: Path) -> None:
    with pytest.raises(ProviderError) as err:
        SqliteOdbcDatabase(sample_db_path, driver="NoSuchSQLiteDriver").execute("SELECT 1", max_rows=1, timeout_s=1)
    assert err.value.code is ErrorCode.CONFIG_ERROR and "libsqliteodbc" in err.value.message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as err:
        SqliteOdbcDatabase(tmp_path / "absent.db").execute("SELECT 1", max_rows=1, timeout_s=1)
    assert err.value.code is ErrorCode.CONFIG_ERROR
    assert not (tmp_path / "absent.db").exists()


def test_open_sample_database_builds_lazily(tmp_path: Path) -> None:
    path = tmp_path / "lazy" / "sample.db"
    db = open_sample_database(Settings(sqlite_database_path=path))
    assert not path.exists()  # nothing happens at construction
    assert db.dialect == "sqlite"
    assert db.execute("SELECT COUNT(*) AS n FROM orders", max_rows=1, timeout_s=5).rows == [[3000]]
    assert path.exists()


def test_open_sample_database_leaves_own_database_alone(tmp_path: Path) -> None:
    own = tmp_path / "own.db"
    with sqlite3.connect(own) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (7)")
    db = open_sample_database(Settings(sqlite_database_path=own))
    assert db.execute("SELECT x FROM t", max_rows=5, timeout_s=5).rows == [[7]]


def test_json_safe_values() -> None:
    assert json_safe(Decimal("12.50")) == 12.5
    assert json_safe(Decimal("NaN")) is None
    assert json_safe(float("inf")) is None
    assert json_safe(dt.date(2025, 7, 1)) == "2025-07-01"
    assert json_safe(dt.datetime(2025, 7, 1, 12, 30)) == "2025-07-01T12:30:00"
    assert json_safe(dt.time(8, 5)) == "08:05:00"
    assert json_safe(b"\x00\xff") == "0x00ff"
    assert json_safe(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert json_safe("x" * 5000).endswith("...") and len(json_safe("x" * 5000)) == 4003
    assert json_safe(True) is True


def test_blob_and_unicode_values(sample_db: SqliteOdbcDatabase) -> None:
    rows = sample_db.execute(
        "SELECT x'00ff' AS b, 'h\u00e9llo' AS u, date('2025-03-01', '+1 month') AS d", max_rows=1, timeout_s=5
    )
    assert rows.rows == [["0x00ff", "h\u00e9llo", "2025-04-01"]]


def _odbc_error(sqlstate: str, message: str) -> Exception:
    import pyodbc

    return pyodbc.Error(sqlstate, message)


@pytest.mark.parametrize(
    ("sqlstate", "message", "code"),
    [
        ("HYT00", "[Microsoft][ODBC Driver 18 for SQL Server]Query timeout expired (0)", ErrorCode.SQL_TIMEOUT),
        ("08S01", "[Microsoft][ODBC Driver 18 for SQL Server]Communication link failure (10054)", ErrorCode.TRANSIENT),
        ("08001", "TCP Provider: Error code 0x2746 (10054)", ErrorCode.TRANSIENT),
        ("HYT01", "Login timeout expired (0)", ErrorCode.TRANSIENT),
        ("42000", "Database 'jobs' on server 'x' is not currently available (40613)", ErrorCode.TRANSIENT),
        ("40001", "Transaction was deadlocked (1205)", ErrorCode.TRANSIENT),
        ("28000", "Login failed for user '<token-identified principal>'. (18456)", ErrorCode.AUTH_FAILED),
        ("42S02", "Invalid object name 'nope'. (208)", ErrorCode.SQL_ERROR),
        ("42000", "The SELECT permission was denied on the object 'customer_contacts' (229)", ErrorCode.SQL_ERROR),
        (
            "01000",
            "[unixODBC][Driver Manager]Can't open lib 'ODBC Driver 18 for SQL Server' : file not found (0)",
            ErrorCode.CONFIG_ERROR,
        ),
        (
            "IM002",
            "[unixODBC][Driver Manager]Data source name not found and no default driver specified",
            ErrorCode.CONFIG_ERROR,
        ),
    ],
)
def test_generic_odbc_error_classification(sqlstate: str, message: str, code: ErrorCode) -> None:
    # The base class is what the Azure SQL variant reuses: its classification of SQL Server faults.
    db = OdbcDatabase(lambda _t: None, "tsql", name="azure sql")
    err = db._classify(_odbc_error(sqlstate, message), timed_out=False, connecting=False)
    assert err.code is code, err.message


def test_connection_failures_are_classified_when_connecting() -> None:
    def refuse(_timeout: int) -> object:
        raise _odbc_error("08001", "[Microsoft][ODBC Driver 18]Named Pipes Provider: Could not open a connection")

    with pytest.raises(ProviderError) as err:
        OdbcDatabase(refuse, "tsql", name="azure sql").execute("SELECT 1", max_rows=1, timeout_s=1)
    assert err.value.code is ErrorCode.TRANSIENT


def test_base_class_runs_over_any_odbc_factory(sample_db_path: Path) -> None:
    import pyodbc

    def connect(timeout_s: int) -> object:
        return pyodbc.connect(f"DRIVER={{SQLite3}};Database=file:{sample_db_path}?mode=ro", autocommit=True)

    db = OdbcDatabase(connect, "tsql", name="generic")
    rows = db.execute("SELECT region_id, name FROM regions ORDER BY region_id", max_rows=3, timeout_s=5)
    assert rows.columns == ["region_id", "name"] and rows.rows[0] == [1, "North"] and rows.truncated


# --- bounded memory: the durable_limits extension on every connection --------------------------------

LIMIT = sqlite_limits.max_length()

TOO_BIG = [
    # A string doubling until it is huge.
    "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(s) FROM r LIMIT 64",
    # group_concat over a cross join.
    "SELECT length(group_concat(a.name || b.name)) FROM customers a, customers b",
    # replace amplification of a width-padded string.
    f"SELECT length(replace(printf('%.*c', {LIMIT // 2}, 'x'), 'x', 'xxx'))",
    "SELECT length(zeroblob(50000000))",
    "SELECT length(randomblob(50000000))",
    "SELECT length(hex(randomblob(60000)))",
    f"SELECT length(substr(printf('%.*c', {LIMIT - 10}, 'x') || printf('%.*c', {LIMIT - 10}, 'y'), 1, 10))",
]


@pytest.mark.parametrize("sql", TOO_BIG)
def test_no_value_grows_beyond_the_length_limit(sample_db: SqliteOdbcDatabase, sql: str) -> None:
    with pytest.raises(ProviderError) as err:
        sample_db.execute(sql, max_rows=100, timeout_s=10)
    assert err.value.code is ErrorCode.SQL_ERROR and "too big" in err.value.message


def test_printf_width_beyond_the_limit_yields_null(sample_db: SqliteOdbcDatabase) -> None:
    # SQLite's printf answers NULL (not an error) when the result would pass SQLITE_LIMIT_LENGTH; it
    # still spends CPU linear in the width (about 7 ns a char), which the watchdog bounds.
    rows = sample_db.execute(
        f"SELECT printf('%.*c', {LIMIT + 1}, 'x'), printf('%.*c', 10000000, 'x')", max_rows=1, timeout_s=5
    )
    assert rows.rows == [[None, None]]


def test_values_within_the_limit_work_and_cells_are_cut(sample_db: SqliteOdbcDatabase) -> None:
    rows = sample_db.execute(f"SELECT printf('%.*c', {LIMIT - 1}, 'x') AS big, 'ok' AS small", max_rows=1, timeout_s=5)
    assert rows.rows == [["x" * MAX_CELL_CHARS + "...", "ok"]]


def test_a_result_stops_growing_at_its_character_budget(sample_db: SqliteOdbcDatabase) -> None:
    wide = ", ".join(f"printf('%.*c', 50000, 'x') AS c{i}" for i in range(20))
    rows = sample_db.execute(f"SELECT {wide} FROM orders LIMIT 50", max_rows=50, timeout_s=10)
    per_row = 20 * (MAX_CELL_CHARS + 3)
    assert rows.truncated and len(rows.rows) == MAX_RESULT_CHARS // per_row


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("SELECT 1" + " + 1" * 150, "too large"),  # expression depth
        (" UNION ALL ".join(["SELECT 1"] * 60), "too many terms"),  # compound select
        ("SELECT 1 -- " + "x" * (LIMIT + 10), "too big"),  # SQL text length
        ("SELECT " + ", ".join(str(i) for i in range(250)), "too many columns"),
        ("SELECT max(" + ", ".join(str(i) for i in range(40)) + ")", "too many arguments"),
    ],
)
def test_statement_shape_limits(sample_db: SqliteOdbcDatabase, sql: str, needle: str) -> None:
    with pytest.raises(ProviderError) as err:
        sample_db.execute(sql, max_rows=1, timeout_s=5)
    assert err.value.code is ErrorCode.SQL_ERROR and needle in err.value.message.lower()


def test_connection_string_loads_the_extension(sample_db: SqliteOdbcDatabase) -> None:
    text = sample_db.connection_string(5)
    assert f"LoadExt={sqlite_limits.extension_path()}" in text
    assert sqlite_limits.extension_path().name.startswith("durable_limits-")


def test_an_extension_that_does_not_load_fails_the_query(
    sample_db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver only prints a warning when LoadExt fails; the seal check turns that into CONFIG_ERROR.
    monkeypatch.setattr(sqlite_limits, "extension_path", lambda: tmp_path / "missing.so")
    with pytest.raises(ProviderError) as err:
        SqliteOdbcDatabase(sample_db_path).execute("SELECT 1", max_rows=1, timeout_s=5)
    assert err.value.code is ErrorCode.CONFIG_ERROR and "make install" in err.value.message


def test_a_stale_extension_fails_the_query(sample_db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_limits, "expected_version", lambda: "durable_limits 999")
    with pytest.raises(ProviderError) as err:
        SqliteOdbcDatabase(sample_db_path).execute("SELECT 1", max_rows=1, timeout_s=5)
    assert err.value.code is ErrorCode.CONFIG_ERROR and "durable_limits 999" in err.value.message


def test_the_extension_is_built_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_limits, "_build_dirs", lambda: [tmp_path / "build"])
    monkeypatch.setattr(sqlite_limits, "_built", {})
    path = sqlite_limits.extension_path()
    assert path.parent == tmp_path / "build" and path.stat().st_size > 0
    assert [p.name for p in (tmp_path / "build").iterdir()] == [path.name]  # no temp file left
    assert sqlite_limits.extension_path() == path


def test_no_compiler_is_a_config_error_naming_the_fix(
    sample_db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_limits, "_build_dirs", lambda: [tmp_path / "build"])
    monkeypatch.setattr(sqlite_limits, "_built", {})
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ProviderError) as err:
        SqliteOdbcDatabase(sample_db_path).execute("SELECT 1", max_rows=1, timeout_s=5)
    assert err.value.code is ErrorCode.CONFIG_ERROR
    assert "gcc" in err.value.message and "make install" in err.value.message


# --- resource release -------------------------------------------------------------------------------


class _Recorder:
    def __init__(self, events: list[str], fail: bool) -> None:
        self.events = events
        self.fail = fail
        self.description = [("one",)]
        self.timeout = 0

    def cursor(self) -> _Recorder:
        self.events.append("cursor")
        return self

    def execute(self, sql: str) -> None:
        if self.fail:
            raise RuntimeError("scripted failure")

    def fetchone(self) -> tuple[int] | None:
        self.events.append("fetch")
        return None

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        self.events.append("close")


@pytest.mark.parametrize("fail", [False, True])
def test_cursor_is_closed_before_its_connection(fail: bool) -> None:
    events: list[str] = []
    conn = _Recorder(events, fail)
    db = OdbcDatabase(lambda timeout_s: conn, "tsql", name="recorder")
    if fail:
        with pytest.raises(ProviderError):
            db.execute("SELECT 1", max_rows=1, timeout_s=5)
    else:
        db.execute("SELECT 1", max_rows=1, timeout_s=5)
    assert events[-2:] == ["close", "close"] and events.count("cursor") == 1


# --- the typed projection: cells cut inside SQLite, types kept per value -----------------------------


def test_cells_are_cut_inside_the_engine(sample_db: SqliteOdbcDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.providers.sql.sqlite as sqldb

    seen: list[int] = []
    untag = sqldb._untag

    def spy(value: object) -> object:
        seen.append(len(value) if isinstance(value, str) else 0)
        return untag(value)

    monkeypatch.setattr(sqldb, "_untag", spy)
    rows = sample_db.execute(
        f"SELECT printf('%.*c', {LIMIT - 1}, 'x') AS t, randomblob({LIMIT - 1}) AS b", max_rows=1, timeout_s=5
    )
    # What crossed the driver: a tag plus at most MAX_CELL_CHARS + 1 characters per cell.
    assert seen and max(seen) <= MAX_CELL_CHARS + 2
    assert rows.rows[0][0] == "x" * MAX_CELL_CHARS + "..." and rows.rows[0][1].endswith("...")


def test_projection_keeps_names_order_and_statement_forms(sample_db: SqliteOdbcDatabase) -> None:
    rows = sample_db.execute(
        "/* lead */ SELECT 1 AS a, 2 AS a, name, NULL AS n, 2.5 AS r FROM regions ORDER BY name DESC -- tail",
        max_rows=2,
        timeout_s=5,
    )
    assert rows.columns == ["a", "a", "name", "n", "r"]
    assert rows.rows == [[1, 2, "West", None, 2.5], [1, 2, "South", None, 2.5]] and rows.truncated
    assert sample_db.execute("VALUES (1, 'x');", max_rows=1, timeout_s=5).rows == [[1, "x"]]
    with_cte = "WITH x AS (SELECT region_id FROM regions) SELECT COUNT(*) AS n FROM x"
    assert sample_db.execute(with_cte, max_rows=1, timeout_s=5).rows == [[4]]
    # Not a query: runs as written (the engine's limits and the read-only open still hold).
    assert sample_db.execute("PRAGMA user_version", max_rows=1, timeout_s=5).rows
