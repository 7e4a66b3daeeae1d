"""The Azure SQL code path end to end through pyodbc and a real ODBC driver (SQLite3).

No SQL Server runs here, so the connection string from settings names the SQLite3 driver. Everything
else is the production path: settings → connector (token fetched and packed into the pre-connect
attributes, ApplicationIntent added) → ``pyodbc.connect`` → query timeout → fetch → JSON-safe rows →
error classification. The SQLite driver ignores the SQL Server keywords and attribute 1256.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from pydantic import SecretStr
from sqlglot import exp

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.sql.azure import (
    COLUMNS_SQL,
    SET_TEXTSIZE,
    AzureSqlConnector,
    AzureSqlDatabase,
    build_azure_sql_database,
    split_table_name,
)
from shared.providers.sql.odbc import parse_connection_string
from shared.providers.sql.sqlite import MAX_CELL_CHARS
from shared.runtime.settings import DATA_DIR, Settings
from tests.fakes.credentials import StaticTokenCredential

TSQL_SCHEMA = DATA_DIR / "sql" / "schema.tsql.sql"


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE regions (region_id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            INSERT INTO regions VALUES (1, 'North'), (2, 'South'), (3, 'East'), (4, 'West');
            CREATE TABLE prices (product TEXT, amount NUMERIC, sold_on TEXT);
            INSERT INTO prices VALUES ('kettle', 19.99, '2025-01-02'), ('toaster', 35.5, '2025-02-03');
            """
        )
    return path


def _settings(db_file: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "sql_provider": "azure_sql",
        "azure_sql_connection_string": SecretStr(f"Driver={{SQLite3}};Database={db_file}"),
        "azure_sql_odbc_driver": "SQLite3",
        "azure_sql_read_only_intent": True,
    }
    values.update(overrides)
    return Settings(**values)


def test_query_through_the_real_driver(db_file: Path) -> None:
    credential = StaticTokenCredential("entra-token")
    database = build_azure_sql_database(_settings(db_file), credential=credential)
    assert database.dialect == "tsql"

    rows = database.execute("SELECT region_id, name FROM regions ORDER BY region_id", max_rows=3, timeout_s=10)

    assert rows.columns == ["region_id", "name"]
    assert rows.rows == [[1, "North"], [2, "South"], [3, "East"]]
    assert rows.truncated is True
    # The token path ran on a real connect: one token per connection, for the SQL scope.
    assert credential.scopes == [("https://database.windows.net/.default",)]
    pairs = dict(parse_connection_string(database.connector._connection_string))
    assert pairs["ApplicationIntent"] == "ReadOnly"


def test_values_are_json_safe(db_file: Path) -> None:
    database = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t"))
    rows = database.execute("SELECT product, amount, sold_on FROM prices ORDER BY product", max_rows=10, timeout_s=10)
    assert rows.rows[0][0] == "kettle" and rows.rows[0][2] == "2025-01-02"
    assert isinstance(rows.rows[0][1], float) and rows.rows[0][1] == pytest.approx(19.99)
    assert rows.truncated is False


def test_sql_errors_from_the_real_driver(db_file: Path) -> None:
    database = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t"))
    with pytest.raises(ProviderError) as info:
        database.execute("SELECT * FROM no_such_table", max_rows=5, timeout_s=10)
    assert info.value.code is ErrorCode.SQL_ERROR
    assert "no_such_table" in info.value.message


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_long_query_is_a_sql_timeout(db_file: Path) -> None:
    database = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t"))
    slow = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000000000) SELECT COUNT(*) FROM c"
    with pytest.raises(ProviderError) as info:
        database.execute(slow, max_rows=1, timeout_s=1)
    assert info.value.code is ErrorCode.SQL_TIMEOUT


