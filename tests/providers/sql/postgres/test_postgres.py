"""The PostgreSQL member against a real server: guarded queries, read-only, timeout, row cap, errors, Entra tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from psycopg import sql

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.llm.offline.sql_writer import write_sql_offline
from shared.providers.sql import family
from shared.providers.sql.catalog import load_catalog
from shared.providers.sql.postgres import ENTRA_SCOPE, PostgresDatabase, PostgresLogin, build_postgres_database
from shared.providers.sql.sqlite import SqliteOdbcDatabase
from shared.runtime.settings import Settings
from shared.runtime.sqlguard.guard import GuardReason, guard_sql
from tests.providers.sql.postgres.conftest import DBNAME, READER, Sample
from tests.providers.sql.postgres.server import new_password

pytestmark = pytest.mark.slow  # a real server starts for these tests

CATALOG = load_catalog()
ALLOWED = CATALOG.allowed_tables()


def _guarded(text: str, *, max_rows: int = 50) -> str:
    verdict = guard_sql(text, dialect="postgres", allowed_tables=ALLOWED, max_rows=max_rows, columns=CATALOG.columns())
    assert verdict.accepted and verdict.sql, verdict.message
    return verdict.sql


def _error(db: PostgresDatabase, text: str, **kwargs: Any) -> ProviderError:
    with pytest.raises(ProviderError) as err:
        db.execute(text, max_rows=kwargs.pop("max_rows", 50), timeout_s=kwargs.pop("timeout_s", 10), **kwargs)
    return err.value


def _rounded(rows: list[list[Any]]) -> list[list[Any]]:
    return [[round(v, 4) if isinstance(v, float) else v for v in row] for row in rows]


def test_the_family_knows_postgresql() -> None:
    member = family.member("postgresql")
    assert (member.dialect, member.default_schema) == ("postgres", "public")
    assert family.dialect_for(Settings(sql_provider="postgresql")) == "postgres"
    assert set(family.providers()) >= {"sqlite", "azure_sql", "postgresql"}


QUESTIONS = [
    "Which region had the most returns in Q3?",
    "Top 5 products by revenue in 2025",
    "revenue by month",
    "return rate by category by quarter",
    "average order value by channel",
]


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_same_questions_give_the_same_answers_as_sqlite(
    pg_db: PostgresDatabase, sample_db: SqliteOdbcDatabase, question: str
) -> None:
    answers = []
    for db, dialect in ((sample_db, "sqlite"), (pg_db, "postgres")):
        draft = write_sql_offline(question, CATALOG, dialect)
        assert draft is not None
        verdict = guard_sql(draft.sql, dialect=dialect, allowed_tables=ALLOWED, max_rows=100, columns=CATALOG.columns())
        assert verdict.accepted and verdict.sql, verdict.message
        answers.append(db.execute(verdict.sql, max_rows=100, timeout_s=10))
    lite, pg = answers
    assert pg.columns == lite.columns
    assert _rounded(pg.rows) == _rounded(lite.rows) and pg.rows


def test_guarded_queries_run_and_values_are_json_safe(pg_db: PostgresDatabase) -> None:
    rows = pg_db.execute(
        _guarded("SELECT TOP 2 order_id, order_date, channel FROM orders ORDER BY order_id"), max_rows=50, timeout_s=5
    )
    assert rows.columns == ["order_id", "order_date", "channel"]
    assert rows.rows == [[1, "2025-01-01", rows.rows[0][2]], [2, rows.rows[1][1], rows.rows[1][2]]]
    money = pg_db.execute(_guarded("SELECT SUM(refund_amount) AS refunds FROM returns"), max_rows=5, timeout_s=5)
    assert isinstance(money.rows[0][0], float) and not money.truncated
    # The guard rejects what the member cannot run; its reasons name PostgreSQL.
    for text, reason in (
        ("SELECT CAST(strftime('%Y', order_date) AS INTEGER) FROM orders", GuardReason.FUNCTION_NOT_ALLOWED),
        ("SELECT * FROM pg_user", GuardReason.SYSTEM_CATALOG),
        ("SELECT pg_sleep(5)", GuardReason.FORBIDDEN_FUNCTION),
        ("SELECT email FROM customer_contacts", GuardReason.TABLE_NOT_ALLOWED),
    ):
        verdict = guard_sql(text, dialect="postgres", allowed_tables=ALLOWED, max_rows=5)
        assert not verdict.accepted and verdict.reason_code is reason, (text, verdict)


def test_row_cap_and_truncated(pg_db: PostgresDatabase) -> None:
    capped = pg_db.execute(
        _guarded("SELECT order_id FROM orders ORDER BY order_id", max_rows=5), max_rows=5, timeout_s=5
    )
    assert len(capped.rows) == 5 and capped.truncated
    exact = pg_db.execute(_guarded("SELECT name FROM regions", max_rows=4), max_rows=4, timeout_s=5)
    assert len(exact.rows) == 4 and not exact.truncated
    # Without the guard's LIMIT the member still keeps at most max_rows (fetched from a server-side cursor).
    raw = pg_db.execute("SELECT order_id FROM orders", max_rows=7, timeout_s=5)
    assert len(raw.rows) == 7 and raw.truncated


WRITES = [
    "DELETE FROM regions",
    "UPDATE regions SET name = 'x'",
    "INSERT INTO regions (region_id, name) VALUES (99, 'Nowhere')",
    "WITH gone AS (DELETE FROM regions RETURNING *) SELECT * FROM gone",
    "CREATE TABLE stolen AS SELECT * FROM orders",
    "SELECT name FROM regions; DELETE FROM regions",
    "SELECT name FROM regions FOR UPDATE",
]


@pytest.fixture(scope="module")
def writer(pg_sample: Sample) -> Iterator[PostgresDatabase]:
    """A login role that holds write grants: only the read-only transaction stands between it and the data."""
    password = new_password()
    with pg_sample.server.admin(DBNAME) as admin:
        admin.execute(sql.SQL("CREATE ROLE app_writer LOGIN PASSWORD {}").format(password))
        admin.execute("GRANT CONNECT ON DATABASE sample TO app_writer")
        admin.execute("GRANT USAGE, CREATE ON SCHEMA public TO app_writer")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON regions, orders TO app_writer")
        admin.execute("CREATE SEQUENCE ticket_numbers")
        admin.execute("GRANT USAGE, SELECT, UPDATE ON SEQUENCE ticket_numbers TO app_writer")
    yield PostgresDatabase(
        host=pg_sample.host, port=pg_sample.port, dbname=DBNAME, sslmode="disable",
        login=PostgresLogin("app_writer", lambda: password), sensitive_tables=[],
    )  # fmt: skip


@pytest.mark.parametrize("text", WRITES)
def test_writes_are_refused_by_the_guard_and_by_the_server(
    writer: PostgresDatabase, pg_sample: Sample, text: str
) -> None:
    verdict = guard_sql(text, dialect="postgres", allowed_tables=ALLOWED, max_rows=5)
    assert not verdict.accepted
    err = _error(writer, text)  # straight to the server: no guard
    assert err.code is ErrorCode.SQL_ERROR
    with pg_sample.server.admin(DBNAME) as admin:
        assert admin.execute("SELECT COUNT(*) FROM regions").fetchone() == (4,)
        assert admin.execute("SELECT to_regclass('public.stolen')").fetchone() == (None,)


def test_the_transaction_is_read_only_even_for_a_function_that_writes(writer: PostgresDatabase) -> None:
    # A SELECT the guard would never pass, calling a function that writes: the server refuses it as read-only.
    err = _error(writer, "SELECT nextval('ticket_numbers')")
    assert err.code is ErrorCode.SQL_ERROR and "read-only transaction" in err.message
    err = _error(writer, "SELECT set_config('transaction_read_only', 'off', true)")
    assert "read-write" in err.message or "read-only" in err.message


def test_a_long_query_times_out_on_the_server(pg_db: PostgresDatabase) -> None:
    heavy = _guarded("SELECT COUNT(*) AS n FROM order_items AS a, order_items AS b, order_items AS c")
    started = time.monotonic()
    err = _error(pg_db, heavy, timeout_s=1)
    assert err.code is ErrorCode.SQL_TIMEOUT
    assert time.monotonic() - started < 4


def test_the_watchdog_cancels_when_the_server_does_not(pg_sample: Sample, monkeypatch: pytest.MonkeyPatch) -> None:
    db = pg_sample.database(watchdog_grace_s=0.5)
    original = PostgresDatabase._configure

    def no_server_timeout(self: PostgresDatabase, conn: Any, timeout_s: int) -> None:
        original(self, conn, timeout_s)
        conn.execute("SET statement_timeout = 0")  # as if the server ignored the limit

    monkeypatch.setattr(PostgresDatabase, "_configure", no_server_timeout)
    started = time.monotonic()
    err = _error(db, "SELECT pg_sleep(10)", timeout_s=1)
    assert err.code is ErrorCode.SQL_TIMEOUT
    assert time.monotonic() - started < 5


def test_bad_sql_is_a_sql_error(pg_db: PostgresDatabase) -> None:
    err = _error(pg_db, "SELECT no_such_column FROM regions")
    assert err.code is ErrorCode.SQL_ERROR and "no_such_column" in err.message


def _settings(pg_sample: Sample, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "sql_provider": "postgresql",
        "postgres_host": pg_sample.host,
        "postgres_port": pg_sample.port,
        "postgres_database": DBNAME,
        "postgres_user": READER,
        "postgres_password": pg_sample.reader_password,
        "postgres_sslmode": "disable",
    }
    values.update(overrides)
    return Settings(**values)


def test_settings_errors_have_stable_codes(pg_sample: Sample) -> None:
    with pytest.raises(ProviderError) as missing:
        build_postgres_database(Settings(sql_provider="postgresql", postgres_host="127.0.0.1"))
    assert missing.value.code is ErrorCode.CONFIG_ERROR
    assert "POSTGRES_DATABASE" in missing.value.message and "POSTGRES_USER" in missing.value.message
    wrong = build_postgres_database(_settings(pg_sample, postgres_password="not-the-password"))
    assert _error(wrong, "SELECT 1").code is ErrorCode.AUTH_FAILED
    nodb = build_postgres_database(_settings(pg_sample, postgres_database="no_such_db"))
    assert _error(nodb, "SELECT 1").code in {ErrorCode.CONFIG_ERROR, ErrorCode.AUTH_FAILED}
    with __import__("socket").socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = build_postgres_database(_settings(pg_sample, postgres_port=port))
    assert _error(down, "SELECT 1").code is ErrorCode.TRANSIENT


class _Credential:
    """Stands in for Entra ID (not reachable from tests): hands out the role's password as its token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


def test_without_a_password_an_entra_token_is_the_password(pg_sample: Sample) -> None:
    credential = _Credential(pg_sample.reader_password)
    db = build_postgres_database(_settings(pg_sample, postgres_password=None), credential=credential)
    rows = db.execute("SELECT COUNT(*) AS n FROM regions", max_rows=1, timeout_s=5)
    assert rows.rows == [[4]]
    assert credential.scopes == [(ENTRA_SCOPE,)]  # one fresh token per connection, for PostgreSQL's scope
    db.execute("SELECT 1 AS one", max_rows=1, timeout_s=5)
    assert len(credential.scopes) == 2

    class Broken:
        def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
            raise RuntimeError("no managed identity here")

    failing = build_postgres_database(_settings(pg_sample, postgres_password=None), credential=Broken())
    err = _error(failing, "SELECT 1")
    assert err.code is ErrorCode.AUTH_FAILED and "Entra" in err.message
