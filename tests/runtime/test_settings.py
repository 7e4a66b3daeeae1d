"""Settings: embedded defaults with no environment, the price table merge, and errors that name the variable."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.runtime.settings import (
    DEFAULT_MODEL_PRICES,
    LOCAL_HOST_FLAG,
    PRICES_SHAPE,
    ConfigError,
    Settings,
    check_settings_at_startup,
    get_settings,
    reset_settings,
)


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


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A patched environment whose settings are rebuilt, then forgotten again."""
    reset_settings()
    yield monkeypatch
    monkeypatch.undo()
    reset_settings()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SQL_MAX_ROWS", "abc", "Input should be a valid integer"),
        ("SQL_MAX_ROWS", "0", "greater than or equal to 1"),
        ("LLM_PROVIDER", "llama", "'offline', 'azure_openai' or 'openai'"),
        ("MODEL_PRICES", "[1, 2]", PRICES_SHAPE),
        ("MODEL_PRICES", '{"m": 1}', PRICES_SHAPE + " (at m)"),
        ("MODEL_PRICES", '{"m": {"input_per_million": -1}}', "(at m.input_per_million)"),
        ("MODEL_PRICES", "{not json", PRICES_SHAPE),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_variable(
    fresh: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    fresh.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        get_settings()
    err = caught.value
    assert err.setting == name and len(err.problems) == 1
    assert str(err).startswith(f"invalid setting {name}: ") and says in str(err)
    assert "ModelPrice" not in str(err)


def test_every_bad_variable_is_named_once(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("SQL_MAX_ROWS", "abc")
    fresh.setenv("SEARCH_TOP_K", "999")
    fresh.setenv("MODEL_PRICES", '{"a": 1, "b": 2}')
    with pytest.raises(ConfigError) as caught:
        get_settings()
    assert sorted(name for name, _ in caught.value.problems) == ["MODEL_PRICES", "SEARCH_TOP_K", "SQL_MAX_ROWS"]


def test_the_public_message_leaves_values_out_and_secrets_are_never_shown(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("SQL_MAX_ROWS", "abc")
    with pytest.raises(ConfigError) as caught:
        get_settings()
    assert "'abc'" in str(caught.value) and "abc" not in caught.value.public_message
    assert "SQL_MAX_ROWS" in caught.value.public_message


def test_settings_are_built_again_once_fixed(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("LLM_PROVIDER", "llama")
    with pytest.raises(ConfigError):
        get_settings()
    fresh.setenv("LLM_PROVIDER", "offline")
    assert get_settings().llm_provider == "offline"


def test_startup_check_only_on_a_developer_host(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("LLM_PROVIDER", "llama")
    fresh.delenv(LOCAL_HOST_FLAG, raising=False)
    check_settings_at_startup()  # Azure: never raises at import
    fresh.setenv(LOCAL_HOST_FLAG, "false")
    check_settings_at_startup()
    fresh.setenv(LOCAL_HOST_FLAG, "true")
    with pytest.raises(ConfigError, match="LLM_PROVIDER"):
        check_settings_at_startup()
