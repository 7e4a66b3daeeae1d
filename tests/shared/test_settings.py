"""Settings: embedded defaults with no environment, and the price table merge."""

from __future__ import annotations

import pytest

from shared.settings import DEFAULT_MODEL_PRICES, Settings


def test_defaults_need_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    settings = Settings()
    assert (settings.llm_provider, settings.search_provider, settings.sql_provider) == ("offline", "local", "sqlite")
    assert settings.sqlite_database_path.name == "sample.db"


def test_model_prices_from_the_environment_add_to_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_PRICES", '{"my-dep": {"input_per_million": 1, "output_per_million": 2}}')
    prices = Settings().model_prices
    assert prices["my-dep"].output_per_million == 2
    assert set(DEFAULT_MODEL_PRICES) <= set(prices)


def test_bad_settings_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "llama")
    with pytest.raises(ValueError, match="llm_provider"):
        Settings()
