"""Azure AI Search: the hybrid retriever, the index schema and the ingestion sink.

The retriever sends one hybrid request (keyword + vector) through the official
``azure.search.documents.SearchClient``. The query vector comes either from an injected embedding
function (an Azure OpenAI embedding deployment, owned by the LLM provider) or from the index's
integrated vectorizer (``VectorizableTextQuery``). The semantic ranker is used when a semantic
configuration is set, and its extractive captions replace the chunk content when present.

The SDK's own retries are off: the orchestrator owns retries, so every fault comes back at once as a
classified ``ProviderError`` (with the service's retry-after when it sends one).
"""

from __future__ import annotations

import base64
import email.utils
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from shared.ingest.text import bound_snippet
from shared.jobs.contracts import Chunk, ErrorCode, ProviderError
from shared.providers.search.filter import split_filter_terms

if TYPE_CHECKING:
    from azure.core.credentials import AzureKeyCredential, TokenCredential
    from azure.search.documents import SearchClient
    from azure.search.documents.indexes import SearchIndexClient
    from azure.search.documents.indexes.models import SearchIndex

    from shared.runtime.settings import Settings

logger = logging.getLogger(__name__)

EmbedFn = Callable[[str], list[float]]
VectorMode = Literal["auto", "client", "integrated", "off"]

# Field names of the index this app creates (and expects when it queries).
KEY_FIELD = "id"
VECTOR_FIELD = "content_vector"
PREFIX_FIELD = "doc_prefixes"
TAGS_FIELD = "tags"
SELECT_FIELDS = ["id", "source_id", "doc_id", "title", "content", "path"]
VECTOR_PROFILE = "content-vector-profile"
HNSW_CONFIG = "content-hnsw"
VECTORIZER_NAME = "content-aoai-vectorizer"

# How many nearest neighbours the vector leg fetches before fusion (the service caps k at 1000 per
# query; 50 is what the semantic ranker reranks at most, so fetching more only costs latency).
VECTOR_K = 50
MAX_FILTER_LENGTH = 4_000
DEFAULT_TIMEOUT_S = 30.0
UPLOAD_BATCH_SIZE = 500
TITLES_TTL_S = 300.0

_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# --- OData filters -----------------------------------------------------------------------------


