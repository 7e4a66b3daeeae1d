"""The append-blob partial output store through the real azure-storage-blob client, against the fake."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.settings import Settings
from shared.runtime.streaming.azure import BlobPartialOutputStore, build_blob_store
from shared.runtime.streaming.local import (
    DONE_TTL_S,
    MAX_AGE_S,
    DeltaBuffer,
    PartialOutputStore,
    SqlitePartialOutputStore,
    store_kind,
)
from tests.fakes.blob_server import FakeBlobServer
from tests.fakes.credentials import StaticTokenCredential

TOKEN = "storage-token-1"
CONTAINER = "job-partial-output"


@pytest.fixture(scope="module")
def blobs() -> Iterator[FakeBlobServer]:
    with FakeBlobServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def blob_store(blobs: FakeBlobServer) -> BlobPartialOutputStore:
    return build_blob_store(
        Settings(), blobs.endpoint, credential=StaticTokenCredential(TOKEN), connection_verify=blobs.ca_file
    )


@pytest.fixture(params=["local", "azure_blob"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> PartialOutputStore:
    if request.param == "local":
        return SqlitePartialOutputStore(tmp_path / "p.sqlite3")
    return request.getfixturevalue("blob_store")


def test_both_stores_keep_the_same_contract(any_store: PartialOutputStore) -> None:
    job = f"job-{time.monotonic_ns()}"
    assert any_store.read(job, "s3") is None
    any_store.append(job, "s3", 1, "Returns ")
    any_store.append(job, "s3", 1, "après 30 jours ")
    got = any_store.read(job, "s3")
    assert got is not None and (got.text, got.attempt, got.complete) == ("Returns après 30 jours ", 1, False)
    assert got.updated_at
    # A new attempt starts over.
    any_store.append(job, "s3", 2, "Second")
    any_store.append(job, "s3", 2, " try", complete=True)
    got = any_store.read(job, "s3")
    assert got is not None and (got.text, got.attempt, got.complete) == ("Second try", 2, True)
    any_store.drop(job, "s3")
    assert any_store.read(job, "s3") is None
    any_store.drop(job, "s3")  # absent is fine
    # An entry with no text yet (the blob service answers a ranged read of an empty blob with 416).
    any_store.append(job, "empty", 1, "", complete=True)
    empty = any_store.read(job, "empty")
    assert empty is not None and (empty.text, empty.complete) == ("", True)


def test_blob_layout_auth_and_buffered_writes(blobs: FakeBlobServer) -> None:
    credential = StaticTokenCredential(TOKEN)
    store = build_blob_store(Settings(), blobs.endpoint, credential=credential, connection_verify=blobs.ca_file)
    before = len(blobs.requests)
    clock = [0.0]
    buffer = DeltaBuffer(store, "job-b", "answer", 1, flush_ms=250, clock=lambda: clock[0])
    for word in "The West region had the most returns in Q3 .".split():
        buffer(word + " ")
        clock[0] += 0.1
    buffer.finish(succeeded=True)
    blob = blobs.blob(CONTAINER, "job-b/answer")
    assert blob is not None and blob.data.decode() == "The West region had the most returns in Q3 . "
    assert blob.metadata == {"attempt": "1", "complete": "true"}
    appends = [r for r in blobs.requests[before:] if r.query.get("comp") == "appendblock"]
    # Ten words over ~1 s at a 250 ms interval: a handful of appends, never one per word.
    assert 1 < len(appends) < 10
    assert ("https://storage.azure.com/.default",) in credential.scopes
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in blobs.requests[before:])


def test_a_failed_attempt_deletes_its_blob(blob_store: BlobPartialOutputStore, blobs: FakeBlobServer) -> None:
    clock = [0.0]
    buffer = DeltaBuffer(blob_store, "job-f", "answer", 1, clock=lambda: clock[0])
    buffer("half an ")
    clock[0] += 1
    buffer("answer")
    assert blobs.blob(CONTAINER, "job-f/answer") is not None
    buffer.finish(succeeded=False)
    assert blobs.blob(CONTAINER, "job-f/answer") is None


def test_wrong_credentials_break_the_buffer_not_the_answer(blobs: FakeBlobServer) -> None:
    store = build_blob_store(
        Settings(), blobs.endpoint, credential=StaticTokenCredential("wrong"), connection_verify=blobs.ca_file
    )
    clock = [0.0]
    buffer = DeltaBuffer(store, "job-x", "answer", 1, clock=lambda: clock[0])
    clock[0] += 1
    buffer("text")
    assert buffer.broken
    buffer.finish(succeeded=True)  # no raise


def test_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderError) as err:
        build_blob_store(Settings(), None)
    assert err.value.code == ErrorCode.CONFIG_ERROR and "AzureWebJobsStorage__blobServiceUri" in err.value.message
    monkeypatch.delenv("AzureWebJobsStorage__blobServiceUri", raising=False)
    assert store_kind(Settings()) == "local"
    monkeypatch.setenv("AzureWebJobsStorage__blobServiceUri", "https://acct.blob.core.windows.net")
    assert store_kind(Settings()) == "azure_blob"
    assert store_kind(Settings(partial_output_store="local")) == "local"


def test_prune_deletes_old_finished_and_orphaned_blobs(blobs: FakeBlobServer) -> None:
    store = build_blob_store(
        Settings(partial_output_container="prune-test"),
        blobs.endpoint,
        credential=StaticTokenCredential(TOKEN),
        connection_verify=blobs.ca_file,
    )
    assert store.prune() == 0  # no container yet
    store.append("j", "done", 1, "all of it", complete=True)
    store.append("j", "running", 1, "some")
    assert store.prune() == 0
    assert store.prune(now_s=time.time() + DONE_TTL_S + 5) == 1
    assert blobs.blob("prune-test", "j/done") is None and blobs.blob("prune-test", "j/running") is not None
    assert store.prune(now_s=time.time() + MAX_AGE_S + 5) == 1
    assert blobs.containers["prune-test"] == {}
