"""Fixtures: a fake Azure AI Search service on loopback and a deterministic toy embedding."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest

from shared.jobs.contracts import Chunk
from shared.runtime.settings import Settings
from tests.fakes.search_server import FakeSearchServer

API_KEY = "fake-search-key"
DIMS = 32


def toy_embed(text: str) -> list[float]:
    """Hashing-trick bag of words: texts sharing words get similar vectors."""
    vector = [0.0] * DIMS
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
    return vector


CORPUS = [
    Chunk(
        source_id="refund-policy#1",
        title="Refund policy",
        content="Refunds are issued within 14 days of the return. Store credit is offered for opened items.",
        path="docs/refund-policy.md",
    ),
    Chunk(
        source_id="refund-policy#2",
        title="Refund policy",
        content="Damaged goods are refunded in full. Shipping costs are not refunded.",
        path="docs/refund-policy.md",
    ),
    Chunk(
        source_id="shipping#1",
        title="Shipping times",
        content="Standard shipping takes three to five business days. Express shipping arrives next day.",
        path="docs/shipping.md",
    ),
    Chunk(
        source_id="warranty#1",
        title="Warranty",
        content="Every appliance has a two year warranty covering manufacturing defects.",
        path="docs/warranty.md",
    ),
]


@pytest.fixture
def search_server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer(api_key=API_KEY, vectorizer=toy_embed) as server:
        yield server


def azure_settings(server: FakeSearchServer, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "search_provider": "azure",
        "azure_search_endpoint": server.endpoint,
        "azure_search_api_key": API_KEY,
        "azure_search_index": "docs-test",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]
