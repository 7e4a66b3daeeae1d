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
* Memory: SQLite connections load the ``durable_limits`` extension (``shared/sqlite_limits``), so no
  string, blob or row exceeds ``SQLITE_LIMIT_LENGTH`` (64 KiB) and SQL text, nesting, compounds and
  columns are small. A query runs inside a projection that cuts every cell to ``MAX_CELL_CHARS`` in
  the engine, the driver streams rows (``StepAPI=1``; by default it buffers the whole result), and
  a result stops (``truncated``) once its cells reach ``MAX_RESULT_CHARS``. Azure SQL sets
  ``TEXTSIZE``.
* Sensitive tables (SQLite): they live in a separate file, ATTACHed read-only only when the caller
  passes ``sensitive=True`` (a statement a human approved). The extension's authorizer is then
  sealed: the statement itself cannot ATTACH, DETACH, set a pragma, load an extension or write.
  This barrier does not depend on the SQL guard or on the orchestrator.

SQLite ODBC gotcha handled here: the driver guesses a column's type from the first row (and with
``StepAPI`` reports every expression as text), so an untyped expression whose first value is an
integer would truncate later decimals. The SQLite projection therefore tags each value with its
SQLite type (``_tagged_projection``); a statement that is not a query is read as the driver's text
and numbers are parsed by declared type.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.interfaces import QueryRows
from shared.providers.sql.family import register_database

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

Dialect = Literal["sqlite", "tsql"]
ConnectionFactory = Callable[[int], Any]
"""Opens a new pyodbc connection; receives the query's timeout in seconds (for login timeouts)."""

# Cells longer than this are cut: results are stored in Durable history and shown in a UI.
MAX_CELL_CHARS = 4000
# A result stops growing (reported as truncated) once its cells hold this many characters.
MAX_RESULT_CHARS = 1_000_000
# The schema name the sensitive file is attached under (unqualified names still resolve to it).
SENSITIVE_SCHEMA = "sensitive"
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
    """A read-only database reached through pyodbc; implements ``shared.providers.interfaces.SqlDatabase``."""

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

    def _configure(self, conn: Any, timeout_s: int, *, sensitive: bool) -> None:
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

    def execute(self, sql: str, *, max_rows: int, timeout_s: int, sensitive: bool = False) -> QueryRows:
        """Run one guarded, read-only query; at most ``max_rows`` rows, within ``timeout_s`` seconds.

        ``sensitive=True`` is for a statement a human approved; only a dialect that keeps sensitive
        tables apart (the SQLite sample) acts on it.
        """
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
        watchdog = Watchdog(timeout_s if self.dialect == "sqlite" else timeout_s + self._watchdog_grace_s)
        cursor: Any = None
        try:
            try:
                self._configure(conn, timeout_s, sensitive=sensitive)
                cursor = conn.cursor()
                watchdog.start(cursor)
                result = self._run(cursor, sql, max_rows)
            finally:
                watchdog.stop()
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=watchdog.fired, connecting=False) from exc
        finally:
            # The cursor first: the SQLite driver keeps a statement's native memory until its cursor
            # is closed, and closing the connection alone does not release it.
            close_quietly(cursor)
            close_quietly(conn)
        return result

    def _run(self, cursor: Any, sql: str, max_rows: int) -> QueryRows:
        """Execute the statement on ``cursor`` and fetch its rows (a dialect may rewrite or re-type)."""
        cursor.execute(sql)
        if cursor.description is None:
            return QueryRows(columns=[], rows=[], truncated=False)
        columns = [str(d[0]) for d in cursor.description]
        rows, truncated = self._fetch(cursor, max_rows, self._convert_row)
        return QueryRows(columns=columns, rows=rows, truncated=truncated)

    def _fetch(
        self, cursor: Any, max_rows: int, convert: Callable[[Sequence[Any]], list[Any]]
    ) -> tuple[list[list[Any]], bool]:
        """Fetch row by row, cutting cells at once, so memory stays bounded by what is kept."""
        return fetch_bounded(iter(cursor.fetchone, None), max_rows, convert)

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


def fetch_bounded(
    raw_rows: Iterator[Sequence[Any]], max_rows: int, convert: Callable[[Sequence[Any]], list[Any]]
) -> tuple[list[list[Any]], bool]:
    """At most ``max_rows`` converted rows and whether more were left (or the cells outgrew ``MAX_RESULT_CHARS``)."""
    rows: list[list[Any]] = []
    budget = MAX_RESULT_CHARS
    for raw in raw_rows:
        if len(rows) == max_rows:
            return rows, True
        row = convert(raw)
        budget -= sum(len(v) if isinstance(v, str) else 8 for v in row)
        if budget < 0 and rows:
            return rows, True  # the result is already big enough for a history entry and a UI
        rows.append(row)
    return rows, False


