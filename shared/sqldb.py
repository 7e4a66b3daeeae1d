"""Read-only SQL execution through pyodbc: a reusable ODBC base and the SQLite sample database.

``OdbcDatabase`` owns what every ODBC database shares: one connection per query, the row cap
(``fetchmany(max_rows + 1)`` gives the ``truncated`` flag), a wall-clock limit, JSON-safe values
and error classification into ``ProviderError`` codes. A dialect only supplies a connection
factory (and may tune ``_configure`` / ``_convert_row`` / ``_classify_extra``). The Azure SQL variant
builds its own factory (token auth) and reuses everything else.

What is enforced for a query, per layer:

* Time: the connection's ``timeout`` (``SQL_ATTR_QUERY_TIMEOUT``; SQL Server enforces it server
  side) plus a watchdog thread that calls ``cursor.cancel()`` (``SQLCancel``) when the limit passes.
  The SQLite ODBC driver ignores the query timeout attribute; its ``SQLCancel`` calls
  ``sqlite3_interrupt``, so for SQLite the watchdog is what stops a long query (measured: a
  cancelled query returns within a few milliseconds of the limit). The driver's ``Timeout`` option is
  only SQLite's busy timeout (waiting for a lock), which is set to the same limit.
* Writes: the SQLite file is opened through a ``file:...?mode=ro`` URI, so the engine refuses any
  write even if the guard let one through. Azure SQL relies on a SELECT-only principal.
* Rows: the caller's guard caps rows in the SQL; the runner fetches at most ``max_rows + 1``.

SQLite ODBC gotcha handled here: the driver guesses a column's type from the first row, so an
untyped expression whose first value is an integer would truncate later decimals. The SQLite
variant therefore reads every value as the driver's text and parses numbers itself.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from shared.contracts import ErrorCode, ProviderError
from shared.providers import QueryRows

if TYPE_CHECKING:
    from shared.settings import Settings

Dialect = Literal["sqlite", "tsql"]
ConnectionFactory = Callable[[int], Any]
"""Opens a new pyodbc connection; receives the query's timeout in seconds (for login timeouts)."""

# Cells longer than this are cut: results are stored in Durable history and shown in a UI.
MAX_CELL_CHARS = 4000
# Extra time granted to a server-side timeout before the watchdog cancels on the client side.
DEFAULT_WATCHDOG_GRACE_S = 2.0

_SQLITE_DRIVER_HINT = (
    "the ODBC driver for SQLite is not installed: install the Debian packages 'unixodbc' and "
    "'libsqliteodbc' (scripts/install-system-deps.sh registers the driver 'SQLite3')"
)
# SQL Server / Azure SQL error numbers that are worth a retry (throttling, failover, busy).
_TRANSIENT_SERVER_ERRORS = frozenset(
    {"4060", "40197", "40501", "40613", "49918", "49919", "49920", "10928", "10929", "10053", "10054", "10060",
     "233", "64", "1205"}
)  # fmt: skip
_SQLITE_CODE = re.compile(r"\((\d+)\)")


