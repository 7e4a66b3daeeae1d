"""Azure SQL through pyodbc and Microsoft's ODBC Driver 18, with Entra ID access tokens.

Execution, the row cap, JSON-safe values, the watchdog and the generic error rules come from
``shared.providers.sql.sqlite.OdbcDatabase``; this module adds what is specific to Azure SQL:

* the connection: a connection string built from settings (``Encrypt=yes``, optional
  ``ApplicationIntent=ReadOnly``) or taken from ``AZURE_SQL_CONNECTION_STRING``, and an Entra ID
  access token passed as the ``SQL_COPT_SS_ACCESS_TOKEN`` pre-connect attribute (a fresh token per
  connection; the credential caches it);
* the server-side timeout (the ODBC query timeout, which SQL Server enforces; it fails as HYT00);
* SQL Server error numbers: throttling and failover errors are transient, login and firewall
  errors are not;
* ``SET TEXTSIZE`` on every connection, so the server cuts ``(n)varchar(max)``/``text`` cells before
  they cross the wire (the client would otherwise fetch a whole cell before cutting it);
* sensitive tables: the app's database user is denied them (``infra/hooks/sql_grants.py``), so the
  ``sensitive`` flag of ``execute`` changes nothing here;
* schema introspection for the catalog through ``INFORMATION_SCHEMA.COLUMNS``, for allowed tables
  only, with parameters.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.interfaces import QueryRows
from shared.providers.sql.family import register_database
from shared.providers.sql.odbc import (
    MSODBC18,
    MSODBC_INSTALL_HINT,
    installed_drivers,
    odbc_value,
    parse_connection_string,
    require_driver,
)
from shared.providers.sql.sqlite import MAX_CELL_CHARS, OdbcDatabase, close_quietly

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)

# msodbcsql's pre-connect attribute for an Entra ID access token (msodbcsql.h).
SQL_COPT_SS_ACCESS_TOKEN = 1256
SQL_SCOPE = "https://database.windows.net/.default"
DEFAULT_PORT = 1433
LOGIN_TIMEOUT_S = 30
# Azure SQL asks clients to wait about ten seconds after these throttling/resource errors.
THROTTLE_RETRY_AFTER_MS = 10_000

# Error numbers Azure SQL documents as transient (reconfiguration, failover, throttling, busy).
TRANSIENT_ERRORS = frozenset(
    {
        233, 615, 926, 997, 1204, 1205, 1222, 4060, 4221, 10053, 10054, 10060, 10928, 10929, 10936,
        40143, 40197, 40501, 40540, 40613, 42108, 42109, 49918, 49919, 49920,
    }
)  # fmt: skip
THROTTLING_ERRORS = frozenset({40501, 10928, 10929, 49918, 49919, 49920})
AUTH_ERRORS = frozenset({18456, 18452, 18470, 33155, 33156})
# 40615: the client's IP is not allowed by the server firewall; 40532: server name unknown.
CONFIG_ERRORS = frozenset({40615, 40532})
QUERY_TIMEOUT_STATES = frozenset({"HYT00"})
# Bytes the server returns per (n)varchar(max)/text/image cell: one UTF-16 character more than the
# client keeps, so ``json_safe`` still sees (and marks) a cut cell.
TEXTSIZE_BYTES = (MAX_CELL_CHARS + 1) * 2
SET_TEXTSIZE = f"SET TEXTSIZE {TEXTSIZE_BYTES}"
# Keys that carry credentials: when present, the connection string authenticates on its own.
_CREDENTIAL_KEYS = frozenset({"uid", "pwd", "authentication", "trusted_connection"})
_NATIVE = re.compile(r"\((\d+)\)")
_IDENT = re.compile(r"^[^\x00-\x1f\[\]\"]{1,128}$")


def pack_access_token(token: str) -> bytes:
    """Encode a token for ``SQL_COPT_SS_ACCESS_TOKEN``: little-endian byte length, then UTF-16-LE bytes.

    The driver wants the token's bytes each followed by a zero byte (UTF-16-LE of an ASCII JWT),
    prefixed by their count as a 4-byte little-endian integer, with no terminator.
    """
    if not token:
        raise ProviderError(ErrorCode.AUTH_FAILED, "the Entra ID access token for Azure SQL is empty")
    raw = token.encode("utf-16-le")
    return struct.pack(f"<I{len(raw)}s", len(raw), raw)


def server_address(server: str) -> str:
    """``tcp:<fqdn>,<port>`` from a server name, an FQDN, or an already complete address."""
    value = server.strip()
    if not value:
        raise ProviderError(ErrorCode.CONFIG_ERROR, "AZURE_SQL_SERVER is empty")
    if value.lower().startswith("tcp:"):
        value = value[4:]
    host, _, port = value.partition(",")
    if "." not in host:
        host = f"{host}.database.windows.net"  # a bare logical server name
    return f"tcp:{host},{port or DEFAULT_PORT}"


def build_connection_string(
    *,
    driver: str,
    server: str,
    database: str,
    read_only_intent: bool = False,
    encrypt: str = "yes",
    trust_server_certificate: bool = False,
    host_name_in_certificate: str | None = None,
    application_name: str | None = "durable-ai-jobs",
) -> str:
    """The Driver 18 connection string for token authentication (no UID/PWD/Authentication)."""
    if not database.strip():
        raise ProviderError(ErrorCode.CONFIG_ERROR, "AZURE_SQL_DATABASE is empty")
    parts = [
        ("Driver", driver),
        ("Server", server_address(server)),
        ("Database", database.strip()),
        ("Encrypt", encrypt),
        ("TrustServerCertificate", "yes" if trust_server_certificate else "no"),
    ]
    if host_name_in_certificate:
        parts.append(("HostNameInCertificate", host_name_in_certificate))
    if read_only_intent:
        parts.append(("ApplicationIntent", "ReadOnly"))
    if application_name:
        parts.append(("APP", application_name))
    return _join(parts)


def _join(parts: Sequence[tuple[str, str]]) -> str:
    # The driver name is always braced (it has spaces); other values only when they need it.
    return ";".join(
        f"{k}={{{v.replace('}', '}}')}}}" if k.lower() == "driver" else f"{k}={odbc_value(v)}" for k, v in parts
    )


def complete_connection_string(text: str, *, default_driver: str, read_only_intent: bool) -> tuple[str, str, bool]:
    """Fill in a user's connection string: the driver when missing, ApplicationIntent when asked.

    Returns the string, the driver it names, and whether it carries its own credentials (otherwise
    the caller adds an access token).
    """
    try:
        pairs = parse_connection_string(text)
    except ValueError as exc:
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"AZURE_SQL_CONNECTION_STRING is malformed: {exc}") from exc
    keys = {k.lower(): v for k, v in pairs}
    driver = keys.get("driver") or default_driver
    if "driver" not in keys:
        pairs.insert(0, ("Driver", driver))
    if read_only_intent and "applicationintent" not in keys:
        pairs.append(("ApplicationIntent", "ReadOnly"))
    has_credentials = bool(_CREDENTIAL_KEYS & set(keys))
    return _join(pairs), driver, has_credentials


def native_errors(message: str) -> set[int]:
    """The SQL Server error numbers pyodbc put in a message (``... (40613) (SQLDriverConnect)``)."""
    return {int(n) for n in _NATIVE.findall(message)}


def classify_sql_server_error(sqlstate: str, message: str) -> tuple[ErrorCode | None, int | None]:
    """Azure SQL rules first: (code or None to fall back to the generic rules, retry-after ms)."""
    numbers = native_errors(message)
    if sqlstate in QUERY_TIMEOUT_STATES:
        return ErrorCode.SQL_TIMEOUT, None
    if numbers & THROTTLING_ERRORS:
        return ErrorCode.TRANSIENT, THROTTLE_RETRY_AFTER_MS
    if numbers & TRANSIENT_ERRORS:
        return ErrorCode.TRANSIENT, None
    if numbers & CONFIG_ERRORS:
        return ErrorCode.CONFIG_ERROR, None
    if numbers & AUTH_ERRORS or sqlstate == "28000":
        return ErrorCode.AUTH_FAILED, None
    if sqlstate.startswith("08") or sqlstate == "HYT01":
        # Connection-level failures (communication link, login timeout) deserve a retry.
        return ErrorCode.TRANSIENT, None
    return None, None


class ColumnSchema(BaseModel):
    """One column as INFORMATION_SCHEMA describes it."""

    name: str
    data_type: str
    nullable: bool
    max_length: int | None = None
    precision: int | None = None
    scale: int | None = None

    @property
    def sql_type(self) -> str:
        """The declared T-SQL type: ``nvarchar(100)``, ``nvarchar(max)``, ``decimal(10,2)``, ``int``."""
        kind = self.data_type.lower()
        if self.max_length is not None and kind in _LENGTH_TYPES:
            return f"{kind}({'max' if self.max_length == -1 else self.max_length})"
        if kind in ("decimal", "numeric") and self.precision is not None:
            return f"{kind}({self.precision},{self.scale or 0})"
        return kind


_LENGTH_TYPES = frozenset({"char", "varchar", "nchar", "nvarchar", "binary", "varbinary"})


class TableSchema(BaseModel):
    """One allowed table's columns, in ordinal order."""

    schema_name: str
    name: str
    columns: list[ColumnSchema] = Field(default_factory=list)

    @property
    def qualified_name(self) -> str:
        """``schema.table``."""
        return f"{self.schema_name}.{self.name}"

    def column_types(self) -> dict[str, str]:
        """Column name → declared T-SQL type, in ordinal order (what a catalog merges)."""
        return {c.name: c.sql_type for c in self.columns}


