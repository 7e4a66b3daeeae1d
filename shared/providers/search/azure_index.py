"""Azure AI Search: the index schema this app creates and the sink that uploads chunks into it."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from shared.jobs.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    from azure.core.credentials import AzureKeyCredential, TokenCredential
    from azure.search.documents import SearchClient
    from azure.search.documents.indexes import SearchIndexClient
    from azure.search.documents.indexes.models import SearchIndex

    from shared.runtime.settings import Settings

from shared.providers.search.azure_clients import (
    build_search_credential,
    client_kwargs,
    default_embedder,
    require_endpoint,
)
from shared.providers.search.azure_errors import classify_search_error
from shared.providers.search.azure_fields import (
    HNSW_CONFIG,
    KEY_FIELD,
    PREFIX_FIELD,
    TAGS_FIELD,
    UPLOAD_BATCH_SIZE,
    VECTOR_FIELD,
    VECTOR_PROFILE,
    VECTORIZER_NAME,
    EmbedFn,
    doc_prefixes,
)

logger = logging.getLogger(__name__)

# --- index schema and ingestion ----------------------------------------------------------------


class IndexableChunk(Protocol):
    """What the sink needs from a chunk (``shared.jobs.contracts.Chunk`` fits)."""

    @property
    def source_id(self) -> str: ...  # noqa: D102

    @property
    def title(self) -> str: ...  # noqa: D102

    @property
    def content(self) -> str: ...  # noqa: D102

    @property
    def path(self) -> str | None: ...  # noqa: D102


def document_key(source_id: str) -> str:
    """Index key for a source id: keys allow only letters, digits, ``_``, ``-`` and ``=``."""
    return base64.urlsafe_b64encode(source_id.encode("utf-8")).decode("ascii")


def doc_id_of(source_id: str) -> str:
    """The document part of a ``<doc-id>#<chunk-no>`` source id."""
    return source_id.rsplit("#", 1)[0]


@dataclass
class VectorizerConfig:
    """The Azure OpenAI deployment the index's integrated vectorizer calls for query vectors."""

    resource_url: str
    deployment_name: str
    model_name: str


def build_index_schema(
    name: str,
    *,
    vector_dimensions: int | None,
    semantic_config: str | None,
    vectorizer: VectorizerConfig | None = None,
) -> SearchIndex:
    """The index definition: key, searchable text, filterable ids, optional vector and semantic parts."""
    from azure.search.documents.indexes.models import (
        AzureOpenAIVectorizer,
        AzureOpenAIVectorizerParameters,
        HnswAlgorithmConfiguration,
        HnswParameters,
        SearchableField,
        SearchField,
        SearchFieldDataType,
        SearchIndex,
        SemanticConfiguration,
        SemanticField,
        SemanticPrioritizedFields,
        SemanticSearch,
        SimpleField,
        VectorSearch,
        VectorSearchProfile,
        VectorSearchVectorizer,
    )

    fields: list[Any] = [
        SimpleField(name=KEY_FIELD, type=SearchFieldDataType.STRING, key=True, filterable=True),
        SimpleField(name="source_id", type=SearchFieldDataType.STRING, filterable=True),
        SimpleField(name="doc_id", type=SearchFieldDataType.STRING, filterable=True, facetable=True),
        SearchableField(name="title", type=SearchFieldDataType.STRING),
        SearchableField(name="content", type=SearchFieldDataType.STRING),
        SimpleField(name="path", type=SearchFieldDataType.STRING, filterable=True),
        SimpleField(name="doc_title", type=SearchFieldDataType.STRING, filterable=True),
        SimpleField(name="chunk_no", type=SearchFieldDataType.INT32, filterable=True, sortable=True),
        SimpleField(name="doc_sha256", type=SearchFieldDataType.STRING, filterable=True),
        SimpleField(name=TAGS_FIELD, type="Collection(Edm.String)", filterable=True, facetable=True),
        SimpleField(name=PREFIX_FIELD, type="Collection(Edm.String)", filterable=True, hidden=True),
    ]
    vector_search = None
    if vector_dimensions:
        fields.append(
            SearchField(
                name=VECTOR_FIELD,
                type="Collection(Edm.Single)",
                searchable=True,
                retrievable=False,
                vector_search_dimensions=vector_dimensions,
                vector_search_profile_name=VECTOR_PROFILE,
            )
        )
        vectorizers: list[VectorSearchVectorizer] = []
        if vectorizer is not None:
            vectorizers.append(
                AzureOpenAIVectorizer(
                    vectorizer_name=VECTORIZER_NAME,
                    parameters=AzureOpenAIVectorizerParameters(
                        resource_url=vectorizer.resource_url,
                        deployment_name=vectorizer.deployment_name,
                        model_name=vectorizer.model_name,
                    ),
                )
            )
        vector_search = VectorSearch(
            algorithms=[HnswAlgorithmConfiguration(name=HNSW_CONFIG, parameters=HnswParameters(metric="cosine"))],
            profiles=[
                VectorSearchProfile(
                    name=VECTOR_PROFILE,
                    algorithm_configuration_name=HNSW_CONFIG,
                    vectorizer_name=VECTORIZER_NAME if vectorizer is not None else None,
                )
            ],
            vectorizers=vectorizers or None,
        )
    semantic_search = None
    if semantic_config:
        semantic_search = SemanticSearch(
            default_configuration_name=semantic_config,
            configurations=[
                SemanticConfiguration(
                    name=semantic_config,
                    prioritized_fields=SemanticPrioritizedFields(
                        title_field=SemanticField(field_name="title"),
                        content_fields=[SemanticField(field_name="content")],
                    ),
                )
            ],
        )
    return SearchIndex(name=name, fields=fields, vector_search=vector_search, semantic_search=semantic_search)


