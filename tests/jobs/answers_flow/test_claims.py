"""First-wins answer claims: exactly one of many concurrent claims on a question succeeds, on both stores
(the blob store against Azurite, which arbitrates the conditional creates as the service does)."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devhost.storage.azurite import Azurite
from shared.runtime.answer_claims import (
    CLAIMS_CONTAINER,
    AnswerClaims,
    AnswerRecord,
    BlobAnswerClaims,
    SqliteAnswerClaims,
    answer_digest,
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


def test_the_claim_records_the_answer_it_won_with(claims: AnswerClaims) -> None:
    job = f"job-{time.monotonic_ns()}"
    edit = {"action": "edit", "input": {"sql": "SELECT 1"}}
    record = AnswerRecord.of("s1-q1", job, edit)
    assert claims.recorded(job, "s1-q1") is None and not claims.claimed(job, "s1-q1")
    assert claims.claim(job, "s1-q1", record) is True
    stored = claims.recorded(job, "s1-q1")
    assert stored is not None and stored.answer == edit and stored.instance == job
    assert stored.payload() == {"answer": edit, "question_id": "s1-q1"}
    # The same content (keys in another order) is the same answer; another content is not.
    same = AnswerRecord.of("s1-q1", job, {"input": {"sql": "SELECT 1"}, "action": "edit"})
    assert stored.same_answer(same) and not stored.same_answer(AnswerRecord.of("s1-q1", job, "approve"))
    # A later claim with another answer loses and leaves the record as it was.
    assert claims.claim(job, "s1-q1", AnswerRecord.of("s1-q1", job, "approve")) is False
    assert claims.recorded(job, "s1-q1") == stored
    # A bare claim (made before records) is a claim that recorded nothing.
    assert claims.claim(job, "s1-q2") is True
    assert claims.claimed(job, "s1-q2") and claims.recorded(job, "s1-q2") is None


def test_a_record_that_does_not_match_its_digest_is_not_trusted() -> None:
    record = AnswerRecord.of("q", "j", "approve")
    assert record.digest == answer_digest("approve") != answer_digest("reject")
    from shared.runtime.answer_claims import _parse_record

    assert _parse_record(record.model_dump_json()) == record
    forged = record.model_copy(update={"answer": "reject"}).model_dump_json()
    assert _parse_record(forged) is None and _parse_record(b"not json") is None


def test_a_claims_file_from_before_records_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE answer_claims (job_id TEXT NOT NULL, question_id TEXT NOT NULL, claimed_s REAL NOT NULL,"
            " PRIMARY KEY (job_id, question_id))"
        )
        db.execute("INSERT INTO answer_claims VALUES ('j', 'old-q', 1.0)")
    store = SqliteAnswerClaims(path)
    assert store.claimed("j", "old-q") and store.recorded("j", "old-q") is None
    assert store.claim("j", "new-q", AnswerRecord.of("new-q", "j", "approve")) is True
    assert store.recorded("j", "new-q") is not None
    # A second process opening the same file finds the column there already.
    assert SqliteAnswerClaims(path).recorded("j", "new-q") is not None


def test_the_blob_claim_holds_the_record(azurite: Azurite) -> None:
    store = build_claims(Settings(), connection_string=azurite.connection_string)
    assert isinstance(store, BlobAnswerClaims)
    job = f"job-{time.monotonic_ns()}"
    record = AnswerRecord.of("s1-q1", job, "approve")
    assert store.claim(job, "s1-q1", record) is True
    raw = store.container.get_blob_client(f"{job}/s1-q1").download_blob().readall()
    assert AnswerRecord.model_validate_json(raw) == record
    # Concurrent claims with different answers: one wins, and the record is the winner's.
    start = threading.Barrier(6)

    def claim(i: int) -> tuple[str, bool]:
        answer = f"answer-{i}"
        start.wait()
        return answer, store.claim(job, "s1-q9", AnswerRecord.of("s1-q9", job, answer))

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(claim, range(6)))
    winners = [answer for answer, won in results if won]
    assert len(winners) == 1
    kept = store.recorded(job, "s1-q9")
    assert kept is not None and kept.answer == winners[0]