def close_quietly(resource: Any) -> None:
    """Close a cursor or connection, ignoring errors (a cancelled statement may refuse to close)."""
    if resource is None:
        return
    try:
        resource.close()
    except Exception:  # closing a cancelled cursor or connection can fail; nothing is left to release
        pass


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


class Watchdog:
    """Cancels a running statement once its time is up: ``cancel()`` on what it watches, from another thread."""

    def __init__(self, limit_s: float) -> None:
        self._limit_s = limit_s
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        self.fired = False

    def start(self, cursor: Any) -> None:
        """Start the clock; ``cursor.cancel()`` is called when it runs out before ``stop``."""
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
        """Stop the clock (the statement ended)."""
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


_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_QUERY_START = re.compile(r"(?:select|with|values)\b", re.IGNORECASE)
_DUPLICATE_SUFFIX = re.compile(r":\d+\Z")


def _query_body(sql: str) -> str | None:
    """The statement without trailing semicolons when it is a query (SELECT/WITH/VALUES), else None."""
    start = _LEADING_COMMENTS.match(sql)
    rest = sql[start.end() if start else 0 :]
    if not _QUERY_START.match(rest):
        return None
    return sql.rstrip().rstrip(";").rstrip()


def _tagged_projection(body: str, count: int) -> str:
    """Wrap a query so each cell comes back as tagged text, cut to ``MAX_CELL_CHARS`` by the engine.

    ``i``/``r``/``t``/``b`` + value keeps SQLite's own type per value (the driver would otherwise
    guess a column's type from its first row). A real is SQLite's own text of it (15 significant
    digits), as the driver renders it.
    """
    names = [f"c{i}" for i in range(count)]
    cells = [
        f"CASE typeof({n}) WHEN 'integer' THEN 'i' || {n} WHEN 'real' THEN 'r' || {n} "
        f"WHEN 'text' THEN 't' || substr({n}, 1, {MAX_CELL_CHARS + 1}) "
        f"WHEN 'blob' THEN 'b' || hex(substr({n}, 1, {MAX_CELL_CHARS // 2})) END"
        for n in names
    ]
    # The newline before ")" ends a trailing "--" comment inside the statement.
    return f"WITH _q({', '.join(names)}) AS (\n{body}\n) SELECT {', '.join(cells)} FROM _q"


