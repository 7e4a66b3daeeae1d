"""The versioned price tables (``prices/<version>.json``) a job's ledger and quote use, and what the settings add.

Each entry has its source and date; a price the table does not know is ``None`` ("price unknown"), never 0. See
``shared.runtime.ledger`` and docs/costs.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.costs import CallPrices
from shared.jobs.durable_json import decode
from shared.jobs.quote import QuotePrices, TokenPrice
from shared.runtime.history_counts import event_type_name
from shared.runtime.pricing import find_price
from shared.runtime.settings import ModelPrice

PRICES_DIR = Path(__file__).resolve().parent / "prices"


Backend = Literal["azure_storage", "dts_consumption", "dts_dedicated"]


Hosting = Literal["flex_on_demand", "flex_always_ready"]


# Storage transactions per message (put, get, delete) and per orchestrator episode (history read, history
# write, instance row); one more for the instance row the client writes at the start.
STORAGE_PER_MESSAGE = 3


STORAGE_PER_EPISODE = 3


STORAGE_PER_JOB = 1


GB = 2**30


class PriceEntry(BaseModel):
    """One price: per unit, with where it comes from; ``price`` None is a price not known."""

    model_config = ConfigDict(extra="forbid")

    unit: str = Field(max_length=40)
    price: float | None = Field(default=None, ge=0)
    source: str = Field(max_length=600)
    date: str | None = Field(default=None, max_length=40)


class PriceTable(BaseModel):
    """A versioned price table (shared/runtime/prices/<version>.json)."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(max_length=40)
    date: str = Field(max_length=40)
    currency: str = Field(default="USD", max_length=8)
    note: str = Field(default="", max_length=2000)
    prices: dict[str, PriceEntry] = Field(default_factory=dict, max_length=200)

    def with_overrides(self, overrides: Mapping[str, float]) -> PriceTable:
        """This table with some prices set by the operator (COST_PRICE_OVERRIDES)."""
        if not overrides:
            return self
        prices = dict(self.prices)
        for key, price in overrides.items():
            unit = prices[key].unit if key in prices else "unit"
            prices[key] = PriceEntry(unit=unit, price=price, source="COST_PRICE_OVERRIDES (app setting)")
        return self.model_copy(update={"prices": prices})


@lru_cache(maxsize=16)
def load_price_table(path: Path) -> PriceTable:
    """Read and check one price table file."""
    return PriceTable.model_validate_json(path.read_text(encoding="utf-8"))


def table_for(started: str | None, prices_dir: Path = PRICES_DIR) -> PriceTable:
    """The table in force when a job started: the newest version not after its month (else the oldest)."""
    versions = sorted(p.stem for p in prices_dir.glob("*.json"))
    if not versions:
        raise FileNotFoundError(f"no price table in {prices_dir}")
    month = (started or "")[:7]
    chosen = [v for v in versions if v <= month] if month else versions
    return load_price_table(prices_dir / f"{chosen[-1] if chosen else versions[0]}.json")


@dataclass(frozen=True)
class CostConfig:
    """What the ledger prices for: the backend, the hosting plan and the executors' providers and prices."""

    backend: Backend = "azure_storage"
    hosting: Hosting = "flex_always_ready"
    memory_mb: int = 2048
    model_prices: Mapping[str, ModelPrice] = field(default_factory=dict)
    tool_prices: Mapping[str, float] = field(default_factory=dict)
    sandbox_price_per_hour: float = 0.0
    search_provider: str = "local"
    sql_provider: str = "sqlite"


def config_from_settings(settings: Any) -> CostConfig:
    """The cost config of the app's settings (shared/runtime/settings.py)."""
    return CostConfig(
        backend=settings.cost_durable_backend,
        hosting=settings.cost_hosting,
        memory_mb=settings.cost_instance_memory_mb,
        model_prices=settings.model_prices,
        tool_prices=settings.tool_prices,
        sandbox_price_per_hour=settings.sandbox_price_per_hour,
        search_provider=settings.search_provider,
        sql_provider=settings.sql_provider,
    )


def price_table_of(settings: Any, started: str | None, version: str | None = None) -> PriceTable:
    """The table a job is priced with; overrides on top.

    ``version``: the one the job was quoted with (its input's ``call_prices.table``), kept even when a newer
    table is added: COST_PRICE_TABLE when it is that version, else ``<version>.json`` in COST_PRICES_DIR (or
    shared/runtime/prices/). Without one, or when that version is gone: COST_PRICE_TABLE, else the version in
    force when the job started.
    """
    path = getattr(settings, "cost_price_table", None)
    folder = Path(getattr(settings, "cost_prices_dir", None) or PRICES_DIR)
    table: PriceTable | None = None
    if version:
        if path and load_price_table(Path(path)).version == version:
            table = load_price_table(Path(path))
        elif (folder / f"{version}.json").is_file():
            table = load_price_table(folder / f"{version}.json")
    if table is None:
        table = load_price_table(Path(path)) if path else table_for(started, folder)
    return table.with_overrides(settings.cost_price_overrides)


