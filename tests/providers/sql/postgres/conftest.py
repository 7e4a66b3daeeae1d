"""One real PostgreSQL server per test session, with the SQLite sample's schema and data, and two login roles.

``app_reader`` (the app's login role) may read every table but the sensitive ones; ``app_sensitive`` (the
approved path's login) may read them all. Passwords are made at run time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from psycopg import sql
from pydantic import SecretStr

from shared.providers.sql.catalog import load_catalog
from shared.providers.sql.postgres import PostgresDatabase, PostgresLogin
from shared.providers.sql.sampledata import postgres_load_sql
from shared.runtime.settings import Settings
from tests.providers.sql.postgres.server import INSTALL_HINT, PostgresServer, find_bindir, new_password

DBNAME = "sample"
READER = "app_reader"
SENSITIVE = "app_sensitive"


@dataclass(frozen=True)
class Sample:
    """Where the sample database is and how its two roles log in."""

    server: PostgresServer
    host: str
    port: int
    dbname: str
    reader_password: str
    sensitive_password: str

    def settings(self, **overrides: object) -> Settings:
        """App settings that reach this sample through the app's own setting names (offline model)."""
        values: dict[str, object] = {
            "sql_provider": "postgresql",
            "llm_provider": "offline",
            "postgres_host": self.host,
            "postgres_port": self.port,
            "postgres_database": self.dbname,
            "postgres_user": READER,
            "postgres_password": SecretStr(self.reader_password),
            "postgres_sensitive_user": SENSITIVE,
            "postgres_sensitive_password": SecretStr(self.sensitive_password),
            "postgres_sslmode": "disable",
        }
        return Settings(**(values | overrides))  # type: ignore[arg-type]

    def database(self, *, sensitive_login: bool = True, **kwargs: object) -> PostgresDatabase:
        """The member as the app builds it: the reader's login, the sensitive login for approved statements."""
        reader, approved = self.reader_password, self.sensitive_password
        return PostgresDatabase(
            host=self.host,
            port=self.port,
            dbname=self.dbname,
            sslmode="disable",  # loopback only; Azure needs require (the setting's default)
            login=PostgresLogin(READER, lambda: reader),
            sensitive_login=PostgresLogin(SENSITIVE, lambda: approved) if sensitive_login else None,
            **kwargs,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(f"PostgreSQL's initdb/pg_ctl are missing: {INSTALL_HINT}")
    server = PostgresServer(bindir)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_sample(pg_server: PostgresServer) -> Sample:
    catalog = load_catalog()
    reader_password, sensitive_password = new_password(), new_password()
    with pg_server.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
        for role, password in ((READER, reader_password), (SENSITIVE, sensitive_password)):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), password))
    with pg_server.admin(DBNAME) as owner:
        owner.execute(postgres_load_sql())  # the simple protocol: the whole script in one call
        roles = sql.SQL(", ").join([sql.Identifier(READER), sql.Identifier(SENSITIVE)])
        owner.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(DBNAME)))
        owner.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(DBNAME), roles))
        owner.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
        owner.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(roles))
        readable = sql.SQL(", ").join(sql.Identifier(t) for t in sorted(catalog.allowed_tables()))
        owner.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(readable, sql.Identifier(READER)))
        owner.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(SENSITIVE)))
    return Sample(pg_server, "127.0.0.1", pg_server.port, DBNAME, reader_password, sensitive_password)


@pytest.fixture(scope="session")
def pg_db(pg_sample: Sample) -> PostgresDatabase:
    return pg_sample.database()
