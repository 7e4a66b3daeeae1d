"""Providers wrapped with simulated service latency, so both job designs wait for the same services."""

from __future__ import annotations

import os
import time
from typing import Any

from shared.providers.clients import Clients
from shared.providers.interfaces import LLMRequest, LLMResponse, QueryRows, T
from shared.runtime.settings import get_settings

DEFAULT_LATENCY_MS = {"llm": 1000, "search": 100, "sql": 50}


def latencies_from_env() -> dict[str, int]:
    """``BENCH_LATENCY_MS="llm=1000,search=100,sql=50"`` (defaults: realistic figures)."""
    values = dict(DEFAULT_LATENCY_MS)
    for item in filter(None, os.environ.get("BENCH_LATENCY_MS", "").split(",")):
        key, _, ms = item.partition("=")
        values[key.strip()] = int(ms)
    return values


class _SlowLLM:
    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s
        self.name, self.default_model = inner.name, inner.default_model

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        time.sleep(self.delay_s)
        return self.inner.generate(request)


class _SlowRetriever:
    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def search(self, query: str, *, top_k: int, filter: str | None = None) -> Any:
        time.sleep(self.delay_s)
        return self.inner.search(query, top_k=top_k, filter=filter)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _SlowDatabase:
    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s
        self.dialect = inner.dialect

    def execute(self, sql: str, *, max_rows: int, timeout_s: int, sensitive: bool = False) -> QueryRows:
        time.sleep(self.delay_s)
        return self.inner.execute(sql, max_rows=max_rows, timeout_s=timeout_s, sensitive=sensitive)


def latency_clients(latency_ms: dict[str, int] | None = None) -> Clients:
    """Embedded-default clients whose LLM, search and SQL calls take the given extra time."""
    ms = latency_ms or latencies_from_env()
    base = Clients(get_settings())
    # The offline planner probes the index; that probe is planning work, so it uses the raw retriever.
    return Clients(
        base.settings,
        llm=_SlowLLM(base.llm, ms["llm"] / 1000),
        retriever=_SlowRetriever(base.retriever, ms["search"] / 1000),
        database=_SlowDatabase(base.database, ms["sql"] / 1000),
    )
