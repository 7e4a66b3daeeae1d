"""Shared fixtures for the SQL tests: one sample database per test session, through the real driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.providers.sql.sampledata import ensure_sample_db
from shared.providers.sql.sqlite import SqliteOdbcDatabase


@pytest.fixture(scope="session")
def sample_db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_sample_db(tmp_path_factory.mktemp("sampledb") / "sample.db")


@pytest.fixture(scope="session")
def sample_db(sample_db_path: Path) -> SqliteOdbcDatabase:
    return SqliteOdbcDatabase(sample_db_path)
