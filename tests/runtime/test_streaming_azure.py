"""The append-blob partial output store through the real azure-storage-blob client, against Azurite.

Two ways in: a bearer token from the app's identity, as on Azure (Azurite over HTTPS with ``--oauth basic``,
which checks the token's audience, issuer and lifetime), and the development account's connection string.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from devhost.storage.azurite import Azurite
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
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.loopback import make_certificate

CONTAINER = "job-partial-output"


def entra_token(*, audience: str = "https://storage.azure.com", lifetime_s: int = 3600) -> str:
    """A JWT shaped like Entra ID's for Azure Storage (unsigned: Azurite's basic OAuth checks claims only)."""

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {
        "aud": audience,
        "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000001/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + lifetime_s,
        "oid": "00000000-0000-0000-0000-0000000000aa",
    }
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


@pytest.fixture(scope="module")
def azurite_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Azurite, str]]:
    """Azurite over HTTPS accepting bearer tokens, with the CA file clients must trust."""
    directory = tmp_path_factory.mktemp("azurite-tls")
    cert, key = make_certificate(directory, "azurite")
    with Azurite(directory / "data", tls=(cert, key), oauth=True) as emulator:
        yield emulator, str(cert)


def identity_store(azurite_tls: tuple[Azurite, str], token: str, settings: Settings | None = None) -> Any:
    """The store as on Azure: the blob endpoint and a token credential (returns the store and credential)."""
    emulator, ca_file = azurite_tls
    credential = StaticTokenCredential(token)
    store = build_blob_store(
        settings or Settings(), emulator.url("blob"), credential=credential, connection_verify=ca_file
    )
    return store, credential


@pytest.fixture
def blob_store(azurite: Azurite) -> BlobPartialOutputStore:
    return build_blob_store(Settings(), None, connection_string=azurite.connection_string)


@pytest.fixture
def container(azurite: Azurite) -> Any:
    """The store's container, read directly (what the service holds, not what the store says)."""
    return BlobServiceClient.from_connection_string(azurite.connection_string).get_container_client(CONTAINER)


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


def test_blob_layout_identity_and_buffered_writes(azurite_tls: tuple[Azurite, str]) -> None:
    """With the app's identity: one append blob per step, its metadata, and a handful of Append Block calls."""
    store, credential = identity_store(azurite_tls, entra_token())
    job = f"job-b-{time.monotonic_ns()}"
    clock = [0.0]
    buffer = DeltaBuffer(store, job, "answer", 1, flush_ms=250, clock=lambda: clock[0])
    for word in "The West region had the most returns in Q3 .".split():
        buffer(word + " ")
        clock[0] += 0.1
    buffer.finish(succeeded=True)
    assert not buffer.broken
    blob = store.container.get_blob_client(f"{job}/answer")
    assert blob.download_blob().readall().decode() == "The West region had the most returns in Q3 . "
    props = blob.get_blob_properties()
    assert props.metadata == {"attempt": "1", "complete": "true"} and props.blob_type == "AppendBlob"
    # Ten words over ~1 s at a 250 ms interval: a handful of appends (committed blocks), never one per word.
    assert 1 < props.append_blob_committed_block_count < 10
    assert ("https://storage.azure.com/.default",) in credential.scopes


def test_a_failed_attempt_deletes_its_blob(blob_store: BlobPartialOutputStore, container: Any) -> None:
    job = f"job-f-{time.monotonic_ns()}"
    clock = [0.0]
    buffer = DeltaBuffer(blob_store, job, "answer", 1, clock=lambda: clock[0])
    buffer("half an ")
    clock[0] += 1
    buffer("answer")
    assert container.get_blob_client(f"{job}/answer").exists()
    buffer.finish(succeeded=False)
    assert not container.get_blob_client(f"{job}/answer").exists()


@pytest.mark.parametrize(
    "token",
    [entra_token(lifetime_s=-120), entra_token(audience="https://vault.azure.net"), "not-a-jwt"],
    ids=["expired", "wrong-audience", "malformed"],
)
def test_rejected_credentials_break_the_buffer_not_the_answer(azurite_tls: tuple[Azurite, str], token: str) -> None:
    """The service refuses the token (401/403): the preview stops, the step goes on (no raise)."""
    store, _ = identity_store(azurite_tls, token)
    clock = [0.0]
    buffer = DeltaBuffer(store, f"job-x-{time.monotonic_ns()}", "answer", 1, clock=lambda: clock[0])
    clock[0] += 1
    buffer("text")
    assert buffer.broken
    buffer.finish(succeeded=True)  # no raise


def test_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderError) as err:
        build_blob_store(Settings(), None)
    assert err.value.code == ErrorCode.CONFIG_ERROR and "AzureWebJobsStorage__blobServiceUri" in err.value.message
    with pytest.raises(ProviderError) as err:
        build_blob_store(Settings(), None, connection_string="DefaultEndpointsProtocol=http;AccountKey=abc")
    assert err.value.code == ErrorCode.CONFIG_ERROR and "connection string" in err.value.message
    monkeypatch.delenv("AzureWebJobsStorage__blobServiceUri", raising=False)
    assert store_kind(Settings()) == "local"
    monkeypatch.setenv("AzureWebJobsStorage__blobServiceUri", "https://acct.blob.core.windows.net")
    assert store_kind(Settings()) == "azure_blob"
    assert store_kind(Settings(partial_output_store="local")) == "local"


def test_prune_deletes_old_finished_and_orphaned_blobs(azurite_tls: tuple[Azurite, str]) -> None:
    store, _ = identity_store(azurite_tls, entra_token(), Settings(partial_output_container="prune-test"))
    assert store.prune() == 0  # no container yet
    store.append("j", "done", 1, "all of it", complete=True)
    store.append("j", "running", 1, "some")
    assert store.prune() == 0
    assert store.prune(now_s=time.time() + DONE_TTL_S + 5) == 1
    assert [b.name for b in store.container.list_blobs()] == ["j/running"]
    assert store.prune(now_s=time.time() + MAX_AGE_S + 5) == 1
    assert list(store.container.list_blobs()) == []
