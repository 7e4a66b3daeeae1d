"""``GET /api/llm/models`` (the models an agent may choose) and ``POST /api/llm/test`` (a connection test).

The offline model is always there. ``LLM_PROVIDER=openai`` lists the server's ``GET /v1/models`` (OpenAI,
or any OpenAI-compatible server: Ollama, LM Studio, vLLM, llama.cpp). Azure OpenAI's data plane lists base
models, not deployments, so the configured deployments are shown. The test makes one tiny chat call to the
chosen model and says in one result what happened; a failed connection is a result (200), not an error.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel, ConfigDict, Field

from api.common import parse_body, request_caller
from api.contract.bodies import LlmModels, LlmTestResult, dump_body
from api.errors import ApiError, guarded, json_response

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

# A connection test waits this long at most (the SDK's own timeout; no retries).
TEST_TIMEOUT_S = 20.0
MAX_MODELS = 500


class LlmTest(BaseModel):
    """Body of ``POST /api/llm/test``: which provider and model (default: the configured ones)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["offline", "azure_openai", "openai"] | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200)


def _provider_client(settings: Settings) -> Any:
    """The configured OpenAI-compatible provider (its ``client`` and ``default_model``); CONFIG errors as 409."""
    from shared.jobs.contracts import ProviderError
    from shared.providers.llm.openai import build_llm_provider

    try:
        return build_llm_provider(settings)
    except ProviderError as exc:
        raise ApiError(409, "LLM_NOT_CONFIGURED", str(exc), field="provider") from exc


def _configured(settings: Settings) -> list[dict[str, Any]]:
    deployments = [settings.azure_openai_chat_deployment, settings.azure_openai_embedding_deployment]
    return [{"id": d, "source": "settings"} for d in deployments if d]


def _listed(settings: Settings) -> dict[str, Any]:
    """The models the configured provider lists (or why they could not be listed)."""
    entry: dict[str, Any] = {"provider": settings.llm_provider, "models": [], "error": None}
    if settings.llm_provider == "azure_openai":
        entry |= {"endpoint": settings.azure_openai_endpoint, "models": _configured(settings)}
        return entry
    provider = _provider_client(settings)
    entry["endpoint"] = str(provider.client.base_url)
    try:
        page = provider.client.with_options(timeout=TEST_TIMEOUT_S).models.list()
        models = [{"id": m.id, "owned_by": getattr(m, "owned_by", None), "source": "server"} for m in page.data]
        entry["models"] = models[:MAX_MODELS]
    except Exception as exc:  # noqa: BLE001 - every failure is reported in the result
        entry["error"] = _error_of(exc)
    return entry


def _error_of(exc: BaseException) -> dict[str, Any]:
    """A failed call as a stable code and a sentence (no secrets: the SDK's messages carry none)."""
    import openai

    codes: list[tuple[type[BaseException], str]] = [
        (openai.AuthenticationError, "AUTH_FAILED"),
        (openai.PermissionDeniedError, "AUTH_FAILED"),
        (openai.NotFoundError, "MODEL_NOT_FOUND"),
        (openai.RateLimitError, "RATE_LIMITED"),
        (openai.APITimeoutError, "TIMEOUT"),
        (openai.APIConnectionError, "UNREACHABLE"),
        (openai.APIStatusError, "UPSTREAM_ERROR"),
    ]
    code = next((c for kind, c in codes if isinstance(exc, kind)), "UNKNOWN_ERROR")
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", None) or exc)[:500]
    return {"code": code, "message": message, **({"status": status} if status else {})}


def list_models(settings: Settings) -> dict[str, Any]:
    """Every provider the app can use with its models."""
    offline = {"provider": "offline", "endpoint": None, "models": [{"id": "offline", "source": "embedded"}]}
    providers = [offline]
    if settings.llm_provider != "offline":
        providers.append(_listed(settings))
    return {"configured": settings.llm_provider, "providers": providers}


def connection_test(settings: Settings, request: LlmTest) -> dict[str, Any]:
    """One tiny chat call to the model; the result says whether it answered, how fast, or why not."""
    provider_name = request.provider or settings.llm_provider
    if provider_name == "offline":
        return {"ok": True, "provider": "offline", "model": "offline", "latency_ms": 0,
                "message": "the embedded offline model needs no connection"}  # fmt: skip
    if provider_name != settings.llm_provider:
        raise ApiError(
            400,
            "INVALID_REQUEST",
            f"provider {provider_name!r} is not configured (LLM_PROVIDER is {settings.llm_provider!r})",
            field="provider",
        )
    provider = _provider_client(settings)
    model = request.model or provider.default_model
    result: dict[str, Any] = {"provider": provider_name, "endpoint": str(provider.client.base_url), "model": model}
    started = time.perf_counter()
    try:
        provider.client.with_options(timeout=TEST_TIMEOUT_S).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Reply with OK."}], **{provider.token_param: 5}
        )
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        result |= {"ok": False, "error": _error_of(exc)}
    else:
        result |= {"ok": True, "message": f"{model} answered"}
    result["latency_ms"] = int((time.perf_counter() - started) * 1000)
    return result


async def models_handler(req: func.HttpRequest) -> func.HttpResponse:
    """GET /api/llm/models."""
    from shared.runtime.settings import get_settings

    request_caller(req)
    return json_response(dump_body(LlmModels.model_validate(await asyncio.to_thread(list_models, get_settings()))))


async def llm_test_handler(req: func.HttpRequest) -> func.HttpResponse:
    """POST /api/llm/test."""
    from shared.runtime.settings import get_settings

    request_caller(req)
    body = parse_body(req, LlmTest, "optional 'provider' and 'model'") if req.get_body() else LlmTest()
    result = await asyncio.to_thread(connection_test, get_settings(), body)
    return json_response(dump_body(LlmTestResult.model_validate(result)))


def register(bp: df.Blueprint, level: func.AuthLevel | None) -> None:
    """Register the LLM routes."""

    @bp.route(route="llm/models", methods=["GET"], auth_level=level)
    async def llm_models(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("llm_models", lambda: models_handler(req))

    @bp.route(route="llm/test", methods=["POST"], auth_level=level)
    async def llm_test(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("llm_test", lambda: llm_test_handler(req))