def _untag(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return json_safe(value)
    tag, text = value[0], value[1:]
    if tag == "i":
        return int(text)
    if tag == "r":
        number = float(text)
        return number if math.isfinite(number) else None
    if tag == "b":
        return json_safe(bytes.fromhex(text))
    return json_safe(text)


def _read_only_uri(path: Path) -> str:
    return "file:" + quote(str(path.resolve()), safe="/") + "?mode=ro"


class SqliteOdbcDatabase(OdbcDatabase):
    """The SQLite sample database through the ``SQLite3`` ODBC driver, opened read-only.

    Tables the catalog marks sensitive must live in ``sensitive_path`` (default
    ``<stem>-sensitive.db`` beside the database, see ``shared.providers.sql.sampledata.sensitive_db_path``), which
    is attached only for ``execute(..., sensitive=True)``. A main file that holds a sensitive table is
    refused with CONFIG_ERROR, so the barrier cannot vanish with a database of your own.
    """

    def __init__(
        self,
        path: Path,
        *,
        driver: str = "SQLite3",
        prepare: Callable[[], None] | None = None,
        sensitive_path: Path | None = None,
        sensitive_tables: Iterable[str] | None = None,
    ) -> None:
        from shared.providers.sql.sampledata import sensitive_db_path

        self.path = Path(path)
        self.driver = driver
        self.sensitive_path = Path(sensitive_path) if sensitive_path is not None else sensitive_db_path(self.path)
        self._sensitive_tables = None if sensitive_tables is None else frozenset(t.lower() for t in sensitive_tables)
        self._checked_main: tuple[int, int, int] | None = None
        super().__init__(self._open, "sqlite", name=f"sqlite ({self.path.name})", prepare=prepare)

    @property
    def sensitive_tables(self) -> frozenset[str]:
        """Lower-case names that must not be in the main file (default: the catalog's sensitive tables)."""
        if self._sensitive_tables is None:
            from shared.providers.sql.sampledata import sensitive_tables

            self._sensitive_tables = sensitive_tables()
        return self._sensitive_tables

    def connection_string(self, timeout_s: int, *, extension: Path | None = None) -> str:
        """The ODBC connection string: a read-only URI, no file creation, busy timeout in ms, limits."""
        from shared.providers.sql import sqlite_limits

        uri = _read_only_uri(self.path)
        # Lock waits give up before the watchdog fires, so a locked file reads as TRANSIENT, not a timeout.
        busy_ms = max(100, int(timeout_s * 800))
        load = extension if extension is not None else sqlite_limits.extension_path()
        return f"DRIVER={{{self.driver}}};Database={uri};NoCreat=1;Timeout={busy_ms};LoadExt={load};StepAPI=1"

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

    def _configure(self, conn: Any, timeout_s: int, *, sensitive: bool) -> None:
        """Attach the sensitive file when approved, refuse a main file with sensitive tables, then seal.

        No query timeout to set: the driver ignores it (the watchdog enforces the limit).
        """
        from shared.providers.sql import sqlite_limits

        cursor = conn.cursor()
        try:
            self._check_main_file(cursor)
            if sensitive:
                self._attach_sensitive(cursor)
            try:
                found = cursor.execute("SELECT durable_seal()").fetchone()
            except Exception as exc:  # "no such function": the driver ignores a LoadExt that failed to load
                raise ProviderError(
                    ErrorCode.CONFIG_ERROR,
                    f"{self.name}: the SQLite limits extension did not load ({_error_parts(exc)[1]}); "
                    f"{sqlite_limits.INSTALL_HINT}"[:2000],
                ) from exc
            expected = sqlite_limits.expected_version()
            if found is None or found[0] != expected:
                raise ProviderError(
                    ErrorCode.CONFIG_ERROR,
                    f"{self.name}: the SQLite limits extension is {found[0] if found else None!r}, "
                    f"expected {expected!r}; {sqlite_limits.INSTALL_HINT}",
                )
        finally:
            close_quietly(cursor)

    def _check_main_file(self, cursor: Any) -> None:
        st = self.path.stat()
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._checked_main == key:
            return
        names = {str(r[0]).lower() for r in cursor.execute("SELECT name FROM main.sqlite_master").fetchall()}
        leaked = sorted(names & self.sensitive_tables)
        if leaked:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"{self.name}: {self.path} holds tables the catalog marks sensitive ({', '.join(leaked)}); "
                f"move them to {self.sensitive_path}, which is attached only for approved statements",
            )
        self._checked_main = key

    def _attach_sensitive(self, cursor: Any) -> None:
        if not self.sensitive_path.exists():
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"{self.name}: the sensitive tables' database file is missing: {self.sensitive_path}",
            )
        literal = _read_only_uri(self.sensitive_path).replace("'", "''")
        try:
            cursor.execute(f"ATTACH DATABASE '{literal}' AS {SENSITIVE_SCHEMA}")
        except Exception as exc:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"{self.name}: could not attach {self.sensitive_path}: {_error_parts(exc)[1]}"[:2000],
            ) from exc

    def _run(self, cursor: Any, sql: str, max_rows: int) -> QueryRows:
        """Run a query through a projection that caps and types every cell in the engine.

        The driver runs with ``StepAPI=1``, so rows stream one by one instead of the whole result
        being buffered, and the projection cuts each text to ``MAX_CELL_CHARS`` before it leaves
        SQLite. A statement that is not a query runs as it is (the engine limits still hold).
        """
        body = _query_body(sql)
        if body is None:
            return super()._run(cursor, sql, max_rows)
        cursor.execute(f"SELECT * FROM (\n{body}\n) LIMIT 0")  # the output columns, without running it
        columns: list[str] = []
        for d in cursor.description or []:
            name = str(d[0])
            base = _DUPLICATE_SUFFIX.sub("", name)
            # SQLite renames a repeated name "a:1" inside a subquery; the caller sees the name it wrote.
            columns.append(base if base in columns else name)
        cursor.execute(_tagged_projection(body, len(columns)))
        rows, truncated = self._fetch(cursor, max_rows, lambda row: [_untag(v) for v in row])
        return QueryRows(columns=columns, rows=rows, truncated=truncated)

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


@register_database(
    "sqlite",
    dialect="sqlite",
    default_schema="main",
    sensitive_barrier="the sensitive tables live in <stem>-sensitive.db, attached read-only only for an approved "
    "statement; the sealed connection cannot attach it itself",
    description="the local SQLite sample database",
    aliases=("sqlite", "local", "sample"),
)
def open_sample_database(settings: Settings) -> SqliteOdbcDatabase:
    """The configured SQLite database; the sample is built lazily from ``data/sql`` on the first query.

    A database file of your own at ``SQLITE_DATABASE_PATH`` is used as it is; the sample is (re)built
    only at the default path or when the configured file does not exist yet. Tables the catalog marks
    sensitive belong in ``<stem>-sensitive.db`` beside it (attached only for approved statements); a
    main file that holds one is refused with CONFIG_ERROR.
    """
    from shared.providers.sql.sampledata import DEFAULT_SAMPLE_DB, ensure_sample_db

    path = Path(settings.sqlite_database_path)

    def prepare() -> None:
        if path.resolve() == DEFAULT_SAMPLE_DB.resolve() or not path.exists():
            ensure_sample_db(path)

    return SqliteOdbcDatabase(path, prepare=prepare)