def json_safe(value: Any) -> Any:
    """Turn one database value into a JSON-safe value (floats for decimals, ISO strings for dates)."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
            return value[:MAX_CELL_CHARS] + "..."
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        text = "0x" + data.hex()
        return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + "..."
    if isinstance(value, uuid.UUID):
        return str(value)
    return json_safe(str(value))


class OdbcDatabase:
    """A read-only database reached through pyodbc; implements ``shared.providers.SqlDatabase``."""

    def __init__(
        self,
        connect: ConnectionFactory,
        dialect: Dialect,
        *,
        name: str = "odbc",
        prepare: Callable[[], None] | None = None,
        watchdog_grace_s: float = DEFAULT_WATCHDOG_GRACE_S,
    ) -> None:
        self._connect = connect
        self.dialect: Dialect = dialect
        self.name = name
        self._prepare = prepare
        self._watchdog_grace_s = watchdog_grace_s

    # -- hooks for dialects ----------------------------------------------------------------------

    def _configure(self, conn: Any, timeout_s: int) -> None:
        """Set per-connection options before the query (default: the ODBC query timeout)."""
        conn.timeout = timeout_s

    def _convert_row(self, row: Sequence[Any]) -> list[Any]:
        """Convert one fetched row to JSON-safe values."""
        return [json_safe(v) for v in row]

    def _classify_extra(self, sqlstate: str, message: str) -> ErrorCode | None:
        """Dialect-specific classification; None falls back to the generic rules."""
        return None

    def _missing_driver_message(self, detail: str) -> str:
        return f"the ODBC driver for {self.name} is not available: {detail}"

    # -- the protocol ------------------------------------------------------------------------------

    def execute(self, sql: str, *, max_rows: int, timeout_s: int) -> QueryRows:
        """Run one guarded, read-only query; at most ``max_rows`` rows, within ``timeout_s`` seconds."""
        if max_rows < 1:
            raise ProviderError(ErrorCode.INVALID_INPUT, "max_rows must be at least 1")
        timeout_s = max(1, int(timeout_s))
        if self._prepare is not None:
            try:
                self._prepare()
            except ProviderError:
                raise
            except Exception as exc:  # a broken sample build is a configuration problem, not a query error
                raise ProviderError(ErrorCode.CONFIG_ERROR, f"{self.name}: database not available: {exc}") from exc
        try:
            import pyodbc  # noqa: F401  # imported here: a missing libodbc must not break app import
        except ImportError as exc:
            raise ProviderError(ErrorCode.CONFIG_ERROR, self._missing_driver_message(str(exc))) from exc

        try:
            conn = self._connect(timeout_s)
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=False, connecting=True) from exc
        watchdog = _Watchdog(timeout_s if self.dialect == "sqlite" else timeout_s + self._watchdog_grace_s)
        try:
            try:
                self._configure(conn, timeout_s)
                cursor = conn.cursor()
                watchdog.start(cursor)
                cursor.execute(sql)
                if cursor.description is None:
                    return QueryRows(columns=[], rows=[], truncated=False)
                columns = [str(d[0]) for d in cursor.description]
                fetched = cursor.fetchmany(max_rows + 1)
            finally:
                watchdog.stop()
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=watchdog.fired, connecting=False) from exc
        finally:
            try:
                conn.close()
            except Exception:  # closing a cancelled connection can fail; nothing is left to release
                pass
        truncated = len(fetched) > max_rows
        rows = [self._convert_row(r) for r in fetched[:max_rows]]
        return QueryRows(columns=columns, rows=rows, truncated=truncated)

    # -- errors --------------------------------------------------------------------------------------

    def _classify(self, exc: BaseException, *, timed_out: bool, connecting: bool) -> ProviderError:
        sqlstate, message = _error_parts(exc)
        if timed_out or sqlstate == "HYT00":
            return ProviderError(ErrorCode.SQL_TIMEOUT, f"{self.name}: the query exceeded its time limit ({message})")
        code = self._classify_extra(sqlstate, message)
        if code is None:
            code = _generic_code(sqlstate, message, connecting=connecting)
        if code is ErrorCode.CONFIG_ERROR and sqlstate in {"IM002", "IM003", "01000"}:
            return ProviderError(code, self._missing_driver_message(message))
        return ProviderError(code, f"{self.name}: {message}"[:2000])


def _error_parts(exc: BaseException) -> tuple[str, str]:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        return args[0], args[1]
    return "", str(exc) or type(exc).__name__


def _generic_code(sqlstate: str, message: str, *, connecting: bool) -> ErrorCode:
    lowered = message.lower()
    if sqlstate in {"IM002", "IM003"} or "can't open lib" in lowered or "data source name not found" in lowered:
        return ErrorCode.CONFIG_ERROR
    if sqlstate == "28000" or "login failed" in lowered:
        return ErrorCode.AUTH_FAILED
    if sqlstate.startswith("08") or sqlstate in {"HYT01", "40001"}:
        return ErrorCode.TRANSIENT
    numbers = set(re.findall(r"\((\d+)\)", message))
    if numbers & _TRANSIENT_SERVER_ERRORS:
        return ErrorCode.TRANSIENT
    if connecting:
        return ErrorCode.TRANSIENT
    return ErrorCode.SQL_ERROR


class _Watchdog:
    """Cancels a running statement once its time is up (``SQLCancel`` from another thread)."""

    def __init__(self, limit_s: float) -> None:
        self._limit_s = limit_s
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        self.fired = False

    def start(self, cursor: Any) -> None:
        self._timer = threading.Timer(self._limit_s, self._fire, args=(cursor,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, cursor: Any) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            try:
                cursor.cancel()
            except Exception:  # the statement may have just finished; the flag still reports the timeout
                pass

    def stop(self) -> None:
        with self._lock:
            self._done = True
        if self._timer is not None:
            self._timer.cancel()


# ---------------------------------------------------------------------------------------------------
# SQLite through the unixODBC SQLite3 driver


def _sqlite_text_converter(numeric: bool) -> Callable[[bytes | None], Any]:
    def convert(raw: bytes | None) -> Any:
        if raw is None:
            return None
        text = raw.decode("utf-8", errors="replace")
        if numeric:
            try:
                return int(text)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                return text
            return number if math.isfinite(number) else None
        return text

    return convert


def _sqlite_binary(raw: bytes | None) -> Any:
    return None if raw is None else json_safe(raw)


class SqliteOdbcDatabase(OdbcDatabase):
    """The SQLite sample database through the ``SQLite3`` ODBC driver, opened read-only."""

    def __init__(
        self,
        path: Path,
        *,
        driver: str = "SQLite3",
        prepare: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.driver = driver
        super().__init__(self._open, "sqlite", name=f"sqlite ({self.path.name})", prepare=prepare)

    def connection_string(self, timeout_s: int) -> str:
        """The ODBC connection string: a read-only URI, no file creation, busy timeout in ms."""
        uri = "file:" + quote(str(self.path.resolve()), safe="/") + "?mode=ro"
        # Lock waits give up before the watchdog fires, so a locked file reads as TRANSIENT, not a timeout.
        busy_ms = max(100, int(timeout_s * 800))
        return f"DRIVER={{{self.driver}}};Database={uri};NoCreat=1;Timeout={busy_ms};LoadExt="

    def _open(self, timeout_s: int) -> Any:
        import pyodbc

        if not self.path.exists():
            raise ProviderError(ErrorCode.CONFIG_ERROR, f"{self.name}: database file not found: {self.path}")
        conn = pyodbc.connect(self.connection_string(timeout_s), autocommit=True, readonly=True)
        for sql_type in (
            pyodbc.SQL_INTEGER, pyodbc.SQL_BIGINT, pyodbc.SQL_SMALLINT, pyodbc.SQL_TINYINT, pyodbc.SQL_BIT,
            pyodbc.SQL_DOUBLE, pyodbc.SQL_FLOAT, pyodbc.SQL_REAL, pyodbc.SQL_NUMERIC, pyodbc.SQL_DECIMAL,
        ):  # fmt: skip
            conn.add_output_converter(sql_type, _sqlite_text_converter(numeric=True))
        for sql_type in (
            pyodbc.SQL_CHAR, pyodbc.SQL_VARCHAR, pyodbc.SQL_LONGVARCHAR, pyodbc.SQL_WCHAR, pyodbc.SQL_WVARCHAR,
            pyodbc.SQL_WLONGVARCHAR, pyodbc.SQL_TYPE_DATE, pyodbc.SQL_TYPE_TIME, pyodbc.SQL_TYPE_TIMESTAMP,
        ):  # fmt: skip
            conn.add_output_converter(sql_type, _sqlite_text_converter(numeric=False))
        for sql_type in (pyodbc.SQL_BINARY, pyodbc.SQL_VARBINARY, pyodbc.SQL_LONGVARBINARY):
            conn.add_output_converter(sql_type, _sqlite_binary)
        return conn

    def _configure(self, conn: Any, timeout_s: int) -> None:
        """Nothing to set: the driver ignores the ODBC query timeout (the watchdog enforces it)."""

    def _classify_extra(self, sqlstate: str, message: str) -> ErrorCode | None:
        codes = set(_SQLITE_CODE.findall(message))
        lowered = message.lower()
        # SQLITE_BUSY (5) / SQLITE_LOCKED (6): another writer holds the file; worth a retry.
        if codes & {"5", "6"} or "database is locked" in lowered or "database table is locked" in lowered:
            return ErrorCode.TRANSIENT
        # SQLITE_CANTOPEN (14) / SQLITE_NOTADB (26): the file is missing or not a database.
        if codes & {"14", "26"} and ("connect failed" in lowered or "unable to open" in lowered):
            return ErrorCode.CONFIG_ERROR
        if "can't open lib" in lowered or sqlstate in {"IM002", "IM003"}:
            return ErrorCode.CONFIG_ERROR
        return None

    def _missing_driver_message(self, detail: str) -> str:
        return f"{_SQLITE_DRIVER_HINT} ({detail})"


def open_sample_database(settings: Settings) -> SqliteOdbcDatabase:
    """The configured SQLite database; the sample is built lazily from ``data/sql`` on the first query.

    A database file of your own at ``SQLITE_DATABASE_PATH`` is used as it is; the sample is (re)built
    only at the default path or when the configured file does not exist yet.
    """
    from shared.sampledata import DEFAULT_SAMPLE_DB, ensure_sample_db

    path = Path(settings.sqlite_database_path)

    def prepare() -> None:
        if path.resolve() == DEFAULT_SAMPLE_DB.resolve() or not path.exists():
            ensure_sample_db(path)

    return SqliteOdbcDatabase(path, prepare=prepare)
