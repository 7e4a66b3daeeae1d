"""What a job cost, all of it: every meter it touched, counted from its Durable history, priced from a table.

A pure module: ``job_ledger(history, config, table)`` reads nothing but its arguments. The history is either
the recorded DTFx form (integer ``EventType``, ``TaskScheduled`` events) or the status API's form (names,
completions carrying ``FunctionName``, ``ScheduledTime``, ``Input`` and ``Result``); both give the same meters
(``tests/runtime/test_ledger.py``). The counting model, with its sources, is in docs/costs.md:

- Durable Task Scheduler actions (learn.microsoft.com, "Durable Task Scheduler billing", "What is an
  action?"): starting the orchestration 1; each activity attempt 2 (schedule + processing its result); each
  sub-orchestration 2 in the parent; each timer that fires 1; each external event 1; each entity operation
  sent 1 (its reply arrives as an event, 1); suspend, resume and terminate 1 each.
- Azure Storage transactions (an estimate of this app's model; the provider's own docs give no formula):
  every message above is one queue put, get and delete (3); every orchestrator episode reads the history
  and writes the history batch and the instance row (3); the client writes the instance row once. Idle
  queue polling, partition lease renewals and the scale controller's polling are not per job and are left out.
- Flex Consumption: GB-seconds = each activity attempt's time (scheduled → result, an upper bound: it
  includes queue time, and concurrent executions on one instance are billed once) × the instance memory;
  executions = activity attempts + orchestrator episodes.
- The executors' own usage from their results: tokens per model (priced by MODEL_PRICES), search queries,
  SQL statements, rows read and time, sandbox seconds, family tool calls (priced by TOOL_PRICES).

A meter with no known price is kept with its quantity in ``unknown`` and never counted as 0; a meter that
runs inside the function (the local index, SQLite, the local sandbox, function tools) is ``included`` in
the Flex meters and costs nothing of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from azure.durable_functions.models.history import HistoryEventType
from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.costs import CallPrices
from shared.jobs.durable_json import decode
from shared.jobs.quote import QuotePrices, TokenPrice
from shared.runtime.pricing import find_price, tool_price
from shared.runtime.settings import ModelPrice
from shared.runtime.streaming.base import DONE_TTL_S

PRICES_DIR = Path(__file__).resolve().parent / "prices"
Backend = Literal["azure_storage", "dts_consumption", "dts_dedicated"]
Hosting = Literal["flex_on_demand", "flex_always_ready"]
ORCHESTRATION = "(orchestration)"
# Activity names whose results say what an executor used.
_SQL, _RAG, _PYTHON, _TOOL = "execute_azure_sql", "consult_rag", "run_python", "call_tool"
# Storage transactions per message (put, get, delete) and per orchestrator episode (history read, history
# write, instance row); one more for the instance row the client writes at the start.
STORAGE_PER_MESSAGE = 3
STORAGE_PER_EPISODE = 3
STORAGE_PER_JOB = 1

# Stored bytes (docs/costs.md): a month is 30 days; a GB is 2**30 bytes; an artifact is charged one month of
# keeping (nothing deletes it sooner); streamed text lives in the side store until DONE_TTL_S after its step.
MONTH_S = 30 * 86_400
GB = 2**30
ARTIFACT_MONTHS = 1.0
STREAM_MONTHS = DONE_TTL_S / MONTH_S
STORED = "storage.stored_bytes"
# Activities whose text streams to the side store, and the result field that text ends in (the executor
# registry's ``streams``; tests/runtime/test_ledger_totals.py checks the two agree).
STREAMED_TEXT = {"generate_response": "answer"}

# DTFx event types by number, as the status API names them ("TaskScheduled"), from the SDK's own enum.
_TYPE_NAMES = {t.value: "".join(w.capitalize() for w in t.name.split("_")) for t in HistoryEventType}


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


@dataclass
class Call:
    """One activity attempt as the history shows it."""

    name: str
    step: str
    scheduled: str | None
    ended: str | None
    task: dict[str, Any]
    result: dict[str, Any]


@dataclass
class Counts:
    """What the history holds, counted once for every backend."""

    started: int = 0
    activities: int = 0
    activities_pending: int = 0
    sub_orchestrations: int = 0
    sub_orchestrations_pending: int = 0
    timers_fired: int = 0
    events_raised: int = 0
    events_sent: int = 0
    lifecycle: int = 0  # suspend, resume, terminate
    episodes: int = 0
    episodes_exact: bool = True
    calls: list[Call] = field(default_factory=list)

    @property
    def actions(self) -> int:
        """Durable Task Scheduler actions (the model in the module docstring)."""
        scheduled_only = self.activities_pending + self.sub_orchestrations_pending
        return (
            self.started
            + 2 * (self.activities + self.sub_orchestrations)
            + scheduled_only
            + self.timers_fired
            + self.events_raised
            + self.events_sent
            + self.lifecycle
        )


def _type(event: Mapping[str, Any]) -> str:
    kind = event.get("EventType")
    return _TYPE_NAMES.get(kind, str(kind)) if isinstance(kind, int) else str(kind)


def _step_of(task_id: Any, name: str) -> str:
    parts = str(task_id or "").rsplit(":", 2)
    return parts[1] if len(parts) == 3 and parts[1] else name


def _call(name: str, scheduled: str | None, ended: str | None, inp: Any, result: Any) -> Call:
    given = decode(inp)
    body = decode(result)
    given = given if isinstance(given, dict) else {}
    return Call(
        name=name,
        step=_step_of(given.get("task_id"), name),
        scheduled=scheduled,
        ended=ended,
        task=given,
        result=body if isinstance(body, dict) else {},
    )


def count(history: list[dict[str, Any]]) -> Counts:
    """Count what happened from a history in either form (recorded DTFx events or the status API's rows)."""
    counts = Counts()
    scheduled: dict[int, Mapping[str, Any]] = {}
    subs: set[int] = set()
    raw = any(_type(e) in ("TaskScheduled", "OrchestratorStarted", "SubOrchestrationInstanceCreated") for e in history)
    wakeups = 0
    for event in history:
        kind = _type(event)
        if kind == "ExecutionStarted":
            counts.started += 1
            wakeups += 1
        elif kind == "OrchestratorStarted":
            counts.episodes += 1
        elif kind == "TaskScheduled":
            scheduled[int(event.get("EventId", -1))] = event
        elif kind == "SubOrchestrationInstanceCreated":
            subs.add(int(event.get("EventId", -1)))
        elif kind in ("TaskCompleted", "TaskFailed"):
            wakeups += 1
            counts.activities += 1
            source = scheduled.pop(int(event.get("TaskScheduledId", -2)), None) if raw else None
            if source is not None:
                name, when, inp = str(source.get("Name")), source.get("Timestamp"), source.get("Input")
            else:
                name, when, inp = str(event.get("FunctionName")), event.get("ScheduledTime"), event.get("Input")
            counts.calls.append(_call(name, when, event.get("Timestamp"), inp, event.get("Result")))
        elif kind in ("SubOrchestrationInstanceCompleted", "SubOrchestrationInstanceFailed"):
            wakeups += 1
            counts.sub_orchestrations += 1
            subs.discard(int(event.get("TaskScheduledId", -2)))
        elif kind == "TimerFired":
            wakeups += 1
            counts.timers_fired += 1
        elif kind == "EventRaised":
            wakeups += 1
            counts.events_raised += 1
        elif kind == "EventSent":
            counts.events_sent += 1
        elif kind in ("ExecutionSuspended", "ExecutionResumed", "ExecutionTerminated"):
            wakeups += 1
            counts.lifecycle += 1
    counts.activities_pending = len(scheduled)
    counts.sub_orchestrations_pending = len(subs)
    if not raw:
        # The status API leaves out episodes: at most one per message that wakes the orchestration.
        counts.episodes, counts.episodes_exact = wakeups, False
    return counts


def seconds_between(start: str | None, end: str | None) -> float:
    """Seconds from one ISO time to another (0 when either is missing or unreadable)."""
    if not start or not end:
        return 0.0
    try:
        delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(
            start.replace("Z", "+00:00")
        )
    except ValueError:
        return 0.0
    return max(0.0, delta.total_seconds())


class Meter(BaseModel):
    """One meter of a job: its quantity, its unit price (None: unknown) and what it cost."""

    meter: str
    unit: str
    quantity: float
    price_key: str | None = None
    unit_price: float | None = None
    cost: float | None = None
    included_in: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def unknown(self) -> bool:
        """A quantity with no known price."""
        return self.cost is None and self.included_in is None and self.quantity > 0


class StepCost(BaseModel):
    """What one step (or the orchestration itself) cost, and which of its meters have no price."""

    step_id: str
    cost: float
    meters: dict[str, float] = Field(default_factory=dict)
    unknown: list[str] = Field(default_factory=list)


class Ledger(BaseModel):
    """The job's cost: the view's ``cost``."""

    total: float
    currency: str
    complete: bool
    backend: str
    hosting: str
    by_meter: list[Meter]
    by_step: list[StepCost]
    unknown: list[dict[str, Any]]
    price_table: dict[str, str]


class _Book:
    """Quantities by meter and by step, before pricing."""

    def __init__(self) -> None:
        self.units: dict[str, str] = {}
        self.keys: dict[str, str | None] = {}
        self.included: dict[str, str | None] = {}
        self.totals: dict[str, float] = {}
        self.steps: dict[str, dict[str, float]] = {}
        self.detail: dict[str, dict[str, float]] = {}
        # Costs already known per meter and step (tokens and tools are priced by their own settings).
        self.known: dict[str, dict[str, float | None]] = {}
        # Price units per quantity unit, for meters priced in another unit (stored byte-months per GB-month).
        self.scale: dict[str, float] = {}

    def add(
        self,
        meter: str,
        step: str,
        quantity: float,
        *,
        unit: str,
        key: str | None = None,
        included: str | None = None,
        cost: float | None = None,
        priced_by_setting: bool = False,
        scale: float = 1.0,
    ) -> None:
        self.units[meter], self.keys[meter], self.included[meter] = unit, key, included
        self.scale[meter] = scale
        self.totals[meter] = self.totals.get(meter, 0.0) + quantity
        by_step = self.steps.setdefault(step, {})
        by_step[meter] = by_step.get(meter, 0.0) + quantity
        if priced_by_setting:
            known = self.known.setdefault(meter, {})
            before = known.get(step, 0.0)
            known[step] = None if cost is None or before is None else before + cost

    def add_detail(self, meter: str, name: str, value: float) -> None:
        detail = self.detail.setdefault(meter, {})
        detail[name] = detail.get(name, 0.0) + value


def _tokens(book: _Book, call: Call, config: CostConfig) -> None:
    usage = call.result.get("usage")
    model = call.result.get("model_used")
    if not isinstance(usage, dict) or not model:
        return
    tokens_in, tokens_out = int(usage.get("tokens_input") or 0), int(usage.get("tokens_output") or 0)
    if tokens_in + tokens_out == 0:
        return
    price = find_price(str(model), config.model_prices)
    cost = None
    if price is not None:
        cost = (tokens_in * price.input_per_million + tokens_out * price.output_per_million) / 1_000_000
    meter = f"llm.tokens:{model}"
    book.add(meter, call.step, tokens_in + tokens_out, unit="token", cost=cost, priced_by_setting=True)
    book.add_detail(meter, "tokens_input", tokens_in)
    book.add_detail(meter, "tokens_output", tokens_out)


def _executor_meters(book: _Book, call: Call, config: CostConfig, seconds: float) -> None:
    """The meters an executor's result tells of (beyond tokens)."""
    body = call.result.get("result")
    body = body if isinstance(body, dict) else {}
    if call.name == _RAG:
        azure = config.search_provider == "azure"
        book.add(
            "search.queries",
            call.step,
            1,
            unit="query",
            key="search.azure.queries" if azure else None,
            included=None if azure else "flex.gb_seconds",
        )
    elif call.name == _SQL and body.get("executed", "rows" in body):
        local = config.sql_provider == "sqlite"
        key = "sql.azure.seconds" if config.sql_provider == "azure_sql" else None
        included = "flex.gb_seconds" if local else None
        book.add("sql.statements", call.step, 1, unit="statement", included="sql.seconds")
        book.add("sql.seconds", call.step, seconds, unit="s", key=key, included=included)
        book.add_detail("sql.statements", "rows_read", float(body.get("row_count") or len(body.get("rows") or [])))
    elif call.name == _PYTHON and isinstance(body.get("sandbox"), dict):
        sandbox = body["sandbox"]
        ran = float(sandbox.get("wall_ms") or 0) / 1000
        if sandbox.get("provider") == "azure_sessions":
            per_hour = config.sandbox_price_per_hour
            cost = ran * per_hour / 3600 if per_hour > 0 else None
            book.add(
                "sandbox.azure_sessions.seconds",
                call.step,
                ran,
                unit="s",
                key="sandbox.azure_sessions.seconds",
                cost=cost,
                priced_by_setting=per_hour > 0,
            )
        else:
            book.add("sandbox.local.seconds", call.step, ran, unit="s", included="flex.gb_seconds")
    elif call.name == _TOOL:
        given = call.task.get("task")
        tool = str((given if isinstance(given, dict) else {}).get("tool") or "tool")
        family = tool.split(".", 1)[0]
        if family in ("function", "python"):
            book.add(f"tools.calls:{family}", call.step, 1, unit="call", included="flex.gb_seconds")
        else:
            price = tool_price(tool, config.tool_prices)
            book.add(
                f"tools.calls:{tool}",
                call.step,
                1,
                unit="call",
                cost=price,
                priced_by_setting=price is not None,
            )


def _stored_bytes(book: _Book, call: Call) -> None:
    """Bytes the call stored beside the job: its artifacts' sizes, and the text it streamed (UTF-8)."""
    body = call.result.get("result")
    body = body if isinstance(body, dict) else {}
    files = body.get("files") if call.name == _PYTHON else None
    artifact_bytes = sum(
        int(f.get("size") or 0) for f in (files if isinstance(files, list) else []) if isinstance(f, dict)
    )
    field_name = STREAMED_TEXT.get(call.name)
    text = body.get(field_name) if field_name else None
    streamed = len(text.encode("utf-8")) if isinstance(text, str) else 0
    if artifact_bytes + streamed == 0:
        return
    byte_months = artifact_bytes * ARTIFACT_MONTHS + streamed * STREAM_MONTHS
    book.add(STORED, call.step, byte_months, unit="byte-month", key="storage.blob.gb_month", scale=1 / GB)
    book.add_detail(STORED, "artifact_bytes", artifact_bytes)
    book.add_detail(STORED, "artifacts", len(files) if isinstance(files, list) else 0)
    book.add_detail(STORED, "streamed_text_bytes", streamed)


def job_ledger(
    history: list[dict[str, Any]],
    config: CostConfig,
    table: PriceTable,
    parts: Mapping[str, list[dict[str, Any]]] | None = None,
) -> Ledger:
    """Every meter of one job, priced for ``config``'s backend and hosting plan from ``table``.

    ``parts``: the histories of a workflow run's parts (branches, sub-workflows) by instance id; their steps
    show as ``<part>/<step>`` (the part's id after the job's), its own orchestration as ``<part>/(orchestration)``.
    """
    book = _Book()
    _account(book, history, config, "")
    root = _root_of(history)
    for instance, part in sorted((parts or {}).items()):
        suffix = instance[len(root) + 1 :] if root and instance.startswith(root + ":") else instance
        _account(book, part, config, f"{suffix}/")
    return _price(book, config, table)


def _root_of(history: list[dict[str, Any]]) -> str:
    """The job's id, from its start event's input (a part's id begins with it)."""
    for event in history:
        if _type(event) == "ExecutionStarted":
            given = decode(event.get("Input"))
            return str(given.get("job_id") or "") if isinstance(given, dict) else ""
    return ""


def _account(book: _Book, history: list[dict[str, Any]], config: CostConfig, prefix: str) -> None:
    """Count one orchestration's history into the book, its steps named with ``prefix``."""
    counts = count(history)
    gb = config.memory_mb / 1024
    mode = "on_demand" if config.hosting == "flex_on_demand" else "always_ready"
    for call in counts.calls:
        call.step = prefix + call.step
        seconds = seconds_between(call.scheduled, call.ended)
        book.add("flex.gb_seconds", call.step, seconds * gb, unit="GB-s", key=f"flex.{mode}.gb_seconds")
        book.add("flex.executions", call.step, 1, unit="execution", key=f"flex.{mode}.executions")
        _durable(book, call.step, config, actions=2, messages=2, episodes=0)
        _tokens(book, call, config)
        _executor_meters(book, call, config, seconds)
        _stored_bytes(book, call)
    others = counts.actions - 2 * len(counts.calls)
    where = prefix + ORCHESTRATION
    book.add("flex.executions", where, counts.episodes, unit="execution", key=f"flex.{mode}.executions")
    _durable(book, where, config, actions=others, messages=others, episodes=counts.episodes)
    if config.backend == "azure_storage":
        book.add("storage.transactions", where, STORAGE_PER_JOB, unit="transaction", key="storage.transactions")
    if not counts.episodes_exact:
        book.add_detail("flex.executions", "orchestrator_episodes_at_most", counts.episodes)


def part_instances(history: list[dict[str, Any]]) -> list[str]:
    """The instance ids of the sub-orchestrations (a run's parts) whose results are in this history."""
    found: list[str] = []
    for event in history:
        kind = _type(event)
        if kind not in (
            "SubOrchestrationInstanceCreated",
            "SubOrchestrationInstanceCompleted",
            "SubOrchestrationInstanceFailed",
        ):
            continue
        given = decode(event.get("Input"))
        instance = event.get("InstanceId") or (given.get("job_id") if isinstance(given, dict) else None)
        if isinstance(instance, str) and instance and instance not in found:
            found.append(instance)
    return found


def _durable(book: _Book, step: str, config: CostConfig, *, actions: int, messages: int, episodes: int) -> None:
    """The backend's own meter: DTS actions, or Azure Storage transactions."""
    if config.backend == "azure_storage":
        transactions = STORAGE_PER_MESSAGE * messages + STORAGE_PER_EPISODE * episodes
        book.add("storage.transactions", step, transactions, unit="transaction", key="storage.transactions")
    else:
        sku = "consumption" if config.backend == "dts_consumption" else "dedicated"
        book.add("durable.actions", step, actions, unit="action", key=f"dts.{sku}.actions")


def _round(value: float) -> float:
    return round(value, 10)


def _price(book: _Book, config: CostConfig, table: PriceTable) -> Ledger:
    """Price every meter and every step; meters with no price go to ``unknown``."""
    meters: list[Meter] = []
    unit_prices: dict[str, float | None] = {}
    for name, quantity in book.totals.items():
        key, included = book.keys[name], book.included[name]
        entry = table.prices.get(key) if key else None
        unit_price = entry.price if entry is not None else None
        cost: float | None
        if included is not None:
            cost = 0.0
        elif name in book.known:
            parts = list(book.known[name].values())
            cost = None if any(p is None for p in parts) else _round(sum(p or 0.0 for p in parts))
        else:
            cost = _round(quantity * unit_price * book.scale[name]) if unit_price is not None else None
        unit_prices[name] = unit_price
        meters.append(
            Meter(
                meter=name,
                unit=book.units[name],
                quantity=round(quantity, 6),
                price_key=key,
                unit_price=unit_price,
                cost=cost,
                included_in=included,
                detail=book.detail.get(name, {}),
            )
        )
    steps: list[StepCost] = []
    for step, quantities in book.steps.items():
        cost_sum, unknown = 0.0, []
        for name, quantity in quantities.items():
            if book.included[name] is not None or quantity == 0:
                continue
            if name in book.known:
                known = book.known[name].get(step)
                if known is None:
                    unknown.append(name)
                else:
                    cost_sum += known
            elif unit_prices[name] is not None:
                cost_sum += quantity * (unit_prices[name] or 0.0) * book.scale[name]
            else:
                unknown.append(name)
        steps.append(
            StepCost(
                step_id=step,
                cost=_round(cost_sum),
                meters={k: round(v, 6) for k, v in quantities.items()},
                unknown=unknown,
            )
        )
    unknown_list = [
        {"meter": m.meter, "quantity": m.quantity, "unit": m.unit, "price_key": m.price_key, "price": "unknown"}
        for m in meters
        if m.unknown
    ]
    return Ledger(
        total=_round(sum(m.cost for m in meters if m.cost is not None)),
        currency=table.currency,
        complete=not unknown_list,
        backend=config.backend,
        hosting=config.hosting,
        by_meter=meters,
        by_step=steps,
        unknown=unknown_list,
        price_table={"version": table.version, "date": table.date},
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
        if _type(event) == "ExecutionStarted":
            given = decode(event.get("Input"))
            policy = given.get("policy") if isinstance(given, dict) else None
            prices = policy.get("call_prices") if isinstance(policy, dict) else None
            version = prices.get("table") if isinstance(prices, dict) else None
            return str(version) if version else None
    return None


def view_cost(
    history: list[dict[str, Any]],
    started: str | None,
    settings: Any | None = None,
    parts: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The job view's ``cost`` under the app's settings; a table that cannot be read gives an error, not a 5xx."""
    if settings is None:
        from shared.runtime.settings import get_settings

        settings = get_settings()
    try:
        table = price_table_of(settings, started, quoted_version(history))
    except (OSError, ValueError) as exc:
        return {"total": None, "error": f"the price table cannot be read: {str(exc)[:300]}"}
    return job_ledger(history, config_from_settings(settings), table, parts).model_dump(mode="json")


def history_rows(events: Any) -> list[dict[str, Any]]:
    """The orchestration's own history (the SDK's HistoryEvent objects, or dicts) as recorded-form dicts."""
    rows: list[dict[str, Any]] = []
    for event in events or []:
        if isinstance(event, dict):
            rows.append(event)
            continue
        stamp = getattr(event, "timestamp", None)
        row: dict[str, Any] = {
            "EventType": int(getattr(event, "event_type", -1)),
            "EventId": getattr(event, "event_id", -1),
            "Timestamp": stamp.isoformat() if isinstance(stamp, datetime) else stamp,
        }
        for name in ("Name", "Input", "Result", "TaskScheduledId"):
            value = getattr(event, name, None)
            if value is not None:
                row[name] = value
        rows.append(row)
    return rows


def started_at(history: list[dict[str, Any]]) -> str | None:
    """When the job started: its ExecutionStarted event's time."""
    for event in history:
        if _type(event) == "ExecutionStarted":
            stamp = event.get("Timestamp")
            return str(stamp) if stamp else None
    return None


GroupBy = Literal["user", "workflow", "model", "meter"]
NOT_A_MODEL = "(not a model)"


def group_costs(jobs: list[tuple[dict[str, Any], dict[str, Any]]], group_by: GroupBy) -> list[dict[str, Any]]:
    """Sum job ledgers (``(job facts, view cost)`` pairs) by user, workflow, model or meter, costliest first.

    Facts are ``{"user", "workflow"}``. By model, token meters go to their model and every other meter to
    ``(not a model)``. A group's ``unknown`` lists its meters that had a quantity but no price.
    """
    groups: dict[str, dict[str, Any]] = {}
    for facts, cost in jobs:
        for meter in cost.get("by_meter") or []:
            name = str(meter["meter"])
            if group_by == "meter":
                key = name
            elif group_by == "model":
                key = name.split(":", 1)[1] if name.startswith("llm.tokens:") else NOT_A_MODEL
            else:
                key = str(facts.get(group_by) or "")
            group = groups.setdefault(key, {"key": key, "cost": 0.0, "jobs": set(), "unknown": set(), "quantity": {}})
            group["jobs"].add(facts.get("id"))
            if meter.get("cost") is not None:
                group["cost"] += float(meter["cost"])
            elif meter.get("included_in") is None and float(meter.get("quantity") or 0) > 0:
                group["unknown"].add(name)
            if group_by == "meter":
                group["quantity"][str(meter["unit"])] = group["quantity"].get(str(meter["unit"]), 0.0) + float(
                    meter.get("quantity") or 0
                )
    shown = [
        {
            "key": g["key"],
            "cost": _round(g["cost"]),
            "jobs": len(g["jobs"]),
            "unknown": sorted(g["unknown"]),
            **({"quantity": {u: round(q, 6) for u, q in g["quantity"].items()}} if group_by == "meter" else {}),
        }
        for g in groups.values()
    ]
    return sorted(shown, key=lambda g: (-g["cost"], g["key"]))


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