def test_the_query_timeout_attribute_is_set_on_the_connection(db_file: Path) -> None:
    connector = build_azure_sql_database(
        _settings(db_file),
        credential=StaticTokenCredential("t"),
    ).connector
    seen: list[int] = []

    class Recording(AzureSqlDatabase):
        def _configure(self, conn: Any, timeout_s: int, *, sensitive: bool) -> None:
            super()._configure(conn, timeout_s, sensitive=sensitive)
            seen.append(conn.timeout)  # read back from the live pyodbc connection

    Recording(connector).execute("SELECT 1", max_rows=1, timeout_s=7)
    assert seen == [7]


# --- schema introspection ------------------------------------------------------------------------


def _information_schema_rows() -> list[tuple[Any, ...]]:
    """INFORMATION_SCHEMA.COLUMNS rows for the sample T-SQL schema, derived from its DDL."""
    rows: list[tuple[Any, ...]] = []
    for statement in sqlglot.parse(TSQL_SCHEMA.read_text(encoding="utf-8"), read="tsql"):
        if not isinstance(statement, exp.Create) or statement.kind != "TABLE":
            continue
        table = statement.this.this
        position = 0
        for column in statement.this.expressions:
            if not isinstance(column, exp.ColumnDef):
                continue
            position += 1
            kind = column.args["kind"]
            params = [int(p.sql()) for p in kind.expressions]
            type_name = kind.this.name.lower()
            not_null = any(isinstance(c.kind, exp.NotNullColumnConstraint) for c in column.constraints)
            is_text = type_name in ("nvarchar", "varchar", "nchar", "char")
            rows.append(
                (
                    table.db or "dbo",
                    table.name,
                    column.name,
                    position,
                    "NO" if not_null else "YES",
                    type_name,
                    params[0] if is_text and params else None,
                    params[0] if type_name == "decimal" else (10 if type_name == "int" else None),
                    params[1] if type_name == "decimal" and len(params) > 1 else (0 if type_name == "int" else None),
                )
            )
    return rows


class AttachingConnector(AzureSqlConnector):
    """The real connector plus an attached SQLite database named INFORMATION_SCHEMA (stands in for the views)."""

    def __init__(self, inner: AzureSqlConnector, info_schema: Path) -> None:
        super().__init__(inner._connection_string, driver=inner.driver, token_provider=inner._token_provider)
        self.info_schema = info_schema

    def connect(self, timeout_s: int) -> Any:
        conn = super().connect(timeout_s)
        conn.execute(f"ATTACH DATABASE '{self.info_schema}' AS INFORMATION_SCHEMA")
        return conn


@pytest.fixture
def info_schema_db(tmp_path: Path) -> Path:
    path = tmp_path / "information_schema.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE COLUMNS (TABLE_SCHEMA TEXT, TABLE_NAME TEXT, COLUMN_NAME TEXT, ORDINAL_POSITION INT, "
            "IS_NULLABLE TEXT, DATA_TYPE TEXT, CHARACTER_MAXIMUM_LENGTH INT, NUMERIC_PRECISION INT, NUMERIC_SCALE INT)"
        )
        # Stored in reverse so ORDER BY ORDINAL_POSITION is what puts them in order.
        conn.executemany("INSERT INTO COLUMNS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", reversed(_information_schema_rows()))
    return path


def test_describe_allowed_tables_only(db_file: Path, info_schema_db: Path) -> None:
    base = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t")).connector
    database = AzureSqlDatabase(AttachingConnector(base, info_schema_db))

    schemas = database.describe_tables(["dbo.products", "[dbo].[regions]", "orders", "dbo.not_there"])

    assert list(schemas) == ["dbo.products", "[dbo].[regions]", "orders"]  # unknown tables are left out
    products = schemas["dbo.products"]
    assert products.qualified_name == "dbo.products"
    assert [c.name for c in products.columns] == ["product_id", "name", "category_id", "list_price"]
    price = products.columns[3]
    assert (price.data_type, price.nullable, price.precision, price.scale) == ("decimal", False, 10, 2)
    name = products.columns[1]
    assert (name.data_type, name.max_length) == ("nvarchar", 100)
    assert schemas["orders"].schema_name == "dbo"
    assert products.column_types() == {
        "product_id": "int",
        "name": "nvarchar(100)",
        "category_id": "int",
        "list_price": "decimal(10,2)",
    }
    # Tables not asked for never appear, even though the views list them.
    assert "customers" not in {s.name for s in schemas.values()}


