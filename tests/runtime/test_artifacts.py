"""The artifact stores keep one contract: local SQLite, and Azure Blob through the real SDK against Azurite."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from devhost.storage.azurite import Azurite
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.artifacts import (
    ArtifactRef,
    ArtifactStore,
    SqliteArtifactStore,
    build_blob_artifacts,
    make_ref,
    store_kind,
    valid_ref,
)
from shared.runtime.settings import Settings


@pytest.fixture(params=["local", "azure_blob"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return SqliteArtifactStore(tmp_path / "artifacts.sqlite3")
    azurite: Azurite = request.getfixturevalue("azurite")
    return build_blob_artifacts(Settings(), None, connection_string=azurite.connection_string)


def test_both_stores_keep_bytes_by_job_and_ref(store: ArtifactStore) -> None:
    job = f"job-{time.monotonic_ns()}"
    png = ArtifactRef(name="chart.png", media_type="image/png", size=6, ref=make_ref("s2", 1, 0))
    store.put(job, png, b"\x89PNG\x00\x01")
    got = store.get(job, png.ref)
    assert got is not None and got[0] == png and got[1] == b"\x89PNG\x00\x01"
    assert store.get("other-job", png.ref) is None
    assert store.get(job, make_ref("s2", 1, 1)) is None
    # A second put of the same ref (a retried attempt) replaces it.
    store.put(job, png.model_copy(update={"size": 2}), b"ok")
    again = store.get(job, png.ref)
    assert again is not None and again[1] == b"ok" and again[0].size == 2


def test_refs_have_one_shape() -> None:
    assert make_ref("S2-t3", 2, 11) == "s2-t3-a2-11"
    assert valid_ref("s2-a1-0") and not valid_ref("../s2-a1-0") and not valid_ref("s2") and not valid_ref("x" * 80)


def test_auto_is_blob_on_azure_and_local_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AzureWebJobsStorage__blobServiceUri", raising=False)
    assert store_kind(Settings()) == "local"
    monkeypatch.setenv("AzureWebJobsStorage__blobServiceUri", "https://acct.blob.core.windows.net")
    assert store_kind(Settings()) == "azure_blob"
    assert store_kind(Settings(artifact_store="local")) == "local"


def test_a_blob_store_that_cannot_be_built_is_a_config_error() -> None:
    """No endpoint, or a malformed connection string: CONFIG_ERROR naming the setting, never a bare exception."""
    with pytest.raises(ProviderError) as err:
        build_blob_artifacts(Settings(), None)
    assert err.value.code == ErrorCode.CONFIG_ERROR and "ARTIFACT_STORE=azure_blob" in err.value.message
    with pytest.raises(ProviderError) as err:
        build_blob_artifacts(Settings(), None, connection_string="DefaultEndpointsProtocol=http;AccountKey=abc")
    assert err.value.code == ErrorCode.CONFIG_ERROR and "connection string" in err.value.message