def odata_literal(value: str) -> str:
    """Quote a string as an OData literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _check_field(name: str) -> str:
    if not _FIELD_NAME.match(name):
        raise ProviderError(ErrorCode.INVALID_INPUT, f"not a valid index field name: {name!r}")
    return name


def odata_eq(field_name: str, value: str) -> str:
    """Build ``field eq 'value'`` with the value escaped."""
    return f"{_check_field(field_name)} eq {odata_literal(value)}"


def odata_in(field_name: str, values: Sequence[str]) -> str:
    """Build ``search.in(field, 'a|b', '|')``, the fast form of many ``eq`` joined by ``or``."""
    if not values:
        raise ProviderError(ErrorCode.INVALID_INPUT, "search.in needs at least one value")
    delimiter = next((d for d in ("|", ",", ";", "~", "^") if not any(d in v for v in values)), None)
    if delimiter is None:
        raise ProviderError(ErrorCode.INVALID_INPUT, "values contain every supported delimiter")
    joined = delimiter.join(values)
    return f"search.in({_check_field(field_name)}, {odata_literal(joined)}, {odata_literal(delimiter)})"


def validate_filter(expression: str | None) -> str | None:
    """Check a caller's OData filter before it is passed through (the service parses it for real).

    Rejects what can only be a mistake or an injection attempt: control characters, an unterminated
    string literal, unbalanced parentheses, and oversize input. Returns the stripped expression or
    ``None`` for an empty one.
    """
    if expression is None:
        return None
    text = expression.strip()
    if not text:
        return None
    if len(text) > MAX_FILTER_LENGTH:
        raise ProviderError(ErrorCode.INVALID_INPUT, f"filter is longer than {MAX_FILTER_LENGTH} characters")
    if _CONTROL_CHARS.search(text):
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter contains control characters")
    depth = 0
    in_string = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "'":
                if i + 1 < len(text) and text[i + 1] == "'":
                    i += 1  # an escaped quote inside the literal
                else:
                    in_string = False
        elif ch == "'":
            in_string = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unmatched ')'")
        i += 1
    if in_string:
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unterminated string literal")
    if depth != 0:
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unmatched '('")
    return text


_ODATA_HINT = re.compile(r"'|\(|\s(?:eq|ne|gt|ge|lt|le)\s")


def translate_filter(expression: str | None) -> str | None:
    """Turn the app's portable filter into OData, or pass an OData filter through after validation.

    The portable form is the local index's (``shared.providers.search.local``): space- or comma-separated terms,
    ``doc:<doc-id prefix>`` (or a bare term) and ``tag:<tag>``; terms of one kind are OR-ed, the two
    kinds AND-ed. A doc-id prefix matches at a folder boundary or the whole id (``policies``,
    ``policies/`` and ``policies/warranty.md`` all work), because the index stores those prefixes.
    Anything with quotes, parentheses or a comparison operator is taken as OData.
    """
    text = validate_filter(expression)
    if text is None or _ODATA_HINT.search(text):
        return text
    prefixes, tags = split_filter_terms(text)
    clauses = []
    if prefixes:
        clauses.append(f"{PREFIX_FIELD}/any(p: {odata_in('p', sorted(set(prefixes)))})")
    if tags:
        clauses.append(f"{TAGS_FIELD}/any(t: {odata_in('t', sorted(set(tags)))})")
    return " and ".join(clauses) or None


def doc_prefixes(doc_id: str) -> list[str]:
    """Every folder-boundary prefix of a doc id (with and without the slash) and the id itself."""
    parts = doc_id.strip("/").split("/")
    out: list[str] = []
    for i in range(1, len(parts)):
        head = "/".join(parts[:i])
        out += [head, head + "/"]
    out.append(doc_id.strip("/"))
    return list(dict.fromkeys(p.lower() for p in out))


# --- error mapping -----------------------------------------------------------------------------


def _retry_after_ms(headers: Mapping[str, str] | None) -> int | None:
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        raw = lowered.get(name)
        if raw:
            try:
                return max(0, int(float(raw)))
            except ValueError:
                pass
    raw = lowered.get("retry-after")
    if not raw:
        return None
    try:
        return max(0, int(float(raw) * 1000))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw else None
        if parsed is None:
            return None
        return max(0, int((parsed.timestamp() - time.time()) * 1000))


def classify_search_error(exc: BaseException) -> ProviderError:
    """Map an azure-core / azure-identity exception to a contract ``ProviderError``."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, ProviderError):
        return exc
    message = _short_message(exc)
    if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
        # Raised by the credential itself (no token could be obtained), before any request.
        return ProviderError(ErrorCode.AUTH_FAILED, f"Azure AI Search credential failed: {message}")
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        raw_headers = getattr(exc.response, "headers", None)
        headers = dict(raw_headers) if raw_headers is not None else None
        retry_after = _retry_after_ms(headers)
        if status == 429:
            return ProviderError(
                ErrorCode.RATE_LIMITED, f"Azure AI Search throttled the request: {message}", retry_after_ms=retry_after
            )
        if status == 503:
            return ProviderError(
                ErrorCode.TRANSIENT, f"Azure AI Search is unavailable: {message}", retry_after_ms=retry_after
            )
        if status in (408, 504):
            return ProviderError(ErrorCode.TRANSIENT, f"Azure AI Search timed out ({status}): {message}")
        if status in (401, 403):
            return ProviderError(ErrorCode.AUTH_FAILED, f"Azure AI Search refused the credential ({status}): {message}")
        if status == 404:
            return ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"Azure AI Search index not found ({message}); create it with "
                "`python -m shared.ingest <folder> --target azure`",
            )
        if 500 <= status < 600:
            return ProviderError(ErrorCode.UPSTREAM_ERROR, f"Azure AI Search failed ({status}): {message}")
        return ProviderError(ErrorCode.SEARCH_ERROR, f"Azure AI Search rejected the request ({status}): {message}")
    if isinstance(exc, ServiceRequestError) and "CERTIFICATE_VERIFY_FAILED" in message:
        # A retry cannot fix an untrusted certificate.
        return ProviderError(ErrorCode.CONFIG_ERROR, f"Azure AI Search TLS certificate rejected: {message}")
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        # Connection refused/reset, DNS, TLS and read timeouts: nothing reached a verdict.
        return ProviderError(ErrorCode.TRANSIENT, f"Azure AI Search connection failed: {message}")
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"Azure AI Search call failed: {type(exc).__name__}: {message}")


