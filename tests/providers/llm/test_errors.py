"""HTTP and transport failures map to contract error codes; the SDK never retries on its own."""

from __future__ import annotations

import socket
from typing import Literal

import pytest
from azure.core.exceptions import ClientAuthenticationError

from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode, ProviderError
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.runtime.settings import Settings
from tests.fakes.credentials import StaticTokenCredential as FakeCredential
from tests.fakes.openai_server import (
    ErrorReply,
    FakeOpenAI,
    JsonReply,
    RefusalReply,
    SlowReply,
    auth_error,
    bad_request,
    content_filter_error,
    rate_limited,
    server_error,
)
from tests.providers.llm.helpers import ANSWER, SQL_DRAFT, answer_request, sql_request

APIS = ["chat", "responses"]


def _provider(base_url: str, api: str = "chat") -> OpenAIChatProvider:
    return build_llm_provider(Settings(llm_provider="openai", openai_base_url=base_url, llm_api=api))  # type: ignore[arg-type]


CASES: list[tuple[str, ErrorReply, ErrorCode, int | None]] = [
    ("429-retry-after-ms", rate_limited(retry_after_ms=1500, retry_after_s=2), ErrorCode.RATE_LIMITED, 1500),
    ("429-retry-after", rate_limited(retry_after_s=3), ErrorCode.RATE_LIMITED, 3000),
    ("429-no-header", rate_limited(), ErrorCode.RATE_LIMITED, None),
    ("500", server_error(500), ErrorCode.UPSTREAM_ERROR, None),
    ("503", server_error(503), ErrorCode.UPSTREAM_ERROR, None),
    ("content-filter", content_filter_error(), ErrorCode.CONTENT_FILTERED, None),
    ("401", auth_error(401), ErrorCode.AUTH_FAILED, None),
    ("403", auth_error(403), ErrorCode.AUTH_FAILED, None),
    ("400", bad_request("Invalid value for 'messages'.", param="messages"), ErrorCode.BAD_REQUEST, None),
    (
        "404",
        ErrorReply(404, {"error": {"code": "DeploymentNotFound", "message": "no such deployment"}}),
        ErrorCode.BAD_REQUEST,
        None,
    ),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("reply", "code", "retry_after_ms"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_http_errors_map_to_contract_codes(
    fake_openai: FakeOpenAI, api: str, reply: ErrorReply, code: ErrorCode, retry_after_ms: int | None
) -> None:
    fake_openai.always(reply)
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api).generate(sql_request())
    assert info.value.code == code
    assert info.value.retry_after_ms == retry_after_ms
    assert (code in RETRYABLE_CODES) == (code in {ErrorCode.RATE_LIMITED, ErrorCode.UPSTREAM_ERROR})
    assert str(reply.status) in info.value.message
    assert len(fake_openai.requests) == 1  # max_retries=0: the orchestrator owns retries


def test_429_then_success_is_left_to_the_caller(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(rate_limited(retry_after_ms=10), task="write_sql")
    fake_openai.always(JsonReply(SQL_DRAFT), task="write_sql")
    provider = _provider(fake_openai.base_url)
    with pytest.raises(ProviderError) as info:
        provider.generate(sql_request())
    assert info.value.code == ErrorCode.RATE_LIMITED and info.value.retry_after_ms == 10
    assert provider.generate(sql_request()).output.sql == SQL_DRAFT["sql"]
    assert len(fake_openai.requests) == 2


@pytest.mark.parametrize("api", APIS)
def test_a_slow_reply_is_a_model_timeout(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.always(SlowReply(1.5, JsonReply(SQL_DRAFT)))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api).generate(sql_request(timeout_s=0.3))
    assert info.value.code == ErrorCode.MODEL_TIMEOUT and "0.3s" in info.value.message
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_content_filter_finish_reason(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.always(JsonReply(ANSWER, finish_reason="content_filter", check_schema=False))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api).generate(answer_request())
    assert info.value.code == ErrorCode.CONTENT_FILTERED


def test_refused_connection_is_an_upstream_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(ProviderError) as info:
        _provider(f"http://127.0.0.1:{port}/v1").generate(sql_request(timeout_s=2))
    assert info.value.code == ErrorCode.UPSTREAM_ERROR


@pytest.mark.parametrize("api", APIS)
def test_a_credential_that_cannot_get_a_token_is_auth_failed(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    credential = FakeCredential(error=ClientAuthenticationError("ManagedIdentityCredential: no identity assigned"))
    settings = Settings(llm_provider="azure_openai", azure_openai_endpoint=fake_openai.endpoint, llm_api=api)
    with pytest.raises(ProviderError) as info:
        build_llm_provider(settings, credential=credential).generate(sql_request())
    assert info.value.code == ErrorCode.AUTH_FAILED and "no identity assigned" in info.value.message
    assert fake_openai.requests == []


def test_a_wrong_token_is_auth_failed() -> None:
    with FakeOpenAI(api_key="the-right-token") as fake:
        settings = Settings(llm_provider="azure_openai", azure_openai_endpoint=fake.endpoint)
        with pytest.raises(ProviderError) as info:
            build_llm_provider(settings, credential=FakeCredential("a-wrong-token")).generate(sql_request())
    assert info.value.code == ErrorCode.AUTH_FAILED


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_a_refusal_is_content_filtered(fake_openai: FakeOpenAI, api: str, stream: bool) -> None:
    fake_openai.always(RefusalReply("I can't help with that request."))
    request = answer_request(on_delta=(lambda _: None) if stream else None)
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api).generate(request)
    assert info.value.code == ErrorCode.CONTENT_FILTERED and "can't help" in info.value.message