def test_describe_tables_rejects_odd_names(db_file: Path) -> None:
    database = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t"))
    for bad in ["a.b.c", "", "dbo.[x]]y"]:
        with pytest.raises(ProviderError) as info:
            database.describe_tables([bad])
        assert info.value.code is ErrorCode.INVALID_INPUT
    assert database.describe_tables([]) == {}


def test_declared_types() -> None:
    from shared.providers.sql.azure import ColumnSchema

    assert ColumnSchema(name="n", data_type="nvarchar", nullable=True, max_length=-1).sql_type == "nvarchar(max)"
    assert ColumnSchema(name="d", data_type="date", nullable=False).sql_type == "date"
    assert ColumnSchema(name="p", data_type="numeric", nullable=False, precision=18).sql_type == "numeric(18,0)"


def test_split_table_name_forms() -> None:
    assert split_table_name("orders") == ("dbo", "orders")
    assert split_table_name("sales.orders") == ("sales", "orders")
    assert split_table_name('"sales"."orders"') == ("sales", "orders")


def test_columns_query_is_parameterised_tsql() -> None:
    parsed = sqlglot.parse_one(COLUMNS_SQL, read="tsql")
    assert isinstance(parsed, exp.Select)
    assert len(list(parsed.find_all(exp.Placeholder))) == 2
    assert "'" not in COLUMNS_SQL  # no literal: the names only ever travel as parameters
    assert parsed.find(exp.Table).db.upper() == "INFORMATION_SCHEMA"  # type: ignore[union-attr]


class _SqlServerLike:
    """A live pyodbc connection that reports SQL Server and records statements (T-SQL SETs are only noted)."""

    def __init__(self, conn: Any, statements: list[str]) -> None:
        self._conn, self._statements = conn, statements

    def getinfo(self, kind: int) -> str:
        import pyodbc

        return "Microsoft SQL Server" if kind == pyodbc.SQL_DBMS_NAME else self._conn.getinfo(kind)

    def cursor(self) -> Any:
        real, statements = self._conn.cursor(), self._statements

        class Cursor:
            description: Any = None

            def execute(self, sql: str) -> Any:
                statements.append(sql)
                if sql.startswith("SET "):
                    return self
                real.execute(sql)
                self.description = real.description
                return self

            def fetchone(self) -> Any:
                return real.fetchone()

            def cancel(self) -> None:
                real.cancel()

            def close(self) -> None:
                statements.append("<cursor closed>")
                real.close()

        return Cursor()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_conn", "_statements"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._conn, name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_textsize_is_set_before_every_query_on_sql_server(db_file: Path) -> None:
    connector = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t")).connector
    statements: list[str] = []

    class Recording(AzureSqlConnector):
        def connect(self, timeout_s: int) -> Any:
            return _SqlServerLike(connector.connect(timeout_s), statements)

    database = AzureSqlDatabase(Recording("", driver=connector.driver, token_provider=None))
    for sensitive in (False, True):  # the flag changes nothing on Azure SQL: the user is denied those tables
        statements.clear()
        rows = database.execute("SELECT COUNT(*) FROM regions", max_rows=1, timeout_s=5, sensitive=sensitive)
        assert rows.rows == [[4]]
        assert statements == [
            f"SET TEXTSIZE {(MAX_CELL_CHARS + 1) * 2}",
            "<cursor closed>",
            "SELECT COUNT(*) FROM regions",
            "<cursor closed>",
        ]
    assert SET_TEXTSIZE == "SET TEXTSIZE 8002"


def test_no_textsize_for_the_sqlite_stand_in(db_file: Path) -> None:
    # T-SQL's SET would be a syntax error on another DBMS; the stand-in still answers.
    database = build_azure_sql_database(_settings(db_file), credential=StaticTokenCredential("t"))
    assert database.execute("SELECT 1", max_rows=1, timeout_s=5).rows == [[1]]
