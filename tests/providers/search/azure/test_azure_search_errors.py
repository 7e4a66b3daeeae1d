"""Fault classification: scripted service faults reach the real SDK and come back as contract codes."""

from __future__ import annotations

import email.utils
import time

import pytest
from azure.identity import CredentialUnavailableError
from pydantic import SecretStr

from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode, ProviderError
from shared.providers.search.azure import build_azure_retriever
from shared.providers.search.azure_errors import classify_search_error
from shared.providers.search.azure_index import build_azure_sink
from tests.fakes.search_server import FakeSearchServer, Fault
from tests.providers.search.azure.conftest import CORPUS, azure_settings, toy_embed


@pytest.fixture
def ready(search_server: FakeSearchServer) -> FakeSearchServer:
    sink = build_azure_sink(azure_settings(search_server), toy_embed)
    sink.create_or_update_index()
    sink.upload(CORPUS)
    return search_server


def _fail(server: FakeSearchServer, fault: Fault, **retriever_kwargs: object) -> ProviderError:
    server.add_fault(fault)
    retriever = build_azure_retriever(azure_settings(server), toy_embed, **retriever_kwargs)  # type: ignore[arg-type]
    before = len(server.searches())
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=2)
    # The SDK's own retries are off: exactly one request per call, the orchestrator decides.
    assert len(server.searches()) == before + 1
    return info.value


@pytest.mark.parametrize(
    ("fault", "code", "retry_after_ms"),
    [
        (Fault(status=429, route="search", retry_after="3"), ErrorCode.RATE_LIMITED, 3000),
        (Fault(status=429, route="search", retry_after_ms=1500), ErrorCode.RATE_LIMITED, 1500),
        (Fault(status=503, route="search", retry_after="2"), ErrorCode.TRANSIENT, 2000),
        (Fault(status=500, route="search"), ErrorCode.UPSTREAM_ERROR, None),
        (Fault(status=502, route="search"), ErrorCode.UPSTREAM_ERROR, None),
        (Fault(status=403, route="search"), ErrorCode.AUTH_FAILED, None),
        (Fault(status=401, route="search"), ErrorCode.AUTH_FAILED, None),
        (Fault(status=400, route="search"), ErrorCode.SEARCH_ERROR, None),
    ],
)
def test_scripted_faults_map_to_contract_codes(
    ready: FakeSearchServer, fault: Fault, code: ErrorCode, retry_after_ms: int | None
) -> None:
    error = _fail(ready, fault)
    assert error.code is code
    assert error.retry_after_ms == retry_after_ms


def test_retryable_codes_are_exactly_the_transient_ones(ready: FakeSearchServer) -> None:
    assert _fail(ready, Fault(status=429, route="search")).code in RETRYABLE_CODES
    assert _fail(ready, Fault(status=400, route="search")).code not in RETRYABLE_CODES
    assert _fail(ready, Fault(status=403, route="search")).code not in RETRYABLE_CODES


def test_rate_limit_then_success(ready: FakeSearchServer) -> None:
    ready.add_fault(Fault(status=429, route="search", retry_after="1"))
    retriever = build_azure_retriever(azure_settings(ready), toy_embed)
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=2)
    assert info.value.code is ErrorCode.RATE_LIMITED
    assert retriever.search("refunds", top_k=2)[0].source_id.startswith("refund-policy")


def test_read_timeout_is_transient(ready: FakeSearchServer) -> None:
    error = _fail(ready, Fault(status=0, route="search", delay_s=1.5), timeout_s=0.3)
    assert error.code is ErrorCode.TRANSIENT


def test_wrong_api_key_is_auth_failed(ready: FakeSearchServer) -> None:
    retriever = build_azure_retriever(azure_settings(ready, azure_search_api_key="not-the-key"))
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=2)
    assert info.value.code is ErrorCode.AUTH_FAILED
    assert ready.searches()[-1].status == 403


def test_invalid_filter_from_the_service_is_search_error(ready: FakeSearchServer) -> None:
    retriever = build_azure_retriever(azure_settings(ready))
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=2, filter="content eq 'x'")  # content is not filterable
    assert info.value.code is ErrorCode.SEARCH_ERROR
    assert "filterable" in info.value.message


def test_missing_index_is_a_config_error(search_server: FakeSearchServer) -> None:
    retriever = build_azure_retriever(azure_settings(search_server, azure_search_index="nope"))
    with pytest.raises(ProviderError) as info:
        retriever.search("refunds", top_k=2)
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert "--target azure" in info.value.message


def test_unreachable_endpoint_is_transient() -> None:
    server = FakeSearchServer().start()
    endpoint = server.endpoint
    server.stop()  # nothing listens on that port any more
    from shared.runtime.settings import Settings

    settings = Settings(search_provider="azure", azure_search_endpoint=endpoint, azure_search_api_key=SecretStr("k"))
    with pytest.raises(ProviderError) as info:
        build_azure_retriever(settings).search("refunds", top_k=1)
    assert info.value.code is ErrorCode.TRANSIENT


def test_missing_endpoint_is_a_config_error() -> None:
    from shared.runtime.settings import Settings

    with pytest.raises(ProviderError) as info:
        build_azure_retriever(Settings(search_provider="azure", azure_search_endpoint=None))
    assert info.value.code is ErrorCode.CONFIG_ERROR


def test_credential_failure_is_auth_failed() -> None:
    error = classify_search_error(CredentialUnavailableError("no managed identity endpoint"))
    assert error.code is ErrorCode.AUTH_FAILED


def test_retry_after_as_http_date(ready: FakeSearchServer) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    error = _fail(ready, Fault(status=429, route="search", retry_after=when))
    assert error.retry_after_ms is not None and 20_000 <= error.retry_after_ms <= 31_000


def test_upload_faults_are_classified(ready: FakeSearchServer) -> None:
    ready.add_fault(Fault(status=503, route="upload", retry_after="4"))
    sink = build_azure_sink(azure_settings(ready), toy_embed)
    sink.create_or_update_index()
    with pytest.raises(ProviderError) as info:
        sink.upload(CORPUS)
    assert info.value.code is ErrorCode.TRANSIENT
    assert info.value.retry_after_ms == 4000
