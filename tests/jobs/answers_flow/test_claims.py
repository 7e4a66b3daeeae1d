"""First-wins answer claims: exactly one of many concurrent claims on a question succeeds, on both stores
(the blob store against Azurite, which arbitrates the conditional creates as the service does)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devhost.azurite import Azurite
from shared.runtime.answer_claims import (
    CLAIMS_CONTAINER,
    AnswerClaims,
    BlobAnswerClaims,
    SqliteAnswerClaims,
    build_claims,
    claims_kind,
)
from shared.runtime.settings import Settings


@pytest.fixture(params=["local", "azure_blob"])
def claims(request: pytest.FixtureRequest, tmp_path: Path) -> AnswerClaims:
    if request.param == "local":
        return SqliteAnswerClaims(tmp_path / "claims.sqlite3")
    azurite: Azurite = request.getfixturevalue("azurite")
    store = build_claims(Settings(), connection_string=azurite.connection_string)
    assert isinstance(store, BlobAnswerClaims)
    return store


def test_concurrent_claims_on_one_question_have_exactly_one_winner(claims: AnswerClaims) -> None:
    job = f"job-{time.monotonic_ns()}"
    start = threading.Barrier(8)

    def claim(_: int) -> bool:
        start.wait()
        return claims.claim(job, "s1-q1")

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(claim, range(8)))
    assert won.count(True) == 1
    # Later claims lose too; another question or another job is a claim of its own.
    assert claims.claim(job, "s1-q1") is False
    assert claims.claim(job, "s1-q2") is True
    assert claims.claim(f"{job}-other", "s1-q1") is True


def test_two_processes_share_the_local_store(tmp_path: Path) -> None:
    # Two store objects on one file stand for two app instances on one machine.
    first, second = SqliteAnswerClaims(tmp_path / "c.sqlite3"), SqliteAnswerClaims(tmp_path / "c.sqlite3")
    assert first.claim("j", "q") is True
    assert second.claim("j", "q") is False


def test_the_blob_claim_is_a_conditional_create(azurite: Azurite) -> None:
    """The claim is an empty blob the service creates only if none exists: one that is there already wins."""
    store = build_claims(Settings(), connection_string=azurite.connection_string)
    assert isinstance(store, BlobAnswerClaims)
    job = f"job-{time.monotonic_ns()}"
    assert store.claim(job, "s1-q3") is True
    container = store.container
    assert container.container_name == CLAIMS_CONTAINER
    assert container.get_blob_client(f"{job}/s1-q3").get_blob_properties().size == 0
    # A claim another instance made (here written straight to the service) is honoured.
    container.upload_blob(f"{job}/s1-q4", b"")
    assert store.claim(job, "s1-q4") is False


def test_the_store_follows_the_partial_output_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AzureWebJobsStorage__blobServiceUri", raising=False)
    assert claims_kind(Settings(partial_output_store="auto")) == "local"
    assert claims_kind(Settings(partial_output_store="off")) == "local"
    assert claims_kind(Settings(partial_output_store="azure_blob")) == "azure_blob"
    monkeypatch.setenv("AzureWebJobsStorage__blobServiceUri", "https://acct.blob.core.windows.net")
    assert claims_kind(Settings(partial_output_store="auto")) == "azure_blob"
    # Answers are claimed on Azure even when the live preview is off.
    assert claims_kind(Settings(partial_output_store="off")) == "azure_blob"
    assert claims_kind(Settings(partial_output_store="local")) == "local"
    local = build_claims(Settings(partial_output_store="local", partial_output_path=tmp_path / "p.sqlite3"))
    assert isinstance(local, SqliteAnswerClaims) and local.path == tmp_path / "answer_claims.sqlite3"
