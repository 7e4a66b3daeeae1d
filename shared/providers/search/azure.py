"""Azure AI Search: the hybrid retriever.

The index schema and the ingestion sink are in ``azure_index``; field names and filters in
``azure_fields``; error mapping in ``azure_errors``; credentials and client options in ``azure_clients``.

The retriever sends one hybrid request (keyword + vector) through the official
``azure.search.documents.SearchClient``. The query vector comes either from an injected embedding
function (an Azure OpenAI embedding deployment, owned by the LLM provider) or from the index's
integrated vectorizer (``VectorizableTextQuery``). The semantic ranker is used when a semantic
configuration is set, and its extractive captions replace the chunk content when present.

The SDK's own retries are off: the orchestrator owns retries, so every fault comes back at once as a
classified ``ProviderError`` (with the service's retry-after when it sends one).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shared.ingest.text import bound_snippet
from shared.jobs.contracts import Chunk, ErrorCode, ProviderError

if TYPE_CHECKING:
    from azure.core.credentials import AzureKeyCredential, TokenCredential
    from azure.search.documents import SearchClient

    from shared.runtime.settings import Settings

from shared.providers.search.azure_clients import (
    build_search_credential,
    client_kwargs,
    default_embedder,
    require_endpoint,
)
from shared.providers.search.azure_errors import classify_search_error
from shared.providers.search.azure_fields import (
    DEFAULT_TIMEOUT_S,
    KEY_FIELD,
    SELECT_FIELDS,
    TITLES_TTL_S,
    VECTOR_FIELD,
    VECTOR_K,
    EmbedFn,
    VectorMode,
    translate_filter,
)

logger = logging.getLogger(__name__)

# --- the retriever -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchOptions:
    """How the retriever shapes each query."""

    vector_mode: VectorMode = "auto"
    semantic_config: str | None = None
    vector_k: int = VECTOR_K


class AzureSearchRetriever:
    """``Retriever`` backed by an Azure AI Search index (hybrid, optionally semantic)."""

    def __init__(self, client: SearchClient, *, embed: EmbedFn | None = None, options: SearchOptions | None = None):
        self._client = client
        self._embed = embed
        self._options = options or SearchOptions()
        self._titles: tuple[float, list[str]] | None = None
        mode = self._options.vector_mode
        if mode == "client" and embed is None:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                "AZURE_SEARCH_VECTOR_MODE=client needs an embedding deployment (AZURE_OPENAI_EMBEDDING_DEPLOYMENT)",
            )
        if mode == "auto":
            mode = "client" if embed is not None else "off"
            if embed is None:
                logger.info("Azure AI Search: no embedding function, queries are keyword-only")
        self._mode: Literal["client", "integrated", "off"] = mode

    @property
    def vector_mode(self) -> Literal["client", "integrated", "off"]:
        """The effective way query vectors are made."""
        return self._mode

    def document_titles(self) -> list[str]:
        """Distinct titles of the indexed documents, sorted (cached a few minutes; empty on failure)."""
        now = time.monotonic()
        if self._titles is not None and now - self._titles[0] < TITLES_TTL_S:
            return list(self._titles[1])
        try:
            found = self._client.search(search_text="*", select=["doc_id", "doc_title"], top=1000)
            titles = sorted({str(d["doc_title"]) for d in found if d.get("doc_title")})
        except Exception as exc:
            logger.warning("document titles unavailable: %s", classify_search_error(exc).message)
            return []
        self._titles = (now, titles)
        return list(titles)

    def _vector_queries(self, query: str, top_k: int) -> list[Any] | None:
        from azure.search.documents.models import VectorizableTextQuery, VectorizedQuery

        k = max(top_k, self._options.vector_k)
        if self._mode == "client":
            assert self._embed is not None
            try:
                vector = self._embed(query)
            except ProviderError:
                raise
            except Exception as exc:  # the embedding provider should classify; never leak raw faults
                raise ProviderError(ErrorCode.UPSTREAM_ERROR, f"query embedding failed: {exc}") from exc
            if not vector or not all(isinstance(x, int | float) and math.isfinite(x) for x in vector):
                raise ProviderError(ErrorCode.UPSTREAM_ERROR, "query embedding is empty or not finite")
            return [VectorizedQuery(vector=[float(x) for x in vector], k_nearest_neighbors=k, fields=VECTOR_FIELD)]
        if self._mode == "integrated":
            return [VectorizableTextQuery(text=query, k_nearest_neighbors=k, fields=VECTOR_FIELD)]
        return None

    def search(self, query: str, *, top_k: int, filter: str | None = None) -> list[Chunk]:
        """Return the best chunks for a query (empty list when nothing matches)."""
        text = query.strip()
        if not text:
            raise ProviderError(ErrorCode.INVALID_INPUT, "search query is empty")
        if not 1 <= top_k <= 1000:
            raise ProviderError(ErrorCode.INVALID_INPUT, f"top_k must be between 1 and 1000, got {top_k}")
        odata = translate_filter(filter)
        kwargs: dict[str, Any] = {
            "search_text": text,
            "top": top_k,
            "select": SELECT_FIELDS,
            "filter": odata,
            "vector_queries": self._vector_queries(text, top_k),
        }
        if self._options.semantic_config:
            kwargs.update(
                query_type="semantic",
                semantic_configuration_name=self._options.semantic_config,
                query_caption="extractive",
                query_caption_highlight_enabled=False,
            )
        try:
            results = list(self._client.search(**kwargs))
        except Exception as exc:
            raise classify_search_error(exc) from exc
        chunks = [_to_chunk(doc) for doc in results[:top_k]]
        return chunks


def _to_chunk(doc: Mapping[str, Any]) -> Chunk:
    captions = doc.get("@search.captions") or []
    caption_texts = [str(_caption_text(c)) for c in captions if _caption_text(c)]
    reranker = doc.get("@search.reranker_score")
    score = reranker if reranker is not None else doc.get("@search.score")
    source_id = doc.get("source_id") or doc.get(KEY_FIELD) or ""
    return Chunk(
        source_id=str(source_id),
        title=str(doc.get("title") or doc.get("doc_id") or source_id),
        content=bound_snippet(" … ".join(caption_texts) if caption_texts else str(doc.get("content") or "")),
        score=float(score or 0.0),
        path=doc.get("path"),
    )


def _caption_text(caption: Any) -> str | None:
    if isinstance(caption, Mapping):
        return caption.get("text")
    return getattr(caption, "text", None)


# --- clients -----------------------------------------------------------------------------------


def build_azure_retriever(
    settings: Settings,
    embed: EmbedFn | None = None,
    *,
    credential: AzureKeyCredential | TokenCredential | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    connection_verify: bool | str | None = None,
) -> AzureSearchRetriever:
    """Build the Azure AI Search retriever from settings (no network until the first search)."""
    from azure.search.documents import SearchClient

    endpoint = require_endpoint(settings)
    client = SearchClient(
        endpoint=endpoint,
        index_name=settings.azure_search_index,
        credential=credential or build_search_credential(settings),
        **client_kwargs(timeout_s, connection_verify),
    )
    options = SearchOptions(
        vector_mode=settings.azure_search_vector_mode,
        semantic_config=settings.azure_search_semantic_config or None,
    )
    if settings.azure_search_vector_mode in ("auto", "client"):
        embed = default_embedder(settings, embed)
    return AzureSearchRetriever(client, embed=embed, options=options)