@dataclass
class UploadReport:
    """What an upload did."""

    uploaded: int = 0
    failed: list[str] = field(default_factory=list)
    batches: int = 0


class AzureSearchSink:
    """Ingestion target that creates the index and uploads chunks in batches."""

    def __init__(
        self,
        index_client: SearchIndexClient,
        search_client: SearchClient,
        *,
        index_name: str,
        embed: EmbedFn | None = None,
        semantic_config: str | None = None,
        vectorizer: VectorizerConfig | None = None,
        batch_size: int = UPLOAD_BATCH_SIZE,
    ) -> None:
        if not 1 <= batch_size <= 1000:
            raise ValueError("batch_size must be between 1 and 1000 (the service's per-request limit)")
        self._index_client = index_client
        self._search_client = search_client
        self._index_name = index_name
        self._embed = embed
        self._semantic_config = semantic_config
        self._vectorizer = vectorizer
        self._batch_size = batch_size
        self._dimensions: int | None = None

    def _embed_text(self, text: str) -> list[float]:
        assert self._embed is not None
        vector = [float(x) for x in self._embed(text)]
        if not vector:
            raise ProviderError(ErrorCode.UPSTREAM_ERROR, "the embedding function returned an empty vector")
        if self._dimensions is not None and len(vector) != self._dimensions:
            raise ProviderError(
                ErrorCode.UPSTREAM_ERROR,
                f"embedding has {len(vector)} dimensions, the index expects {self._dimensions}",
            )
        return vector

    def create_or_update_index(self, *, vector_dimensions: int | None = None) -> SearchIndex:
        """Create the index, or update it in place when it exists.

        Without ``vector_dimensions`` and with an embedding function, one probe embedding sets them.
        """
        if vector_dimensions is None and self._embed is not None:
            vector_dimensions = len(self._embed_text("dimension probe"))
        if self._vectorizer is not None and not vector_dimensions:
            raise ProviderError(
                ErrorCode.CONFIG_ERROR,
                "an integrated vectorizer only vectorises queries: ingestion needs an embedding function "
                "(AZURE_OPENAI_EMBEDDING_DEPLOYMENT) to store document vectors",
            )
        self._dimensions = vector_dimensions
        schema = build_index_schema(
            self._index_name,
            vector_dimensions=vector_dimensions,
            semantic_config=self._semantic_config,
            vectorizer=self._vectorizer if vector_dimensions else None,
        )
        try:
            return self._index_client.create_or_update_index(schema)
        except Exception as exc:
            raise classify_search_error(exc) from exc

    def delete_index(self) -> bool:
        """Delete the index and everything in it; False when it did not exist."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self._index_client.delete_index(self._index_name)
        except ResourceNotFoundError:
            return False
        except Exception as exc:
            raise classify_search_error(exc) from exc
        return True

    def upload(self, chunks: Iterable[IndexableChunk]) -> UploadReport:
        """Upload (upsert) chunks in batches; a document the service rejects is reported, not fatal."""
        report = UploadReport()
        batch: list[dict[str, Any]] = []
        for chunk in chunks:
            batch.append(self._document(chunk))
            if len(batch) >= self._batch_size:
                self._send(batch, report)
                batch = []
        if batch:
            self._send(batch, report)
        return report

    def _document(self, chunk: IndexableChunk) -> dict[str, Any]:
        doc_id = getattr(chunk, "doc_id", None) or doc_id_of(chunk.source_id)
        chunk_no = getattr(chunk, "chunk_no", None)
        if chunk_no is None and chunk.source_id.rsplit("#", 1)[-1].isdigit():
            chunk_no = int(chunk.source_id.rsplit("#", 1)[-1])
        doc: dict[str, Any] = {
            KEY_FIELD: document_key(chunk.source_id),
            "source_id": chunk.source_id,
            "doc_id": doc_id,
            # IngestedChunk has a display title (document — section); a contract Chunk has a title.
            "title": getattr(chunk, "display_title", None) or chunk.title,
            "content": chunk.content,
            "path": chunk.path,
            "doc_title": chunk.title,
            "chunk_no": chunk_no,
            "doc_sha256": getattr(chunk, "doc_sha256", None),
            TAGS_FIELD: [str(t).lower() for t in getattr(chunk, "tags", None) or []],
            PREFIX_FIELD: doc_prefixes(doc_id),
        }
        if self._embed is not None and self._dimensions:
            doc[VECTOR_FIELD] = self._embed_text(chunk.content)
        return doc

    def stored_documents(self, *, page_size: int = 1000) -> dict[str, tuple[str, str | None]]:
        """Every stored chunk: index key → (doc_id, doc_sha256). Pages with ``$skip`` (max 100,000)."""
        stored: dict[str, tuple[str, str | None]] = {}
        skip = 0
        while True:
            try:
                page = list(
                    self._search_client.search(
                        search_text="*",
                        select=[KEY_FIELD, "doc_id", "doc_sha256"],
                        order_by=[KEY_FIELD],
                        top=page_size,
                        skip=skip,
                    )
                )
            except Exception as exc:
                raise classify_search_error(exc) from exc
            for item in page:
                stored[str(item[KEY_FIELD])] = (str(item.get("doc_id") or ""), item.get("doc_sha256"))
            if len(page) < page_size:
                return stored
            skip += page_size
            if skip > 100_000:
                raise ProviderError(
                    ErrorCode.SEARCH_ERROR, "index has more than 100,000 chunks; rebuild it with --rebuild"
                )

    def delete(self, keys: Iterable[str]) -> int:
        """Delete chunks by index key, in batches; returns how many the service confirmed."""
        pending = list(keys)
        deleted = 0
        for start in range(0, len(pending), self._batch_size):
            batch = [{KEY_FIELD: key} for key in pending[start : start + self._batch_size]]
            try:
                results = self._search_client.delete_documents(documents=batch)
            except Exception as exc:
                raise classify_search_error(exc) from exc
            deleted += sum(1 for r in results if r.succeeded)
        return deleted

    def _send(self, batch: list[dict[str, Any]], report: UploadReport) -> None:
        try:
            results = self._search_client.upload_documents(documents=batch)
        except Exception as exc:
            raise classify_search_error(exc) from exc
        report.batches += 1
        keys = {d[KEY_FIELD]: d["source_id"] for d in batch}
        for result in results:
            if result.succeeded:
                report.uploaded += 1
            else:
                source = keys.get(result.key, result.key)
                report.failed.append(f"{source}: {result.status_code} {result.error_message or ''}".strip())
        if report.failed:
            logger.warning("Azure AI Search rejected %d document(s), first: %s", len(report.failed), report.failed[0])


def build_azure_sink(
    settings: Settings,
    embed: EmbedFn | None = None,
    *,
    credential: AzureKeyCredential | TokenCredential | None = None,
    timeout_s: float = 120.0,
    connection_verify: bool | str | None = None,
    batch_size: int = UPLOAD_BATCH_SIZE,
) -> AzureSearchSink:
    """Build the ingestion sink from settings (the index is created by ``create_or_update_index``)."""
    from azure.search.documents import SearchClient
    from azure.search.documents.indexes import SearchIndexClient

    endpoint = require_endpoint(settings)
    cred = credential or build_search_credential(settings)
    kwargs = client_kwargs(timeout_s, connection_verify)
    vectorizer = None
    if (
        settings.azure_search_vector_mode == "integrated"
        and settings.azure_openai_endpoint
        and settings.azure_openai_embedding_deployment
    ):
        vectorizer = VectorizerConfig(
            resource_url=settings.azure_openai_endpoint.split("/openai/")[0].rstrip("/"),
            deployment_name=settings.azure_openai_embedding_deployment,
            model_name=settings.azure_search_vectorizer_model,
        )
    elif settings.azure_search_vector_mode == "integrated":
        raise ProviderError(
            ErrorCode.CONFIG_ERROR,
            "AZURE_SEARCH_VECTOR_MODE=integrated needs AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_EMBEDDING_DEPLOYMENT "
            "for the index's vectorizer",
        )
    embed = default_embedder(settings, embed)
    return AzureSearchSink(
        SearchIndexClient(endpoint=endpoint, credential=cred, **kwargs),
        SearchClient(endpoint=endpoint, index_name=settings.azure_search_index, credential=cred, **kwargs),
        index_name=settings.azure_search_index,
        embed=embed,
        semantic_config=settings.azure_search_semantic_config or None,
        vectorizer=vectorizer,
        batch_size=batch_size,
    )
