"""Fixtures of the real-model tier: one llama.cpp server for the session, started on loopback.

The tier needs ``.venv-realmodel`` (``make realmodel``). ``make test`` installs it first and sets
``REALMODEL_REQUIRED=1``, so a missing install fails the run there instead of skipping silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.realmodel.server import LlamaServer, installed


def _require() -> None:
    missing = installed()
    if missing is None:
        return
    if os.environ.get("REALMODEL_REQUIRED") == "1":
        pytest.fail(f"the real-model tier is required but not installed: {missing}")
    pytest.skip(f"real-model tier not installed: {missing}")


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The shared llama.cpp server (Gemma 3 270M) for the whole session."""
    _require()
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture
def own_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A server of the test's own, for tests that kill it."""
    _require()
    server = LlamaServer(tmp_path_factory.mktemp("llama-own") / "server.log", n_ctx=2048).start()
    yield server
    server.stop()
