"""Classification of SQL Server errors as pyodbc raises them (SQLSTATE + driver message shapes)."""

from __future__ import annotations

from typing import Any

import pyodbc
import pytest

from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode, ProviderError
from shared.providers.sql.azure import AzureSqlConnector, AzureSqlDatabase, classify_sql_server_error, native_errors

PREFIX = "[Microsoft][ODBC Driver 18 for SQL Server]"
SERVER = PREFIX + "[SQL Server]"


def _error(kind: type[pyodbc.Error], sqlstate: str, text: str, native: int, function: str) -> pyodbc.Error:
    # pyodbc's message shape: "[SQLSTATE] <driver text> (<native error>) (<ODBC function>)".
    return kind(sqlstate, f"[{sqlstate}] {text} ({native}) ({function})")


CASES: list[tuple[pyodbc.Error, ErrorCode, int | None]] = [
    (
        _error(pyodbc.OperationalError, "HYT00", PREFIX + "Query timeout expired", 0, "SQLExecDirectW"),
        ErrorCode.SQL_TIMEOUT,
        None,
    ),
    (
        _error(
            pyodbc.OperationalError,
            "42000",
            SERVER + "Database 'sales' on server 'srv.database.windows.net' is not currently available. "
            "Please retry the connection later.",
            40613,
            "SQLDriverConnect",
        ),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(
            pyodbc.OperationalError,
            "42000",
            SERVER + "The service is currently busy. Retry the request after 10 seconds.",
            40501,
            "SQLExecDirectW",
        ),
        ErrorCode.TRANSIENT,
        10_000,
    ),
    (
        _error(
            pyodbc.Error,
            "HY000",
            SERVER + "The service has encountered an error processing your request.",
            40197,
            "SQLExecDirectW",
        ),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(
            pyodbc.Error,
            "42000",
            SERVER + "Resource ID : 1. The request limit for the database is 60.",
            10928,
            "SQLExecDirectW",
        ),
        ErrorCode.TRANSIENT,
        10_000,
    ),
    (
        _error(
            pyodbc.Error,
            "42000",
            SERVER + "Cannot process request. Not enough resources to process request.",
            49918,
            "SQLExecDirectW",
        ),
        ErrorCode.TRANSIENT,
        10_000,
    ),
    (
        # 4060 says "login failed" but is a failover symptom in Azure SQL: retry, don't report auth.
        _error(
            pyodbc.InterfaceError,
            "42000",
            SERVER + 'Cannot open database "sales" requested by the login. The login failed.',
            4060,
            "SQLDriverConnect",
        ),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(
            pyodbc.InterfaceError,
            "28000",
            SERVER + "Login failed for user '<token-identified principal>'.",
            18456,
            "SQLDriverConnect",
        ),
        ErrorCode.AUTH_FAILED,
        None,
    ),
    (
        _error(
            pyodbc.Error,
            "40001",
            SERVER + "Transaction (Process ID 61) was deadlocked on lock resources with another process "
            "and has been chosen as the deadlock victim. Rerun the transaction.",
            1205,
            "SQLExecDirectW",
        ),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(pyodbc.OperationalError, "08S01", PREFIX + "Communication link failure", 0, "SQLExecDirectW"),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        # The login timeout is HYT00 too, but from SQLDriverConnect: transient, not a query timeout.
        _error(pyodbc.OperationalError, "HYT00", PREFIX + "Login timeout expired", 0, "SQLDriverConnect"),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(pyodbc.OperationalError, "HYT01", PREFIX + "Connection timeout expired", 0, "SQLExecDirectW"),
        ErrorCode.TRANSIENT,
        None,
    ),
    (
        _error(
            pyodbc.ProgrammingError,
            "42000",
            SERVER + "Cannot open server 'srv' requested by the login. Client with IP address '203.0.113.9' "
            "is not allowed to access the server.",
            40615,
            "SQLDriverConnect",
        ),
        ErrorCode.CONFIG_ERROR,
        None,
    ),
    (
        _error(pyodbc.ProgrammingError, "42S02", SERVER + "Invalid object name 'dbo.nope'.", 208, "SQLExecDirectW"),
        ErrorCode.SQL_ERROR,
        None,
    ),
    (
        _error(
            pyodbc.ProgrammingError,
            "42000",
            SERVER + "The SELECT permission was denied on the object 'salaries', database 'sales', schema 'dbo'.",
            229,
            "SQLExecDirectW",
        ),
        ErrorCode.SQL_ERROR,
        None,
    ),
]


class _FailingCursor:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def execute(self, sql: str, *params: Any) -> Any:
        raise self.error

    def cancel(self) -> None:
        pass


class _FailingConnection:
    """Stands in for a connection whose statement fails with a scripted driver error."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.timeout = 0
        self.closed = False

    def cursor(self) -> _FailingCursor:
        return _FailingCursor(self.error)

    def close(self) -> None:
        self.closed = True


class RaisingConnector(AzureSqlConnector):
    """Raises the scripted error where the driver would: at connect or at execute (per its ODBC function)."""

    def __init__(self, error: Exception) -> None:
        super().__init__("Driver={ODBC Driver 18 for SQL Server};Server=srv", driver="SQLite3", token_provider=None)
        self.error = error
        self.connection: _FailingConnection | None = None

    def connect(self, timeout_s: int) -> Any:
        if "(SQLDriverConnect)" in str(self.error.args[-1]):
            raise self.error
        self.connection = _FailingConnection(self.error)
        return self.connection


@pytest.mark.parametrize(("error", "code", "retry_after_ms"), CASES, ids=lambda v: getattr(v, "args", [v])[0])
def test_driver_errors_map_to_contract_codes(error: pyodbc.Error, code: ErrorCode, retry_after_ms: int | None) -> None:
    connector = RaisingConnector(error)
    database = AzureSqlDatabase(connector)
    with pytest.raises(ProviderError) as info:
        database.execute("SELECT 1", max_rows=1, timeout_s=5)
    assert info.value.code is code
    assert info.value.retry_after_ms == retry_after_ms
    assert info.value.message.startswith("azure sql: ") or code is ErrorCode.SQL_TIMEOUT
    if connector.connection is not None:  # failed at execute: the query timeout was set, the connection closed
        assert connector.connection.timeout == 5 and connector.connection.closed
    assert (code in RETRYABLE_CODES) == (code is ErrorCode.TRANSIENT)


def test_missing_driver_error_from_the_driver_manager() -> None:
    error = pyodbc.Error(
        "01000",
        "[01000] [unixODBC][Driver Manager]Can't open lib 'ODBC Driver 18 for SQL Server' : file not found "
        "(0) (SQLDriverConnect)",
    )
    connector = RaisingConnector(error)
    connector.driver = "ODBC Driver 18 for SQL Server"
    with pytest.raises(ProviderError) as info:
        AzureSqlDatabase(connector).execute("SELECT 1", max_rows=1, timeout_s=5)
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert "msodbcsql18" in info.value.message


def test_native_error_numbers_are_read_from_the_message() -> None:
    message = f"[42000] {SERVER}Database 'x' is not currently available. (40613) (SQLDriverConnect)"
    assert 40613 in native_errors(message)
    assert classify_sql_server_error("42S22", f"[42S22] {SERVER}Invalid column name 'x'. (207) (SQLExecDirectW)") == (
        None,
        None,
    )