COLUMNS_SQL = (
    "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.IS_NULLABLE, c.CHARACTER_MAXIMUM_LENGTH, "
    "c.NUMERIC_PRECISION, c.NUMERIC_SCALE "
    "FROM INFORMATION_SCHEMA.COLUMNS AS c "
    "WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? "
    "ORDER BY c.ORDINAL_POSITION"
)


def split_table_name(name: str, *, default_schema: str = "dbo") -> tuple[str, str]:
    """``dbo.orders`` / ``[dbo].[orders]`` / ``orders`` → (schema, table); rejects anything else."""
    parts = [p.strip().strip("[]").strip('"') for p in name.strip().split(".")]
    if len(parts) == 1:
        parts.insert(0, default_schema)
    if len(parts) != 2 or not all(_IDENT.match(p) for p in parts):
        raise ProviderError(ErrorCode.INVALID_INPUT, f"not a table name: {name!r}")
    return parts[0], parts[1]


class AzureSqlConnector:
    """Opens pyodbc connections to Azure SQL: checks the driver, adds a fresh token per connection."""

    def __init__(
        self,
        connection_string: str,
        *,
        driver: str,
        token_provider: Callable[[], str] | None,
        login_timeout_s: int = LOGIN_TIMEOUT_S,
    ) -> None:
        self._connection_string = connection_string
        self.driver = driver
        self._token_provider = token_provider
        self.login_timeout_s = login_timeout_s

    def attrs_before(self) -> dict[int, bytes] | None:
        """Pre-connect attributes: the packed access token when token auth is used."""
        if self._token_provider is None:
            return None
        try:
            token = self._token_provider()
        except ProviderError:
            raise
        except Exception as exc:  # azure-identity raises ClientAuthenticationError and friends
            raise ProviderError(
                ErrorCode.AUTH_FAILED, f"could not get an Entra ID token for Azure SQL: {exc}"[:2000]
            ) from exc
        return {SQL_COPT_SS_ACCESS_TOKEN: pack_access_token(token)}

    def connect(self, timeout_s: int) -> Any:
        """A new autocommit connection (the statement timeout is set per query by the database)."""
        require_driver(self.driver, install_hint=MSODBC_INSTALL_HINT if self.driver == MSODBC18 else None)
        import pyodbc

        attrs = self.attrs_before()
        kwargs: dict[str, Any] = {"autocommit": True, "timeout": self.login_timeout_s}
        if attrs:
            kwargs["attrs_before"] = attrs
        return pyodbc.connect(self._connection_string, **kwargs)


