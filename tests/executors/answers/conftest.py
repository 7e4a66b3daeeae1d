"""Fixtures for the honest-answer tests: the shipped corpus and sample data behind the offline model."""

from __future__ import annotations

import pytest

from shared.providers.clients import Clients
from shared.providers.llm.offline.model import OfflineLLM
from shared.providers.search.local import LocalIndex
from shared.providers.sql.sampledata import ensure_sample_db
from shared.runtime.settings import DATA_DIR, Settings


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> LocalIndex:
    """The shipped documents (data/docs) indexed into a private tmp file."""
    return LocalIndex(tmp_path_factory.mktemp("answers-index") / "docs.sqlite3", DATA_DIR / "docs")


@pytest.fixture(scope="session")
def clients(tmp_path_factory: pytest.TempPathFactory, corpus: LocalIndex) -> Clients:
    """Offline clients over a private copy of the sample database and the shipped corpus."""
    db = ensure_sample_db(tmp_path_factory.mktemp("answers-db") / "sample.db")
    settings = Settings(llm_provider="offline", sqlite_database_path=db, local_index_path=corpus.index_path)
    return Clients(settings, retriever=corpus)


@pytest.fixture()
def offline(clients: Clients) -> OfflineLLM:
    """The offline model over those clients."""
    return OfflineLLM(clients)
