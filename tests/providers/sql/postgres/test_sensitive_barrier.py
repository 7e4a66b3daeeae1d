"""PostgreSQL's barrier for sensitive tables, on its own: no guard, no orchestrator (as for SQLite).

The app's login role (``app_reader``) holds no privilege on the tables the catalog marks sensitive; only an
approved statement (``sensitive=True``) connects as ``app_sensitive``, which may read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import shared.runtime.sqlguard.guard
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.sql.postgres import PostgresDatabase
from tests.providers.sql.postgres.conftest import DBNAME, READER, Sample

pytestmark = pytest.mark.slow  # a real server starts for these tests


@pytest.fixture(autouse=True)
def _no_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Proof the guard plays no part: any call to it fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the SQL guard must not be involved in the database barrier")

    monkeypatch.setattr(shared.runtime.sqlguard.guard, "guard_sql", refuse)
    yield


def _error(db: PostgresDatabase, sql: str, **kwargs: Any) -> ProviderError:
    with pytest.raises(ProviderError) as err:
        db.execute(sql, max_rows=500, timeout_s=10, **kwargs)
    return err.value


READS = [
    "SELECT * FROM customer_contacts",
    "SELECT email FROM customer_contacts WHERE customer_id = 1",
    "SELECT COUNT(*) FROM (SELECT email FROM customer_contacts) AS x",
    "SELECT c.name FROM customers c WHERE EXISTS "
    "(SELECT 1 FROM customer_contacts cc WHERE cc.customer_id = c.customer_id)",
    "WITH x AS (SELECT phone FROM customer_contacts) SELECT * FROM x",
    "SELECT c.name, cc.email FROM customers c JOIN customer_contacts cc USING (customer_id)",
    "SELECT email FROM public.customer_contacts",
    'SELECT email FROM "customer_contacts"',
    "SELECT name FROM regions UNION ALL SELECT email FROM customer_contacts",
    "SELECT query_to_xml('SELECT * FROM customer_contacts', true, true, '')",
]


@pytest.mark.parametrize("sql", READS)
def test_sensitive_reads_fail_unless_approved(pg_db: PostgresDatabase, sql: str) -> None:
    err = _error(pg_db, sql)
    assert err.code is ErrorCode.SQL_ERROR
    assert "permission denied" in err.message.lower()


def test_an_approved_statement_reads_them(pg_db: PostgresDatabase) -> None:
    rows = pg_db.execute("SELECT email FROM customer_contacts ORDER BY customer_id", max_rows=3, timeout_s=10,
                         sensitive=True)  # fmt: skip
    assert rows.columns == ["email"] and len(rows.rows) == 3 and "@" in rows.rows[0][0]


def test_without_a_sensitive_login_they_are_never_readable(pg_sample: Sample) -> None:
    db = pg_sample.database(sensitive_login=False)
    err = _error(db, "SELECT email FROM customer_contacts", sensitive=True)
    assert err.code is ErrorCode.SQL_ERROR and "permission denied" in err.message.lower()
    assert db.execute("SELECT name FROM regions", max_rows=5, timeout_s=5, sensitive=True).rows


ESCALATIONS = [
    "SET ROLE app_sensitive",
    "SELECT set_config('role', 'app_sensitive', false)",
    "SELECT set_config('session_authorization', 'app_sensitive', false)",
    "SELECT email FROM customer_contacts; SET ROLE app_sensitive",
]


@pytest.mark.parametrize("sql", ESCALATIONS)
def test_a_statement_cannot_take_the_sensitive_role(pg_db: PostgresDatabase, sql: str) -> None:
    assert _error(pg_db, sql).code is ErrorCode.SQL_ERROR
    # And the next statement is no better off: every query has a connection of its own.
    assert "permission denied" in _error(pg_db, "SELECT email FROM customer_contacts").message.lower()


def test_a_grant_that_opens_the_barrier_stops_every_unapproved_query(
    pg_db: PostgresDatabase, pg_sample: Sample
) -> None:
    with pg_sample.server.admin(DBNAME) as admin:
        admin.execute(f"GRANT SELECT (customer_id) ON customer_contacts TO {READER}")
        try:
            err = _error(pg_db, "SELECT name FROM regions")
            assert err.code is ErrorCode.CONFIG_ERROR
            assert "public.customer_contacts" in err.message and "POSTGRES_SENSITIVE_USER" in err.message
            # The approved path uses its own login and is not affected.
            assert pg_db.execute("SELECT name FROM regions", max_rows=5, timeout_s=5, sensitive=True).rows
        finally:
            admin.execute(f"REVOKE SELECT (customer_id) ON customer_contacts FROM {READER}")
    assert pg_db.execute("SELECT name FROM regions", max_rows=5, timeout_s=5).rows
