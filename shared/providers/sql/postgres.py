"""PostgreSQL, a member of the database family (``SQL_PROVIDER=postgresql``), through psycopg 3.

Local or Azure Database for PostgreSQL: ``POSTGRES_HOST``, ``POSTGRES_DATABASE``, ``POSTGRES_USER`` and either
``POSTGRES_PASSWORD`` or, when it is unset, a Microsoft Entra token (``azure-identity``, scope
``https://ossrdbms-aad.database.windows.net/.default``) sent as the password, fresh for each connection.

What is enforced for a query, per layer:

* Read-only: the session's ``default_transaction_read_only`` is on and the query runs in a ``BEGIN READ ONLY``
  transaction that is rolled back, so the server refuses any write (also one hidden in a function or a
  data-modifying ``WITH``); the login role should hold SELECT only, as for Azure SQL.
* One query: it runs as ``DECLARE ... CURSOR FOR <query>`` over the extended protocol, so the server accepts
  exactly one SELECT (or VALUES): no second statement, no DML, no utility command.
* Time: ``statement_timeout`` (and ``lock_timeout``) on the server, plus a watchdog that cancels from the client
  a little later in case the server does not answer; either way the error is SQL_TIMEOUT.
* Rows: the guard caps rows in the SQL; rows are fetched from the server-side cursor in batches and at most
  ``max_rows`` are kept, ``truncated`` telling that more were left (as for the other members).
* Sensitive tables (those the catalog marks): the login role (``POSTGRES_USER``) must not be able to read
  them, which is checked in the transaction of every unapproved query (CONFIG_ERROR naming the tables
  otherwise, so the barrier cannot vanish with a grant). An approved statement (``sensitive=True``)
  connects as ``POSTGRES_SENSITIVE_USER`` instead, a second login role that may read them; without one,
  they stay unreadable to every statement, as on Azure SQL. Why a second login and not ``SET ROLE``: a
  role the session may switch to is one a statement may switch to as well (``set_config('role', ...)``),
  so only a login the unapproved connection never has keeps the barrier independent of the SQL guard,
  as the SQLite member's separate file does.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.interfaces import QueryRows
from shared.providers.sql.family import register_database
from shared.providers.sql.sqlite import MAX_CELL_CHARS, Watchdog, fetch_bounded, json_safe

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)

ENTRA_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"
DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 15
# Extra time granted to the server's statement_timeout before the client cancels the query itself.
DEFAULT_WATCHDOG_GRACE_S = 2.0
# Rows fetched from the server-side cursor per round trip.
FETCH_BATCH = 200
APPLICATION_NAME = "durable-ai-jobs"

# SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
_TIMEOUT_STATES = frozenset({"57014", "55P03"})  # query_canceled (statement_timeout, cancel), lock_not_available
_AUTH_STATES = frozenset({"28000", "28P01"})  # invalid_authorization_specification, invalid_password
_CONFIG_STATES = frozenset({"3D000", "3F000", "42704"})  # unknown database, schema, object in the set-up
_TRANSIENT_STATES = frozenset({"40001", "40P01", "53300", "57P01", "57P02", "57P03", "55006"})
# Connection failures libpq reports without a SQLSTATE.
_AUTH_WORDS = ("password authentication failed", "no password supplied", "pg_hba.conf", "role ", "access token")

_SENSITIVE_READABLE_SQL = """
SELECT n.nspname || '.' || c.relname
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE lower(c.relname) = ANY(%s) AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND (pg_catalog.has_table_privilege(c.oid, 'SELECT') OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT'))
ORDER BY 1
"""


@dataclass(frozen=True)
class PostgresLogin:
    """A login role and where its password comes from (a fixed secret or an Entra token per connection)."""

    user: str
    password: Callable[[], str] | None = None


class PostgresDatabase:
    """``SqlDatabase`` for PostgreSQL (dialect ``postgres``); connects on each query, never at construction."""

    dialect = "postgres"

    def __init__(
        self,
        *,
        host: str,
        dbname: str,
        login: PostgresLogin,
        port: int = 5432,
        sslmode: str = "require",
        sensitive_login: PostgresLogin | None = None,
        sensitive_tables: Iterable[str] | None = None,
        name: str = "postgresql",
        watchdog_grace_s: float = DEFAULT_WATCHDOG_GRACE_S,
    ) -> None:
        self.host = host
        self.port = port
        self.dbname = dbname
        self.sslmode = sslmode
        self.login = login
        self.sensitive_login = sensitive_login
        self.name = name
        self._sensitive_tables = None if sensitive_tables is None else sorted({t.lower() for t in sensitive_tables})
        self._watchdog_grace_s = watchdog_grace_s

    @property
    def sensitive_tables(self) -> list[str]:
        """Lower-case names the login role must not read (default: the catalog's sensitive tables)."""
        if self._sensitive_tables is None:
            from shared.providers.sql.catalog import load_catalog

            self._sensitive_tables = sorted(t.lower() for t in load_catalog().sensitive_tables())
        return self._sensitive_tables

    def connection_kwargs(self, login: PostgresLogin, timeout_s: int) -> dict[str, Any]:
        """psycopg.connect keyword arguments for ``login`` (no conninfo string is built by hand)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": login.user,
            "sslmode": self.sslmode,
            "connect_timeout": max(2, min(CONNECT_TIMEOUT_S, timeout_s)),
            "application_name": APPLICATION_NAME,
        }
        if login.password is not None:
            try:
                kwargs["password"] = login.password()
            except ProviderError:
                raise
            except Exception as exc:  # azure-identity raises ClientAuthenticationError and friends
                raise ProviderError(
                    ErrorCode.AUTH_FAILED, f"{self.name}: could not get an Entra ID token for PostgreSQL: {exc}"[:2000]
                ) from exc
        return kwargs

    # -- the protocol ------------------------------------------------------------------------------

    def execute(self, sql: str, *, max_rows: int, timeout_s: int, sensitive: bool = False) -> QueryRows:
        """Run one guarded query read-only: at most ``max_rows`` rows, within ``timeout_s`` seconds.

        ``sensitive=True`` (a statement a human approved) connects as the sensitive reader when one is
        configured; otherwise the login role runs it and must not be able to read the sensitive tables.
        """
        if max_rows < 1:
            raise ProviderError(ErrorCode.INVALID_INPUT, "max_rows must be at least 1")
        timeout_s = max(1, int(timeout_s))
        approved_login = self.sensitive_login if sensitive else None
        try:
            import psycopg
        except ImportError as exc:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR, f"{self.name}: psycopg is not installed ({exc}); pip install 'psycopg[binary]'"
            ) from exc
        try:
            conn = psycopg.connect(**self.connection_kwargs(approved_login or self.login, timeout_s), autocommit=True)
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=False, connecting=True) from exc
        watchdog = Watchdog(timeout_s + self._watchdog_grace_s)
        try:
            try:
                self._configure(conn, timeout_s)
                watchdog.start(_Canceller(conn))
                with conn.transaction():
                    if approved_login is None:
                        self._check_barrier(conn)
                    result = self._run(conn, sql, max_rows)
                    # Nothing may stay: the transaction ends in a rollback even when it only read.
                    raise psycopg.Rollback()
            finally:
                watchdog.stop()
            return result
        except ProviderError:
            raise
        except Exception as exc:
            raise self._classify(exc, timed_out=watchdog.fired, connecting=False) from exc
        finally:
            try:
                conn.close()
            except Exception:  # a cancelled connection may refuse to close; nothing is left to release
                pass

    def _configure(self, conn: Any, timeout_s: int) -> None:
        """Session settings, before the read-only transaction: timeouts, read-only default, search path."""
        ms = timeout_s * 1000
        with conn.cursor() as cursor:
            # Literal integers written by this code, never model text: no parameters needed.
            cursor.execute(f"SET statement_timeout = {ms}")
            cursor.execute(f"SET lock_timeout = {ms}")
            cursor.execute(f"SET idle_in_transaction_session_timeout = {ms + 5000}")
            cursor.execute("SET default_transaction_read_only = on")
            cursor.execute(f"SET search_path = {DEFAULT_SCHEMA}")
        conn.read_only = True
        conn.autocommit = False

    def _check_barrier(self, conn: Any) -> None:
        """CONFIG_ERROR when the login role can read a table the catalog marks sensitive."""
        if not self.sensitive_tables:
            return
        with conn.cursor() as cursor:
            cursor.execute(_SENSITIVE_READABLE_SQL, [self.sensitive_tables])
            readable = [str(r[0]) for r in cursor.fetchall()]
        if readable:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"{self.name}: the login role {self.login.user!r} can read tables the catalog marks sensitive "
                f"({', '.join(readable)}); revoke SELECT on them and grant it to POSTGRES_SENSITIVE_USER, which "
                "is used only for approved statements",
            )

    def _run(self, conn: Any, sql: str, max_rows: int) -> QueryRows:
        """DECLARE a server-side cursor for the query (one SELECT only, refused otherwise) and fetch from it."""
        with conn.cursor(name="durable_query", scrollable=False, withhold=False) as cursor:
            cursor.itersize = max(1, min(FETCH_BATCH, max_rows + 1))
            cursor.execute(sql)
            columns = [str(d.name) for d in cursor.description or []]
            rows, truncated = fetch_bounded(iter(cursor), max_rows, _convert_row)
        return QueryRows(columns=columns, rows=rows, truncated=truncated)

    # -- errors --------------------------------------------------------------------------------------

    def _classify(self, exc: BaseException, *, timed_out: bool, connecting: bool) -> ProviderError:
        sqlstate = str(getattr(exc, "sqlstate", None) or "")
        message = " ".join(str(exc).split()) or type(exc).__name__
        if timed_out or sqlstate in _TIMEOUT_STATES:
            return ProviderError(
                ErrorCode.SQL_TIMEOUT, f"{self.name}: the query exceeded its time limit ({message})"[:2000]
            )
        code = classify_postgres_error(sqlstate, message, connecting=connecting)
        return ProviderError(code, f"{self.name}: {message}"[:2000])


def classify_postgres_error(sqlstate: str, message: str, *, connecting: bool) -> ErrorCode:
    """The contract's code for a PostgreSQL failure, by SQLSTATE (or libpq's words when it has none)."""
    lowered = message.lower()
    if sqlstate in _AUTH_STATES or (connecting and not sqlstate and any(w in lowered for w in _AUTH_WORDS)):
        return ErrorCode.AUTH_FAILED
    if sqlstate in _CONFIG_STATES or (connecting and "does not exist" in lowered):
        return ErrorCode.CONFIG_ERROR
    if sqlstate.startswith("08") or sqlstate in _TRANSIENT_STATES:
        return ErrorCode.TRANSIENT
    if connecting:
        # Refused, unreachable or timed out before the server spoke: worth a retry.
        return ErrorCode.TRANSIENT
    return ErrorCode.SQL_ERROR


@dataclass
class _Canceller:
    """What the watchdog cancels: the connection's running query."""

    conn: Any

    def cancel(self) -> None:
        """Ask the server to cancel the running query."""
        self.conn.cancel_safe(timeout=5.0)


def _convert_row(row: Sequence[Any]) -> list[Any]:
    return [_pg_value(v) for v in row]


def _pg_value(value: Any) -> Any:
    """A psycopg value made JSON-safe: arrays and JSON as text, intervals as seconds."""
    if isinstance(value, list | dict | tuple):
        return json_safe(json.dumps(value, default=str)[: MAX_CELL_CHARS + 1])
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return json_safe(value)


def token_provider_for(credential: TokenCredential) -> Callable[[], str]:
    """A callable returning a current Entra token for Azure Database for PostgreSQL (cached by the credential)."""

    def get() -> str:
        return credential.get_token(ENTRA_SCOPE).token

    return get


def _login(user: str, password: str | None, entra: Callable[[], Callable[[], str]]) -> PostgresLogin:
    if password:
        return PostgresLogin(user, lambda: password)
    return PostgresLogin(user, entra())


@register_database(
    "postgresql",
    dialect="postgres",
    default_schema=DEFAULT_SCHEMA,
    sensitive_barrier="the login role may not read the sensitive tables (checked on every query); an approved "
    "statement alone connects as POSTGRES_SENSITIVE_USER, a second login role that may",
    description="PostgreSQL (Azure Database for PostgreSQL or a server of your own)",
    aliases=("postgres", "postgresql", "pg"),
)
def build_postgres_database(settings: Settings, *, credential: TokenCredential | None = None) -> PostgresDatabase:
    """Build the PostgreSQL database from settings (no connection until the first query)."""
    missing = [
        name
        for name, value in (
            ("POSTGRES_HOST", settings.postgres_host),
            ("POSTGRES_DATABASE", settings.postgres_database),
            ("POSTGRES_USER", settings.postgres_user),
        )
        if not (value or "").strip()
    ]
    if missing:
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"SQL_PROVIDER=postgresql needs {', '.join(missing)}")
    made: list[Callable[[], str]] = []

    def entra() -> Callable[[], str]:
        # One credential for both logins; built only when a password is missing.
        if not made:
            nonlocal credential
            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
            made.append(token_provider_for(credential))
        return made[0]

    def secret(value: Any) -> str | None:
        return value.get_secret_value() if value is not None else None

    login = _login(str(settings.postgres_user).strip(), secret(settings.postgres_password), entra)
    sensitive_user = (settings.postgres_sensitive_user or "").strip()
    sensitive_login = (
        _login(sensitive_user, secret(settings.postgres_sensitive_password), entra) if sensitive_user else None
    )
    logger.info(
        "PostgreSQL: %s:%s/%s as %s (%s authentication), sensitive tables %s",
        settings.postgres_host,
        settings.postgres_port,
        settings.postgres_database,
        login.user,
        "password" if settings.postgres_password else "Entra ID token",
        f"readable only by {sensitive_user} for approved statements" if sensitive_login else "never readable",
    )
    return PostgresDatabase(
        host=str(settings.postgres_host).strip(),
        port=settings.postgres_port,
        dbname=str(settings.postgres_database).strip(),
        sslmode=settings.postgres_sslmode,
        login=login,
        sensitive_login=sensitive_login,
    )
