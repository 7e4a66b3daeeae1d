"""Cost estimates from the settings price table."""

from __future__ import annotations

import logging

import pytest

from shared.runtime.pricing import estimate_cost, find_price
from shared.runtime.settings import DEFAULT_MODEL_PRICES, ModelPrice, Settings


def test_exact_and_snapshot_names_use_the_table() -> None:
    prices = DEFAULT_MODEL_PRICES
    assert estimate_cost("gpt-4.1-mini", 1_000_000, 1_000_000, prices) == pytest.approx(2.0)
    assert estimate_cost("gpt-4.1-mini", 1000, 500, prices) == pytest.approx(0.0004 + 0.0008)
    # A dated snapshot is priced by its longest listed prefix, not by the shorter "gpt-4.1".
    assert find_price("gpt-4.1-mini-2025-04-14", prices) == prices["gpt-4.1-mini"]
    assert find_price("GPT-4o-mini", prices) == prices["gpt-4o-mini"]
    # "gpt-4.1x" is not a snapshot of "gpt-4.1".
    assert find_price("gpt-4.1x", prices) is None


def test_unknown_model_costs_zero_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shared.runtime.pricing"):
        assert estimate_cost("my-llama-unpriced", 10, 10, DEFAULT_MODEL_PRICES) == 0.0
        assert estimate_cost("my-llama-unpriced", 10, 10, DEFAULT_MODEL_PRICES) == 0.0
    assert [r.getMessage() for r in caplog.records].count(
        "no price for model 'my-llama-unpriced' in MODEL_PRICES; its cost is counted as 0"
    ) == 1


def test_prices_from_settings_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_PRICES", '{"chat-dep": {"input_per_million": 1.0, "output_per_million": 3.0}}')
    settings = Settings()
    assert settings.model_prices["chat-dep"] == ModelPrice(input_per_million=1.0, output_per_million=3.0)
    assert estimate_cost("chat-dep", 2000, 1000, settings.model_prices) == pytest.approx(0.005)


def test_negative_tokens_are_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        estimate_cost("gpt-4o", -1, 0, DEFAULT_MODEL_PRICES)