def _short_message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    first = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    return first[:500]


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


def build_search_credential(settings: Settings) -> AzureKeyCredential | TokenCredential:
    """API key when one is set, otherwise Entra ID (managed identity client id on Azure)."""
    if settings.azure_search_api_key is not None:
        from azure.core.credentials import AzureKeyCredential

        logger.info("Azure AI Search: authenticating with an API key")
        return AzureKeyCredential(settings.azure_search_api_key.get_secret_value())
    from azure.identity import DefaultAzureCredential

    logger.info(
        "Azure AI Search: authenticating with DefaultAzureCredential%s",
        " (managed identity client id set)" if settings.azure_client_id else "",
    )
    return DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)


def build_embedder(
    settings: Settings, *, credential: TokenCredential | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> EmbedFn | None:
    """An embedding function over the Azure OpenAI embedding deployment (None when none is configured).

    Uses ``AZURE_OPENAI_API_KEY`` when set, else an Entra ID bearer token; the SDK's retries are off.
    """
    deployment = settings.azure_openai_embedding_deployment
    if not deployment or not settings.azure_openai_endpoint:
        return None
    import openai

    from shared.providers.llm.openai import AZURE_OPENAI_SCOPE, azure_v1_base_url, map_openai_error

    api_key: Any
    if settings.azure_openai_api_key is not None:
        api_key = settings.azure_openai_api_key.get_secret_value()
    else:
        from azure.identity import DefaultAzureCredential, get_bearer_token_provider

        cred = credential or DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        api_key = get_bearer_token_provider(cred, AZURE_OPENAI_SCOPE)
    client = openai.OpenAI(
        api_key=api_key, base_url=azure_v1_base_url(settings.azure_openai_endpoint), max_retries=0, timeout=timeout_s
    )

    def embed(text: str) -> list[float]:
        try:
            response = client.embeddings.create(model=deployment, input=text, encoding_format="float")
        except Exception as exc:
            raise map_openai_error(exc, model=deployment, timeout_s=timeout_s) from exc
        return [float(x) for x in response.data[0].embedding]

    logger.info("Azure AI Search: query and document vectors from embedding deployment %s", deployment)
    return embed


def _default_embedder(settings: Settings, embed: EmbedFn | None) -> EmbedFn | None:
    if embed is not None or settings.azure_search_vector_mode == "off":
        return embed
    return build_embedder(settings)


def _client_kwargs(timeout_s: float, connection_verify: bool | str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "retry_total": 0,  # the orchestrator owns retries
        "connection_timeout": min(10.0, timeout_s),
        "read_timeout": timeout_s,
    }
    if connection_verify is not None:
        kwargs["connection_verify"] = connection_verify
    return kwargs


def _require_endpoint(settings: Settings) -> str:
    endpoint = (settings.azure_search_endpoint or "").strip()
    if not endpoint:
        raise ProviderError(ErrorCode.CONFIG_ERROR, "SEARCH_PROVIDER=azure needs AZURE_SEARCH_ENDPOINT")
    if not endpoint.startswith(("https://", "http://")):
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"AZURE_SEARCH_ENDPOINT must be a URL, got {endpoint!r}")
    return endpoint.rstrip("/")


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

    endpoint = _require_endpoint(settings)
    client = SearchClient(
        endpoint=endpoint,
        index_name=settings.azure_search_index,
        credential=credential or build_search_credential(settings),
        **_client_kwargs(timeout_s, connection_verify),
    )
    options = SearchOptions(
        vector_mode=settings.azure_search_vector_mode,
        semantic_config=settings.azure_search_semantic_config or None,
    )
    if settings.azure_search_vector_mode in ("auto", "client"):
        embed = _default_embedder(settings, embed)
    return AzureSearchRetriever(client, embed=embed, options=options)


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

    endpoint = _require_endpoint(settings)
    cred = credential or build_search_credential(settings)
    kwargs = _client_kwargs(timeout_s, connection_verify)
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
    embed = _default_embedder(settings, embed)
    return AzureSearchSink(
        SearchIndexClient(endpoint=endpoint, credential=cred, **kwargs),
        SearchClient(endpoint=endpoint, index_name=settings.azure_search_index, credential=cred, **kwargs),
        index_name=settings.azure_search_index,
        embed=embed,
        semantic_config=settings.azure_search_semantic_config or None,
        vectorizer=vectorizer,
        batch_size=batch_size,
    )
