"""Barriers of ``POST /api/llm/test``, each on its own: the body cannot name where the call goes (no URL, key
or header field), only the configured provider is called, and a model name is data sent to that provider,
never an address (no SSRF through the connection test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.runtime.settings import reset_settings
from tests.api.test_definitions import call, error
from tests.fakes.openai_server import FakeOpenAI, TextReply


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("LLM_PROVIDER", "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "WEBSITE_AUTH_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    yield monkeypatch
    reset_settings()


@pytest.mark.parametrize("field", ["base_url", "endpoint", "url", "api_key", "headers", "azure_endpoint"])
def test_the_body_cannot_say_where_the_call_goes(offline: pytest.MonkeyPatch, field: str) -> None:
    body = {"provider": "offline", field: "http://169.254.169.254/metadata"}
    assert error(*call("POST", "llm/test", body)) == (400, "INVALID_REQUEST", field)


def test_a_provider_the_app_does_not_configure_is_refused(offline: pytest.MonkeyPatch) -> None:
    assert error(*call("POST", "llm/test", {"provider": "azure_openai"})) == (400, "INVALID_REQUEST", "provider")


def test_a_model_name_is_sent_to_the_configured_server_never_used_as_an_address(offline: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(api_key="k1") as configured, FakeOpenAI(api_key="k1") as elsewhere:
        offline.setenv("LLM_PROVIDER", "openai")
        offline.setenv("OPENAI_BASE_URL", configured.base_url)
        offline.setenv("OPENAI_API_KEY", "k1")
        reset_settings()
        configured.always(TextReply("OK"))
        elsewhere.always(TextReply("OK"))
        hostile = f"{elsewhere.base_url}/chat/completions"
        status, result = call("POST", "llm/test", {"provider": "openai", "model": hostile})
        assert status == 200 and result["endpoint"].startswith(configured.base_url.rstrip("/"))
        assert [r.body["model"] for r in configured.requests] == [hostile]
        assert elsewhere.requests == []
