"""The Azure AI Search retriever through the real SDK against the fake service on loopback."""

from __future__ import annotations

import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.search.azure import build_azure_retriever
from shared.providers.search.azure_fields import VECTOR_FIELD, odata_eq, odata_in, validate_filter
from shared.providers.search.azure_index import build_azure_sink
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.search_server import FakeSearchServer
from tests.providers.search.azure.conftest import CORPUS, DIMS, azure_settings, toy_embed


def _ingest(server: FakeSearchServer, **settings_overrides: object) -> None:
    sink = build_azure_sink(azure_settings(server, **settings_overrides), toy_embed)
    sink.create_or_update_index()
    report = sink.upload(CORPUS)
    assert report.uploaded == len(CORPUS) and not report.failed


def test_hybrid_semantic_query_sends_every_option_and_maps_results(search_server: FakeSearchServer) -> None:
    _ingest(search_server, azure_search_semantic_config="docs-semantic")
    settings = azure_settings(search_server, azure_search_semantic_config="docs-semantic")
    retriever = build_azure_retriever(settings, toy_embed)
    assert retriever.vector_mode == "client"

    chunks = retriever.search("how many days until refunds are issued", top_k=2, filter="doc_id eq 'refund-policy'")

    body = search_server.searches()[-1].body
    assert body["search"] == "how many days until refunds are issued"
    assert body["top"] == 2
    assert body["filter"] == "doc_id eq 'refund-policy'"
    assert body["queryType"] == "semantic"
    assert body["semanticConfiguration"] == "docs-semantic"
    assert body["captions"].startswith("extractive")
    [vq] = body["vectorQueries"]
    assert vq["kind"] == "vector"
    assert vq["fields"] == VECTOR_FIELD
    assert vq["k"] >= 2
    assert vq["vector"] == toy_embed("how many days until refunds are issued")

    assert [c.source_id for c in chunks] == ["refund-policy#1", "refund-policy#2"]
    first = chunks[0]
    assert first.title == "Refund policy"
    assert first.path == "docs/refund-policy.md"
    # The extractive caption (the best sentence), not the whole chunk, becomes the content.
    assert first.content == "Refunds are issued within 14 days of the return."
    # The reranker score (0..4) is used when present.
    assert 0 < first.score <= 4.0
    assert first.score >= chunks[1].score


def test_keyword_only_without_embedding_ranks_by_terms(search_server: FakeSearchServer) -> None:
    _ingest(search_server)
    retriever = build_azure_retriever(azure_settings(search_server))
    assert retriever.vector_mode == "off"

    chunks = retriever.search("express shipping", top_k=3)

    body = search_server.searches()[-1].body
    assert "vectorQueries" not in body
    assert "queryType" not in body
    assert chunks[0].source_id == "shipping#1"
    assert chunks[0].content.startswith("Standard shipping")  # no captions: the whole chunk
    assert all(c.source_id != "warranty#1" for c in chunks)


def test_no_match_is_an_empty_list(search_server: FakeSearchServer) -> None:
    _ingest(search_server)
    retriever = build_azure_retriever(azure_settings(search_server))
    assert retriever.search("zeppelin", top_k=5) == []


def test_top_k_limits_the_result(search_server: FakeSearchServer) -> None:
    _ingest(search_server)
    retriever = build_azure_retriever(azure_settings(search_server), toy_embed)
    chunks = retriever.search("refunds shipping warranty", top_k=1)
    assert len(chunks) == 1
    assert search_server.searches()[-1].body["top"] == 1


def test_integrated_vectorizer_sends_a_text_vector_query(search_server: FakeSearchServer) -> None:
    overrides = {
        "azure_search_vector_mode": "integrated",
        "azure_openai_endpoint": "https://aoai-example.openai.azure.com/openai/v1/",
        "azure_openai_embedding_deployment": "embed-small",
    }
    _ingest(search_server, **overrides)
    definition = search_server.indexes["docs-test"].definition
    [vectorizer] = definition["vectorSearch"]["vectorizers"]
    assert vectorizer["kind"] == "azureOpenAI"
    assert vectorizer["azureOpenAIParameters"]["resourceUri"] == "https://aoai-example.openai.azure.com"
    assert vectorizer["azureOpenAIParameters"]["deploymentId"] == "embed-small"
    assert vectorizer["azureOpenAIParameters"]["modelName"] == "text-embedding-3-small"

    retriever = build_azure_retriever(azure_settings(search_server, **overrides))  # no client-side embed
    assert retriever.vector_mode == "integrated"
    chunks = retriever.search("two year warranty", top_k=2)

    [vq] = search_server.searches()[-1].body["vectorQueries"]
    assert vq == {"kind": "text", "text": "two year warranty", "fields": VECTOR_FIELD, "k": 50}
    assert chunks[0].source_id == "warranty#1"