def token_provider_for(credential: TokenCredential) -> Callable[[], str]:
    """A callable returning a current Azure SQL access token (the credential caches and refreshes)."""

    def get() -> str:
        return credential.get_token(SQL_SCOPE).token

    return get


class AzureSqlDatabase(OdbcDatabase):
    """``SqlDatabase`` for Azure SQL (T-SQL dialect)."""

    def __init__(self, connector: AzureSqlConnector, *, name: str = "azure sql") -> None:
        super().__init__(connector.connect, "tsql", name=name)
        self.connector = connector

    def execute(self, sql: str, *, max_rows: int, timeout_s: int, sensitive: bool = False) -> QueryRows:
        """Run one guarded query; ``sensitive`` changes nothing: the database user is denied those tables."""
        return super().execute(sql, max_rows=max_rows, timeout_s=timeout_s, sensitive=sensitive)

    def _configure(self, conn: Any, timeout_s: int, *, sensitive: bool) -> None:
        """The server-side query timeout, then ``SET TEXTSIZE`` (cells are cut on the server)."""
        super()._configure(conn, timeout_s, sensitive=sensitive)
        if not _is_sql_server(conn):
            # Only the tests' SQLite stand-in gets here; T-SQL's SET would be a syntax error there.
            return
        cursor = conn.cursor()
        try:
            cursor.execute(SET_TEXTSIZE)
        finally:
            close_quietly(cursor)

    def _classify_extra(self, sqlstate: str, message: str) -> ErrorCode | None:
        return classify_sql_server_error(sqlstate, message)[0]

    def _classify(self, exc: BaseException, *, timed_out: bool, connecting: bool) -> ProviderError:
        args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
        if connecting and args and args[0] in QUERY_TIMEOUT_STATES:
            # HYT00 from SQLDriverConnect is the login timeout (e.g. a serverless database resuming):
            # worth a retry, unlike a query that ran out of time.
            return ProviderError(ErrorCode.TRANSIENT, f"{self.name}: login timed out: {args[-1]}"[:2000])
        error = super()._classify(exc, timed_out=timed_out, connecting=connecting)
        if len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            retry_after = classify_sql_server_error(args[0], args[1])[1]
            if retry_after is not None and error.code is ErrorCode.TRANSIENT:
                error.retry_after_ms = retry_after
        return error

    def _missing_driver_message(self, detail: str) -> str:
        hint = MSODBC_INSTALL_HINT if self.connector.driver == MSODBC18 else "install it and register it"
        return f"the ODBC driver '{self.connector.driver}' is not available ({detail}); {hint}"

    def describe_tables(self, tables: Sequence[str], *, timeout_s: int = 15) -> dict[str, TableSchema]:
        """Columns of the allowed tables, keyed by the name as given; unknown tables are left out."""
        wanted: list[tuple[str, str, str]] = []
        for name in tables:
            schema_name, table = split_table_name(name)
            wanted.append((name, schema_name, table))
        if not wanted:
            return {}
        try:
            conn = self.connector.connect(timeout_s)
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=False, connecting=True) from exc
        result: dict[str, TableSchema] = {}
        try:
            conn.timeout = timeout_s
            cursor = conn.cursor()
            for given, schema_name, table in wanted:
                rows = cursor.execute(COLUMNS_SQL, schema_name, table).fetchall()
                if not rows:
                    logger.warning("Azure SQL: allowed table %s has no columns (missing or not visible)", given)
                    continue
                result[given] = TableSchema(
                    schema_name=schema_name,
                    name=table,
                    columns=[
                        ColumnSchema(
                            name=str(r[0]),
                            data_type=str(r[1]),
                            nullable=str(r[2]).upper() == "YES",
                            max_length=_int_or_none(r[3]),
                            precision=_int_or_none(r[4]),
                            scale=_int_or_none(r[5]),
                        )
                        for r in rows
                    ],
                )
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=False, connecting=False) from exc
        finally:
            try:
                conn.close()
            except Exception:  # nothing is left to release on a broken connection
                pass
        return result


