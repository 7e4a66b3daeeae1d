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
the Flex meters and costs nothing of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from shared.jobs.durable_json import decode
from shared.runtime.history_counts import Call, count, event_type_name, seconds_between
from shared.runtime.price_tables import (
    GB,
    STORAGE_PER_EPISODE,
    STORAGE_PER_JOB,
    STORAGE_PER_MESSAGE,
    CostConfig,
    PriceTable,
    config_from_settings,
    price_table_of,
    quoted_version,
)
from shared.runtime.pricing import find_price, tool_price
from shared.runtime.streaming.base import DONE_TTL_S

ORCHESTRATION = "(orchestration)"


# Activity names whose results say what an executor used.
_SQL, _RAG, _PYTHON, _TOOL = "execute_azure_sql", "consult_rag", "run_python", "call_tool"


# Stored bytes (docs/costs.md): a month is 30 days; a GB is 2**30 bytes; an artifact is charged one month of
# keeping (nothing deletes it sooner); streamed text lives in the side store until DONE_TTL_S after its step.
MONTH_S = 30 * 86_400


ARTIFACT_MONTHS = 1.0


STREAM_MONTHS = DONE_TTL_S / MONTH_S


STORED = "storage.stored_bytes"


# Activities whose text streams to the side store, and the result field that text ends in (the executor
# registry's ``streams``; tests/runtime/test_ledger_totals.py checks the two agree).
STREAMED_TEXT = {"generate_response": "answer"}


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
        if event_type_name(event) == "ExecutionStarted":
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