def test_client_mode_without_embedding_is_a_config_error(search_server: FakeSearchServer) -> None:
    with pytest.raises(ProviderError) as info:
        build_azure_retriever(azure_settings(search_server, azure_search_vector_mode="client"))
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert search_server.requests == []


def test_filter_is_applied_by_the_service(search_server: FakeSearchServer) -> None:
    _ingest(search_server)
    retriever = build_azure_retriever(azure_settings(search_server), toy_embed)

    only_shipping = retriever.search("days", top_k=5, filter=odata_eq("doc_id", "shipping"))
    assert {c.source_id for c in only_shipping} == {"shipping#1"}

    two_docs = retriever.search("days", top_k=5, filter=odata_in("doc_id", ["shipping", "warranty"]))
    assert {c.source_id for c in two_docs} <= {"shipping#1", "warranty#1"}
    assert "search.in(doc_id, 'shipping|warranty', '|')" == search_server.searches()[-1].body["filter"]


def test_quote_in_a_filter_value_is_escaped(search_server: FakeSearchServer) -> None:
    from shared.jobs.contracts import Chunk

    sink = build_azure_sink(azure_settings(search_server))
    sink.create_or_update_index()
    sink.upload([Chunk(source_id="o'brien#1", title="O'Brien notes", content="Notes on refunds by O'Brien.")])
    retriever = build_azure_retriever(azure_settings(search_server))
    hits = retriever.search("refunds", top_k=5, filter=odata_eq("doc_id", "o'brien"))
    assert [c.source_id for c in hits] == ["o'brien#1"]
    assert search_server.searches()[-1].body["filter"] == "doc_id eq 'o''brien'"


@pytest.mark.parametrize(
    "bad",
    ["doc_id eq 'unterminated", "(doc_id eq 'a'", "doc_id eq 'a')", "doc_id eq 'a'\x00", "x" * 5000],
)
def test_malformed_filters_are_rejected_before_any_request(search_server: FakeSearchServer, bad: str) -> None:
    retriever = build_azure_retriever(azure_settings(search_server))
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=3, filter=bad)
    assert info.value.code is ErrorCode.INVALID_INPUT
    assert search_server.requests == []


def test_validate_filter_accepts_escaped_quotes_and_blank() -> None:
    assert validate_filter("title eq 'it''s (fine)'") == "title eq 'it''s (fine)'"
    assert validate_filter("   ") is None
    assert validate_filter(None) is None
    with pytest.raises(ProviderError):
        odata_eq("bad field", "x")


def test_empty_query_and_bad_top_k_are_invalid_input(search_server: FakeSearchServer) -> None:
    retriever = build_azure_retriever(azure_settings(search_server))
    for query, top_k in (("  ", 3), ("refunds", 0), ("refunds", 1001)):
        with pytest.raises(ProviderError) as info:
            retriever.search(query, top_k=top_k)
        assert info.value.code is ErrorCode.INVALID_INPUT


def test_bearer_token_over_tls_with_a_token_credential() -> None:
    """Managed identity path: azure-core refuses bearer tokens over http, so the fake serves TLS."""
    credential = StaticTokenCredential("entra-token-1")
    with FakeSearchServer(api_key=None, bearer_token="entra-token-1", tls=True) as server:
        settings = azure_settings(server, azure_search_api_key=None)
        sink = build_azure_sink(settings, toy_embed, credential=credential, connection_verify=server.ca_file)
        sink.create_or_update_index()
        sink.upload(CORPUS)
        retriever = build_azure_retriever(settings, toy_embed, credential=credential, connection_verify=server.ca_file)
        chunks = retriever.search("warranty defects", top_k=1)

        assert chunks[0].source_id == "warranty#1"
        assert server.searches()[-1].headers["authorization"] == "Bearer entra-token-1"
        assert "api-key" not in server.searches()[-1].headers
        assert credential.scopes and credential.scopes[0] == ("https://search.azure.com/.default",)

        # Without the CA bundle the self-signed certificate is refused: a config fault, not a retry.
        with pytest.raises(ProviderError) as info:
            build_azure_retriever(settings, credential=credential).search("warranty", top_k=1)
        assert info.value.code is ErrorCode.CONFIG_ERROR


def test_vector_dimensions_come_from_the_embedding(search_server: FakeSearchServer) -> None:
    _ingest(search_server)
    fields = {f["name"]: f for f in search_server.indexes["docs-test"].definition["fields"]}
    assert fields[VECTOR_FIELD]["dimensions"] == DIMS