def _is_sql_server(conn: Any) -> bool:
    import pyodbc

    try:
        name = str(conn.getinfo(pyodbc.SQL_DBMS_NAME))
    except Exception:  # a driver that cannot say is treated as SQL Server: the SET is then sent
        return True
    return "sql server" in name.lower()


def _int_or_none(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def connector_from_settings(settings: Settings, *, credential: TokenCredential | None = None) -> AzureSqlConnector:
    """The connector described by settings: a full connection string, or server + database + token."""
    raw = settings.azure_sql_connection_string.get_secret_value() if settings.azure_sql_connection_string else ""
    if raw.strip():
        text, driver, has_credentials = complete_connection_string(
            raw, default_driver=settings.azure_sql_odbc_driver, read_only_intent=settings.azure_sql_read_only_intent
        )
        needs_token = not has_credentials
    else:
        if not settings.azure_sql_server or not settings.azure_sql_database:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                "SQL_PROVIDER=azure_sql needs AZURE_SQL_SERVER and AZURE_SQL_DATABASE, or AZURE_SQL_CONNECTION_STRING",
            )
        driver = settings.azure_sql_odbc_driver
        text = build_connection_string(
            driver=driver,
            server=settings.azure_sql_server,
            database=settings.azure_sql_database,
            read_only_intent=settings.azure_sql_read_only_intent,
        )
        needs_token = True
    token_provider = None
    if needs_token:
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        token_provider = token_provider_for(credential)
    try:
        installed_drivers()  # logs what is installed; a missing driver fails the first query, clearly
    except ProviderError as exc:
        logger.warning("Azure SQL: %s", exc.message)
    logger.info(
        "Azure SQL: driver %s, %s authentication%s",
        driver,
        "Entra ID token" if needs_token else "connection-string",
        ", read-only intent" if settings.azure_sql_read_only_intent else "",
    )
    return AzureSqlConnector(text, driver=driver, token_provider=token_provider)


@register_database(
    "azure_sql",
    dialect="tsql",
    default_schema="dbo",
    sensitive_barrier="the app's database user is granted no SELECT on the sensitive tables, so they stay "
    "unreadable to every statement, approved or not",
    description="Azure SQL Database: the production data in Azure",
    aliases=("azure", "production", "prod"),
)
def build_azure_sql_database(settings: Settings, *, credential: TokenCredential | None = None) -> AzureSqlDatabase:
    """Build the Azure SQL database from settings (no connection until the first query)."""
    return AzureSqlDatabase(connector_from_settings(settings, credential=credential))
