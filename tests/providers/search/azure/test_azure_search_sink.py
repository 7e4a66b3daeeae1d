"""Index creation and batched upload through the real SDK against the fake service."""

from __future__ import annotations

import pytest

from shared.jobs.contracts import Chunk, ErrorCode, ProviderError
from shared.providers.search.azure_fields import VECTOR_FIELD
from shared.providers.search.azure_index import (
    AzureSearchSink,
    VectorizerConfig,
    build_azure_sink,
    build_index_schema,
    doc_id_of,
    document_key,
)
from tests.fakes.search_server import FakeSearchServer
from tests.providers.search.azure.conftest import CORPUS, DIMS, azure_settings, toy_embed


def test_index_schema_fields_vector_and_semantic_parts(search_server: FakeSearchServer) -> None:
    sink = build_azure_sink(azure_settings(search_server, azure_search_semantic_config="sem"), toy_embed)
    sink.create_or_update_index()

    [request] = [r for r in search_server.requests if r.route == "index"]
    assert request.method == "PUT"
    assert request.path == "/indexes('docs-test')"
    assert request.query["api-version"]
    definition = request.body
    fields = {f["name"]: f for f in definition["fields"]}
    assert fields["id"]["key"] is True
    assert fields["content"]["searchable"] is True and fields["title"]["searchable"] is True
    assert fields["doc_id"]["filterable"] is True and fields["source_id"]["filterable"] is True
    assert fields["path"]["filterable"] is True
    vector = fields[VECTOR_FIELD]
    assert vector["type"] == "Collection(Edm.Single)"
    assert vector["dimensions"] == DIMS
    assert vector["retrievable"] is False
    [algorithm] = definition["vectorSearch"]["algorithms"]
    assert algorithm["kind"] == "hnsw" and algorithm["hnswParameters"]["metric"] == "cosine"
    [profile] = definition["vectorSearch"]["profiles"]
    assert profile["name"] == vector["vectorSearchProfile"] and profile["algorithm"] == algorithm["name"]
    [config] = definition["semantic"]["configurations"]
    assert config["name"] == "sem"
    assert config["prioritizedFields"]["titleField"] == {"fieldName": "title"}
    assert config["prioritizedFields"]["prioritizedContentFields"] == [{"fieldName": "content"}]


def test_create_or_update_twice_updates_in_place(search_server: FakeSearchServer) -> None:
    sink = build_azure_sink(azure_settings(search_server), toy_embed)
    sink.create_or_update_index()
    sink.create_or_update_index()
    statuses = [r.status for r in search_server.requests if r.route == "index"]
    assert statuses == [201, 200]


def test_upload_in_batches(search_server: FakeSearchServer) -> None:
    sink = build_azure_sink(azure_settings(search_server), toy_embed, batch_size=3)
    sink.create_or_update_index()
    chunks = [
        Chunk(source_id=f"doc-{i // 2}#{i % 2 + 1}", title=f"Doc {i // 2}", content=f"chunk {i} text") for i in range(7)
    ]
    report = sink.upload(chunks)

    assert report.uploaded == 7 and report.batches == 3 and report.failed == []
    uploads = [r for r in search_server.requests if r.route == "upload"]
    assert [len(r.body["value"]) for r in uploads] == [3, 3, 1]
    assert all(a["@search.action"] == "upload" for r in uploads for a in r.body["value"])
    stored = search_server.documents("docs-test")
    assert set(stored) == {document_key(c.source_id) for c in chunks}
    doc = stored[document_key("doc-1#2")]
    assert doc["source_id"] == "doc-1#2" and doc["doc_id"] == "doc-1"
    assert doc[VECTOR_FIELD] == toy_embed("chunk 3 text")


def test_reupload_is_an_upsert(search_server: FakeSearchServer) -> None:
    sink = build_azure_sink(azure_settings(search_server))
    sink.create_or_update_index()
    sink.upload(CORPUS)
    sink.upload([Chunk(source_id="warranty#1", title="Warranty", content="Now three years.")])
    stored = search_server.documents("docs-test")
    assert len(stored) == len(CORPUS)
    assert stored[document_key("warranty#1")]["content"] == "Now three years."


def test_keyword_only_index_has_no_vector_field(search_server: FakeSearchServer) -> None:
    sink = build_azure_sink(azure_settings(search_server))
    sink.create_or_update_index()
    sink.upload(CORPUS[:1])
    definition = search_server.indexes["docs-test"].definition
    assert VECTOR_FIELD not in {f["name"] for f in definition["fields"]}
    assert definition.get("vectorSearch") is None
    assert VECTOR_FIELD not in next(iter(search_server.documents("docs-test").values()))


def test_integrated_mode_needs_endpoint_and_embedding(search_server: FakeSearchServer) -> None:
    with pytest.raises(ProviderError) as info:
        build_azure_sink(azure_settings(search_server, azure_search_vector_mode="integrated"), toy_embed)
    assert info.value.code is ErrorCode.CONFIG_ERROR
    plain = build_azure_sink(azure_settings(search_server))
    sink = AzureSearchSink(
        plain._index_client,
        plain._search_client,
        index_name="docs-test",
        vectorizer=VectorizerConfig(resource_url="https://x.openai.azure.com", deployment_name="e", model_name="m"),
    )
    with pytest.raises(ProviderError) as info:
        sink.create_or_update_index()  # no embedding function for document vectors
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert search_server.requests == []


def test_embedding_with_wrong_dimensions_is_refused(search_server: FakeSearchServer) -> None:
    calls = {"n": 0}

    def drifting_embed(text: str) -> list[float]:
        calls["n"] += 1
        return [1.0] * (DIMS if calls["n"] == 1 else DIMS + 1)

    sink = build_azure_sink(azure_settings(search_server), drifting_embed)
    sink.create_or_update_index()
    with pytest.raises(ProviderError) as info:
        sink.upload(CORPUS[:1])
    assert info.value.code is ErrorCode.UPSTREAM_ERROR


def test_keys_are_url_safe_and_unique() -> None:
    keys = {document_key(s) for s in ["a#1", "a#2", "ä/ö#1", "a b#1", "a+b#1"]}
    assert len(keys) == 5
    assert all(k.replace("-", "").replace("_", "").replace("=", "").isalnum() for k in keys)
    assert doc_id_of("guide#part#3") == "guide#part"


def test_schema_without_vectors_or_semantic() -> None:
    schema = build_index_schema("plain", vector_dimensions=None, semantic_config=None)
    assert schema.vector_search is None and schema.semantic_search is None
    assert [f.name for f in schema.fields] == [
        "id",
        "source_id",
        "doc_id",
        "title",
        "content",
        "path",
        "doc_title",
        "chunk_no",
        "doc_sha256",
        "tags",
        "doc_prefixes",
    ]
    assert {f.name for f in schema.fields if f.retrievable is False} == {"doc_prefixes"}
