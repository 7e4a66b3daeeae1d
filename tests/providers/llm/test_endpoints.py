"""Each endpoint flavour, built from settings, against the fake OpenAI server with the real client."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.llm.openai import AZURE_OPENAI_SCOPE, azure_v1_base_url, build_llm_provider
from shared.runtime.pricing import estimate_cost
from shared.runtime.settings import DEFAULT_MODEL_PRICES, Settings
from tests.fakes.credentials import StaticTokenCredential as FakeCredential
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.providers.llm.helpers import SQL_DRAFT, sql_request


def test_azure_with_api_key_calls_the_v1_path_and_reports_the_deployment() -> None:
    with FakeOpenAI(api_key="azure-key-1", response_model="gpt-4.1-mini-2025-04-14") as fake:
        fake.always(JsonReply(SQL_DRAFT, usage=(1200, 80)), task="write_sql")
        settings = Settings(
            llm_provider="azure_openai",
            azure_openai_endpoint=fake.endpoint + "/",
            azure_openai_api_key=SecretStr("azure-key-1"),
            azure_openai_chat_deployment="sql-writer-dep",
        )
        provider = build_llm_provider(settings)
        response = provider.generate(sql_request(max_tokens=300, temperature=0.1))
    assert provider.name == "azure_openai" and provider.default_model == "sql-writer-dep"
    assert response.output.sql == SQL_DRAFT["sql"]
    # Azure reports the underlying model; model_used is the deployment that was called.
    assert response.model_used == "sql-writer-dep"
    assert (response.tokens_input, response.tokens_output) == (1200, 80)
    [request] = fake.requests
    assert request.path == "/openai/v1/chat/completions"
    assert "api-version" not in request.path
    assert request.headers["authorization"] == "Bearer azure-key-1"
    assert request.body["model"] == "sql-writer-dep"
    assert request.body["max_completion_tokens"] == 300 and "max_tokens" not in request.body
    assert request.body["temperature"] == 0.1
    assert fake.failures == []


def test_azure_with_entra_token_provider_sends_the_token_per_request() -> None:
    credential = FakeCredential("entra-token-abc")
    with FakeOpenAI(api_key="entra-token-abc") as fake:
        fake.always(JsonReply(SQL_DRAFT))
        settings = Settings(llm_provider="azure_openai", azure_openai_endpoint=fake.endpoint)
        provider = build_llm_provider(settings, credential=credential)
        assert credential.scopes == []  # no token at construction
        provider.generate(sql_request())
        provider.generate(sql_request())
    assert credential.scopes[0] == (AZURE_OPENAI_SCOPE,)
    assert [r.headers["authorization"] for r in fake.requests] == ["Bearer entra-token-abc"] * 2
    assert fake.requests[0].path == "/openai/v1/chat/completions"


def test_azure_with_default_credential_builds_without_network() -> None:
    settings = Settings(
        llm_provider="azure_openai",
        azure_openai_endpoint="https://example-resource.openai.azure.com",
        azure_client_id="00000000-0000-0000-0000-000000000001",
    )
    provider = build_llm_provider(settings)
    assert str(provider.client.base_url) == "https://example-resource.openai.azure.com/openai/v1/"
    assert provider.client.max_retries == 0


def test_openai_compatible_base_url_uses_max_tokens_and_reports_the_served_model() -> None:
    with FakeOpenAI(response_model="llama3.2:3b") as fake:
        fake.always(JsonReply(SQL_DRAFT, usage=(500, 40)))
        settings = Settings(llm_provider="openai", openai_base_url=fake.base_url, openai_model="llama3.2")
        provider = build_llm_provider(settings)
        response = provider.generate(sql_request(max_tokens=256))
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "llama3.2" and request.body["max_tokens"] == 256
    assert request.headers["authorization"] == "Bearer not-needed"
    assert response.model_used == "llama3.2:3b"
    assert (
        estimate_cost(response.model_used, response.tokens_input, response.tokens_output, DEFAULT_MODEL_PRICES) == 0.0
    )


def test_openai_model_used_and_cost_from_a_dated_snapshot() -> None:
    # OpenAI proper, pointed at the fake through a base URL; the reply names a dated snapshot.
    with FakeOpenAI(response_model="gpt-4.1-mini-2025-04-14") as fake:
        fake.always(JsonReply(SQL_DRAFT, usage=(1_000_000, 500_000)))
        settings = Settings(llm_provider="openai", openai_base_url=fake.base_url, openai_api_key=SecretStr("sk-test"))
        response = build_llm_provider(settings).generate(sql_request(model="gpt-4.1-mini"))
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test"
    assert response.model_used == "gpt-4.1-mini-2025-04-14"
    cost = estimate_cost(response.model_used, response.tokens_input, response.tokens_output, DEFAULT_MODEL_PRICES)
    assert cost == pytest.approx(0.4 + 0.8)


def test_openai_proper_defaults() -> None:
    provider = build_llm_provider(
        Settings(llm_provider="openai", openai_api_key=SecretStr("sk-x"), openai_model="gpt-4o")
    )
    assert str(provider.client.base_url) == "https://api.openai.com/v1/"
    assert provider.default_model == "gpt-4o" and provider.token_param == "max_completion_tokens"
    assert provider.client.max_retries == 0


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        (Settings(llm_provider="azure_openai"), "AZURE_OPENAI_ENDPOINT"),
        (Settings(llm_provider="openai"), "OPENAI_API_KEY or OPENAI_BASE_URL"),
        (Settings(llm_provider="offline"), "offline"),
    ],
    ids=["azure-no-endpoint", "openai-no-key", "offline"],
)
def test_missing_configuration_is_a_config_error(
    settings: Settings, needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderError) as info:
        build_llm_provider(settings)
    assert info.value.code == ErrorCode.CONFIG_ERROR and needle in info.value.message


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://r.openai.azure.com",
        "https://r.openai.azure.com/",
        "https://r.openai.azure.com/openai",
        "https://r.openai.azure.com/openai/v1/",
    ],
)
def test_azure_endpoint_normalisation(endpoint: str) -> None:
    assert azure_v1_base_url(endpoint) == "https://r.openai.azure.com/openai/v1/"


def test_request_model_overrides_the_default() -> None:
    with FakeOpenAI() as fake:
        fake.always(JsonReply(SQL_DRAFT))
        provider = build_llm_provider(Settings(llm_provider="openai", openai_base_url=fake.base_url, openai_model="a"))
        response = provider.generate(sql_request(model="b"))
    assert fake.requests[0].body["model"] == "b" and response.model_used == "b"
