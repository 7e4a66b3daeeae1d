"""Azure AI Search: the credential, embedder and client options shared by the retriever and the sink."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from shared.jobs.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    from azure.core.credentials import AzureKeyCredential, TokenCredential

    from shared.runtime.settings import Settings

from shared.providers.search.azure_fields import DEFAULT_TIMEOUT_S, EmbedFn

logger = logging.getLogger(__name__)


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

    from shared.providers.llm.openai import AZURE_OPENAI_SCOPE, azure_v1_base_url
    from shared.providers.llm.openai_errors import map_openai_error

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


def default_embedder(settings: Settings, embed: EmbedFn | None) -> EmbedFn | None:
    """The injected embedder, else one from the settings unless vectors are off."""
    if embed is not None or settings.azure_search_vector_mode == "off":
        return embed
    return build_embedder(settings)


def client_kwargs(timeout_s: float, connection_verify: bool | str | None) -> dict[str, Any]:
    """The SDK client options: no SDK retries, bounded connect and read timeouts."""
    kwargs: dict[str, Any] = {
        "retry_total": 0,  # the orchestrator owns retries
        "connection_timeout": min(10.0, timeout_s),
        "read_timeout": timeout_s,
    }
    if connection_verify is not None:
        kwargs["connection_verify"] = connection_verify
    return kwargs


def require_endpoint(settings: Settings) -> str:
    """The configured search endpoint, or a CONFIG_ERROR saying what is wrong with it."""
    endpoint = (settings.azure_search_endpoint or "").strip()
    if not endpoint:
        raise ProviderError(ErrorCode.CONFIG_ERROR, "SEARCH_PROVIDER=azure needs AZURE_SEARCH_ENDPOINT")
    if not endpoint.startswith(("https://", "http://")):
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"AZURE_SEARCH_ENDPOINT must be a URL, got {endpoint!r}")
    return endpoint.rstrip("/")