def quoted_version(history: list[dict[str, Any]]) -> str | None:
    """The price table version a job was started (and quoted) with, from its input; None for older jobs."""
    for event in history:
        if event_type_name(event) == "ExecutionStarted":
            given = decode(event.get("Input"))
            policy = given.get("policy") if isinstance(given, dict) else None
            prices = policy.get("call_prices") if isinstance(policy, dict) else None
            version = prices.get("table") if isinstance(prices, dict) else None
            return str(version) if version else None
    return None


def call_prices(settings: Any, now: str) -> CallPrices:
    """The per-call prices a job started ``now`` keeps for its ``budget.max_cost`` (priced meters only).

    Per activity call: the backend's 2 actions (DTS) or 2 messages and the episode its result wakes (Azure
    Storage), and 2 Flex executions (the activity and that episode); per second: the Flex GB-seconds.
    """
    table = price_table_of(settings, now)
    config = config_from_settings(settings)
    mode = "on_demand" if config.hosting == "flex_on_demand" else "always_ready"

    def price(key: str) -> float | None:
        entry = table.prices.get(key)
        return entry.price if entry is not None else None

    per_call: dict[str, float] = {}
    if config.backend == "azure_storage":
        transaction = price("storage.transactions")
        if transaction is not None:
            per_call["storage.transactions"] = (2 * STORAGE_PER_MESSAGE + STORAGE_PER_EPISODE) * transaction
    else:
        action = price(f"dts.{'consumption' if config.backend == 'dts_consumption' else 'dedicated'}.actions")
        if action is not None:
            per_call["durable.actions"] = 2 * action
    execution = price(f"flex.{mode}.executions")
    if execution is not None:
        per_call["flex.executions"] = 2 * execution
    gb_second = price(f"flex.{mode}.gb_seconds")
    per_second = {"flex.gb_seconds": config.memory_mb / 1024 * gb_second} if gb_second is not None else {}
    return CallPrices(table=table.version, per_call=per_call, per_second=per_second)


def quote_prices(settings: Any, now: str, models: list[str]) -> QuotePrices:
    """The prices a job started ``now`` keeps for its quote: the same table version as its ``call_prices``.

    The per-call quantities follow ``call_prices``; a meter the table has no price for is kept as a quantity
    (``unknown_per_call``), never as 0. ``models``: the job's allowed models (the default one when none).
    """
    table = price_table_of(settings, now)
    config = config_from_settings(settings)
    mode = "on_demand" if config.hosting == "flex_on_demand" else "always_ready"
    priced: dict[str, float] = {}
    unknown: dict[str, float] = {}
    per_job: dict[str, float] = {}
    unknown_per_job: dict[str, float] = {}

    def put(key: str, meter: str, quantity: float, job: float) -> None:
        entry = table.prices.get(key)
        if entry is not None and entry.price is not None:
            priced[meter] = quantity * entry.price
            if job:
                per_job[meter] = job * entry.price
        else:
            unknown[meter] = quantity
            if job:
                unknown_per_job[meter] = job

    if config.backend == "azure_storage":
        # Per call: its 2 messages and the episode its result wakes; per job: the client's row, the start
        # message and the first episode.
        per_call = 2 * STORAGE_PER_MESSAGE + STORAGE_PER_EPISODE
        first = STORAGE_PER_JOB + STORAGE_PER_MESSAGE + STORAGE_PER_EPISODE
        put("storage.transactions", "storage.transactions", per_call, first)
    else:
        sku = "consumption" if config.backend == "dts_consumption" else "dedicated"
        put(f"dts.{sku}.actions", "durable.actions", 2, 1)
    put(f"flex.{mode}.executions", "flex.executions", 2, 1)
    gb_entry = table.prices.get(f"flex.{mode}.gb_seconds")
    gb = config.memory_mb / 1024
    per_second = {"flex.gb_seconds": gb * gb_entry.price} if gb_entry and gb_entry.price is not None else {}
    unknown_per_second = {} if per_second else {"flex.gb_seconds": gb}
    sandbox: float | None = 0.0
    if settings.sandbox_provider == "azure_sessions":
        sandbox = config.sandbox_price_per_hour / 3600 if config.sandbox_price_per_hour > 0 else None
    token_prices = {}
    for model in models:
        price = find_price(model, config.model_prices)
        if price is not None:
            token_prices[model] = TokenPrice(
                input=price.input_per_million / 1_000_000, output=price.output_per_million / 1_000_000
            )
    return QuotePrices(
        version=table.version,
        currency=table.currency,
        calls=CallPrices(table=table.version, per_call=priced, per_second=per_second),
        unknown_per_call=unknown,
        unknown_per_second=unknown_per_second,
        per_job=per_job,
        unknown_per_job=unknown_per_job,
        models=token_prices,
        tools=dict(config.tool_prices),
        search_unknown=config.search_provider == "azure",
        sql_unknown=config.sql_provider == "azure_sql",
        sandbox_per_second=sandbox,
    )
