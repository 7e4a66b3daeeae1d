"""``python -m shared.ingest <folder> --target azure`` as a real process against the fake service,
then retrieval with query vectors from the embedding deployment (the fake's ``/embeddings``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.providers.search.azure import build_azure_retriever
from shared.providers.search.azure_index import document_key
from shared.runtime.settings import REPO_ROOT, Settings
from tests.fakes.search_server import FakeSearchServer
from tests.providers.search.azure.conftest import API_KEY, toy_embed

EMBEDDING_KEY = "fake-embedding-key"


def _env(server: FakeSearchServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "SEARCH_", "LLM_", "OPENAI_"))}
    env.update(
        {
            "SEARCH_PROVIDER": "azure",
            "AZURE_SEARCH_ENDPOINT": server.endpoint,
            "AZURE_SEARCH_API_KEY": API_KEY,
            "AZURE_SEARCH_INDEX": "policies",
            "AZURE_SEARCH_SEMANTIC_CONFIG": "policies-semantic",
            "AZURE_OPENAI_ENDPOINT": server.endpoint,
            "AZURE_OPENAI_API_KEY": EMBEDDING_KEY,
            "AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "text-embedding-3-small",
        }
    )
    return env


def _ingest(server: FakeSearchServer, folder: Path, *extra: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "shared.ingest", str(folder), "--target", "azure", "--json", *extra],
        cwd=REPO_ROOT,
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "policies").mkdir(parents=True)
    (docs / "faq").mkdir()
    (docs / "policies" / "returns.md").write_text(
        "---\ntags: returns\n---\n# Returns\n\nItems can be returned within 30 days of delivery. "
        "Refunds go back to the original payment method within 5 business days.\n",
        encoding="utf-8",
    )
    (docs / "policies" / "warranty.md").write_text(
        "# Warranty\n\nAppliances carry a two year warranty against manufacturing defects.\n", encoding="utf-8"
    )
    (docs / "faq" / "shipping.txt").write_text(
        "Shipping\n\nStandard delivery takes three to five business days.\n", encoding="utf-8"
    )
    return docs


def test_ingest_then_hybrid_semantic_search(
    search_server: FakeSearchServer, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _ingest(search_server, folder)
    assert report["target"] == "azure" and report["documents"] == 3 and report["reused"] == 0

    index = search_server.indexes["policies"]
    fields = {f["name"]: f for f in index.definition["fields"]}
    assert fields["content_vector"]["dimensions"] == len(toy_embed("probe"))
    stored = search_server.documents("policies")
    returns = stored[document_key("policies/returns.md#1")]
    assert returns["doc_id"] == "policies/returns.md"
    assert "policies" in returns["tags"] and "returns" in returns["tags"]
    assert {"policies", "policies/", "policies/returns.md"} <= set(returns["doc_prefixes"])
    assert returns["content_vector"] == toy_embed(returns["content"])
    assert search_server.embedding_calls >= len(stored)

    for name, value in _env(search_server).items():
        if name.startswith(("AZURE_", "SEARCH_")):
            monkeypatch.setenv(name, value)
    retriever = build_azure_retriever(Settings())  # embedder built from the same environment
    assert retriever.vector_mode == "client"
    calls_before = search_server.embedding_calls
    chunks = retriever.search("how long do refunds take", top_k=2, filter="doc:policies tag:returns")

    assert search_server.embedding_calls == calls_before + 1
    body = search_server.searches()[-1].body
    assert body["vectorQueries"][0]["vector"] == toy_embed("how long do refunds take")
    assert body["filter"] == (
        "doc_prefixes/any(p: search.in(p, 'policies', '|')) and tags/any(t: search.in(t, 'returns', '|'))"
    )
    assert [c.source_id for c in chunks] == ["policies/returns.md#1"]
    assert chunks[0].title.startswith("Returns")
    assert chunks[0].content == "Refunds go back to the original payment method within 5 business days."
    assert chunks[0].path == "policies/returns.md"
    assert retriever.document_titles() == ["Returns", "Shipping", "Warranty"]


def test_rerun_reuses_unchanged_and_deletes_stale(search_server: FakeSearchServer, folder: Path) -> None:
    _ingest(search_server, folder)
    uploads_before = len([r for r in search_server.requests if r.route == "upload"])

    (folder / "faq" / "shipping.txt").unlink()
    (folder / "policies" / "warranty.md").write_text(
        "# Warranty\n\nAppliances now carry a three year warranty.\n", encoding="utf-8"
    )
    report = _ingest(search_server, folder)

    assert report["documents"] == 1 and report["reused"] == 1
    stored = search_server.documents("policies")
    assert {d["doc_id"] for d in stored.values()} == {"policies/returns.md", "policies/warranty.md"}
    assert "three year" in stored[document_key("policies/warranty.md#1")]["content"]
    new_uploads = [r for r in search_server.requests if r.route == "upload"][uploads_before:]
    uploaded_ids = {a["source_id"] for r in new_uploads for a in r.body["value"] if a["@search.action"] == "upload"}
    assert uploaded_ids == {"policies/warranty.md#1"}  # the unchanged document was not sent again
    deleted = {a["id"] for r in new_uploads for a in r.body["value"] if a["@search.action"] == "delete"}
    assert deleted == {document_key("faq/shipping.txt#1")}


def test_rebuild_recreates_the_index(search_server: FakeSearchServer, folder: Path) -> None:
    _ingest(search_server, folder)
    report = _ingest(search_server, folder, "--rebuild")
    assert report["documents"] == 3 and report["reused"] == 0
    assert [r.method for r in search_server.requests if r.route == "index"] == ["PUT", "DELETE", "PUT"]
    assert len(search_server.documents("policies")) == 3


def test_missing_endpoint_is_a_clear_cli_error(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "SEARCH_"))}
    done = subprocess.run(
        [sys.executable, "-m", "shared.ingest", str(folder), "--target", "azure"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "AZURE_SEARCH_ENDPOINT" in done.stderr
