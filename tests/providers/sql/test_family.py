"""The database family: each member is known to the guard, the catalog and the offline writer; PostgreSQL rules."""

from __future__ import annotations

import typing

import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.llm.offline.sql_writer import write_sql_offline
from shared.providers.sql import family
from shared.providers.sql.catalog import load_catalog
from shared.runtime.settings import Settings
from shared.runtime.sqlguard.guard import GuardReason, guard_sql

CATALOG = load_catalog()
ALLOWED = CATALOG.allowed_tables()
MEMBERS = family.providers()


def test_the_registry_and_the_setting_name_the_same_databases() -> None:
    values = typing.get_args(Settings.model_fields["sql_provider"].annotation)
    assert sorted(values) == MEMBERS == ["azure_sql", "postgresql", "sqlite"]
    assert family.dialect_for(Settings()) == "sqlite"


def test_an_unknown_database_is_a_config_error() -> None:
    with pytest.raises(ProviderError) as err:
        family.member("oracle")
    assert err.value.code is ErrorCode.CONFIG_ERROR and "SQL_PROVIDER" in err.value.message


def test_a_provider_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        family.register_database("sqlite", dialect="sqlite", default_schema="main", sensitive_barrier="x")(
            lambda settings: family.member("sqlite").open(settings)
        )


@pytest.mark.parametrize("provider", MEMBERS)
def test_every_member_is_known_to_the_guard_the_catalog_and_the_offline_writer(provider: str) -> None:
    member = family.member(provider)
    assert member.sensitive_barrier and callable(member.open)
    assert set(CATALOG.time_grains[member.dialect]) == {"year", "quarter", "month"}
    qualified = guard_sql(
        f"SELECT name FROM {member.default_schema}.regions", dialect=member.dialect, allowed_tables=ALLOWED, max_rows=5
    )
    assert qualified.accepted and qualified.tables == ["regions"], qualified.message
    draft = write_sql_offline("revenue by quarter by region", CATALOG, member.dialect)
    assert draft is not None
    verdict = guard_sql(
        draft.sql, dialect=member.dialect, allowed_tables=ALLOWED, max_rows=50, columns=CATALOG.columns()
    )
    assert verdict.accepted, verdict.message


POSTGRES_REJECTS = [
    ("SELECT * FROM pg_user", GuardReason.SYSTEM_CATALOG),
    ("SELECT * FROM pg_catalog.pg_authid", GuardReason.SYSTEM_CATALOG),
    # Unqualified pg_* names resolve in pg_catalog first, even when the allow-list names one.
    ("SELECT * FROM pg_shadow", GuardReason.SYSTEM_CATALOG),
    ("SELECT * FROM public.pg_stats", GuardReason.SYSTEM_CATALOG),
    ("SELECT * FROM information_schema.tables", GuardReason.SYSTEM_CATALOG),
    ("SELECT current_setting('data_directory')", GuardReason.SYSTEM_CATALOG),
    ("SELECT version()", GuardReason.SYSTEM_CATALOG),
    ("SELECT name FROM regions FOR UPDATE", GuardReason.FORBIDDEN_STATEMENT),
    ("WITH gone AS (DELETE FROM regions RETURNING *) SELECT * FROM gone", GuardReason.FORBIDDEN_STATEMENT),
    ("SELECT set_config('role', 'admin', false)", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT pg_read_file('/etc/passwd')", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT lo_import('/etc/passwd')", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT dblink_exec('host=x', 'DROP TABLE orders')", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT nextval('ticket_numbers')", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT query_to_xml('SELECT * FROM customer_contacts', true, true, '')", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT pg_sleep(60)", GuardReason.FORBIDDEN_FUNCTION),
    ("SELECT $1", GuardReason.VARIABLE),
    ("SELECT format('%1$s%1$s%1$s', name) FROM customers", GuardReason.RESOURCE_LIMIT),
    ("SELECT CAST(strftime('%Y', order_date) AS INTEGER) FROM orders", GuardReason.FUNCTION_NOT_ALLOWED),
    ("SELECT TOP 5 WITH TIES * FROM regions ORDER BY name", GuardReason.UNSUPPORTED_ROW_LIMIT),
    ("SELECT name FROM regions; DELETE FROM regions", GuardReason.MULTIPLE_STATEMENTS),
    ("SELECT * FROM other_schema.orders", GuardReason.TABLE_NOT_ALLOWED),
]


@pytest.mark.parametrize(("sql", "reason"), POSTGRES_REJECTS, ids=[s for s, _ in POSTGRES_REJECTS])
def test_postgres_guard_rejections(sql: str, reason: GuardReason) -> None:
    verdict = guard_sql(sql, dialect="postgres", allowed_tables=ALLOWED | {"pg_shadow"}, max_rows=5)
    assert not verdict.accepted and verdict.reason_code is reason, (verdict.reason_code, verdict.message)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT TOP 3 name FROM regions", "SELECT name FROM regions LIMIT 3"),
        ("SELECT name FROM regions FETCH FIRST 500 ROWS ONLY", "SELECT name FROM regions FETCH FIRST 6 ROWS ONLY"),
        (
            "SELECT to_char(order_date, 'YYYY-MM') AS m FROM orders",
            "SELECT TO_CHAR(order_date, 'YYYY-MM') AS m FROM orders LIMIT 6",
        ),
        ("SELECT name FROM regions WHERE name ILIKE '%th'", "SELECT name FROM regions WHERE name ILIKE '%th' LIMIT 6"),
    ],
)
def test_postgres_guard_rewrites(sql: str, expected: str) -> None:
    verdict = guard_sql(sql, dialect="postgres", allowed_tables=ALLOWED, max_rows=5)
    assert verdict.accepted and verdict.sql == expected, verdict.message


@pytest.mark.parametrize("dialect", ["sqlite", "tsql", "postgres"])
def test_replicate_outside_tsql_is_bounded_not_a_crash(dialect: str) -> None:
    ok = guard_sql("SELECT replicate(name, 3) AS x FROM regions", dialect=dialect, allowed_tables=ALLOWED, max_rows=5)
    assert ok.accepted, ok.message
    big = guard_sql(
        "SELECT replicate(name, 999) AS x FROM regions", dialect=dialect, allowed_tables=ALLOWED, max_rows=5
    )
    assert not big.accepted and big.reason_code is GuardReason.RESOURCE_LIMIT
