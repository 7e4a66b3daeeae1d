"""What a job may cost before it spends: a quote, a range from its work items, the bounds and the prices.

Pure: ``quote(items, bounds, prices)`` reads nothing but its arguments, so the orchestrator computes it after
planning (replay-safe) and the API before a workflow or team run starts. The prices are the ones the API
resolved at submit from the versioned price table (``QuotePrices``, shared/runtime/ledger.py), so the quote
names the table's version and the job's ledger is priced with that version too.

The range, per executor call (an activity attempt) and per job:

- ``low``: what the job spends when every item runs once as planned and every call takes no time and no token
  (the priced per-call meters only: Flex executions, DTS actions or Storage transactions when priced), plus
  what was already spent (planning). A cost below it means the job stopped early.
- ``high``: every call at its worst: every attempt on every allowed model (``attempts``), each call taking its
  whole ``timeout_ms`` (Flex GB-seconds, sandbox seconds), each model call ``input_tokens`` in and
  ``max_tokens`` out at the dearest allowed model, each loop at its ``max_iterations``, an agent at its
  ``max_turns`` and ``max_tool_calls``.
- a meter with no known price (the table's ``null``, a model or tool missing from MODEL_PRICES / TOOL_PRICES)
  is never counted as 0: it is listed in ``unknown`` with its quantity bounds.

What the range cannot bound is said in ``assumptions`` (the input tokens of a model call, a person's "retry"
after a failure, a Supervisor's replans): those can take a job above ``high``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.costs import CallPrices

# Input tokens a model call is assumed to send at most: an assumption, not a bound the executors enforce (a
# prompt of 200 long passages is larger); the largest step of the held-out questions sent 1,833 (bench quotes).
DEFAULT_INPUT_TOKENS = 8_000
MAX_QUOTE_STEPS = 24  # by_step entries kept (the quote rides in the job's custom status, 16 KB in all)


class TokenPrice(BaseModel):
    """USD per input and per output token of one model."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class QuotePrices(BaseModel):
    """The prices a quote needs, fixed at submit from one price table version (the job keeps them)."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(max_length=40)
    currency: str = Field(default="USD", max_length=8)
    calls: CallPrices
    # Per-call and per-second quantities of the infrastructure meters whose price is unknown (null in the table).
    unknown_per_call: dict[str, float] = Field(default_factory=dict, max_length=16)
    unknown_per_second: dict[str, float] = Field(default_factory=dict, max_length=16)
    # The job's own overhead (its start, its first episode): priced meters in USD, unknown ones as quantities.
    per_job: dict[str, float] = Field(default_factory=dict, max_length=16)
    unknown_per_job: dict[str, float] = Field(default_factory=dict, max_length=16)
    # Allowed models (the default model when none is named) → USD per token; a model missing here is unpriced.
    models: dict[str, TokenPrice] = Field(default_factory=dict, max_length=16)
    # Priced family tools (TOOL_PRICES) → USD per call.
    tools: dict[str, float] = Field(default_factory=dict, max_length=64)
    # Meters of executors billed by a provider whose price is unknown here (Azure AI Search, Azure SQL).
    search_unknown: bool = False
    sql_unknown: bool = False
    # USD per second of a remote sandbox (Azure sessions); None: unpriced (unknown), 0: runs in the function.
    sandbox_per_second: float | None = 0.0


class QuoteBounds(BaseModel):
    """The bounds a quote multiplies by: the job's constraints and the app's retry policy."""

    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(default_factory=list, max_length=8)
    attempts_per_model: int = Field(default=3, ge=1)
    max_tokens: int = Field(default=1024, ge=1)
    timeout_s: float = Field(default=60.0, gt=0)
    input_tokens: int = Field(default=DEFAULT_INPUT_TOKENS, ge=0)


@dataclass(frozen=True)
class Item:
    """One step or node's work: how many executor calls it makes (each at most ``attempts`` times over)."""

    step_id: str
    kind: str
    calls: tuple[int, int]  # (low, high) executor calls, attempts not counted
    model_calls: tuple[int, int] = (0, 0)  # of which call a model
    tool: str | None = None  # a family tool: its calls are priced by TOOL_PRICES
    search: bool = False  # each call is a search query
    sql: bool = False  # each call is a SQL statement
    sandbox: bool = False  # each call runs code in the sandbox
    retried: bool = True  # its calls are retried (attempts × models)
    # Its own per-call limits (a workflow's agent node runs under the agent's); None: the job's bounds.
    max_tokens: int | None = None
    timeout_s: float | None = None
    models: tuple[str, ...] = ()  # the models it may call (an agent's own); empty: the job's


class QuoteStep(BaseModel):
    """One step or node's share of the quote (its unknown meters are in the quote's ``unknown``, summed)."""

    step_id: str
    kind: str
    low: float
    high: float
    calls: tuple[int, int]


class UnknownMeter(BaseModel):
    """A meter the quote cannot price, with its quantity bounds (never counted as 0)."""

    meter: str
    unit: str
    low: float
    high: float
    price: str = "unknown"


class Quote(BaseModel):
    """The job's quote: a range in money, by step, with the meters it cannot price."""

    low: float
    high: float
    currency: str
    price_table_version: str
    by_step: list[QuoteStep]
    unknown: list[UnknownMeter]
    assumptions: list[str] = Field(default_factory=list)


_UNITS = {
    "storage.transactions": "transaction",
    "durable.actions": "action",
    "flex.executions": "execution",
    "flex.gb_seconds": "GB-s",
    "search.queries": "query",
    "sql.seconds": "s",
    "sandbox.azure_sessions.seconds": "s",
}


class _Tally:
    """Low and high money, and the unknown quantities, of one item (or of the job)."""

    def __init__(self) -> None:
        self.low = 0.0
        self.high = 0.0
        self.unknown: dict[str, list[float]] = {}

    def unpriced(self, meter: str, low: float, high: float) -> None:
        if high <= 0:
            return
        have = self.unknown.setdefault(meter, [0.0, 0.0])
        have[0] += low
        have[1] += high


def _item_tally(item: Item, bounds: QuoteBounds, prices: QuotePrices) -> _Tally:
    tally = _Tally()
    if item.max_tokens is not None or item.timeout_s is not None:
        bounds = bounds.model_copy(
            update={
                "max_tokens": item.max_tokens or bounds.max_tokens,
                "timeout_s": item.timeout_s or bounds.timeout_s,
            }
        )
    models = list(item.models) or bounds.models or list(prices.models) or ["(default model)"]
    tries = bounds.attempts_per_model * len(models) if item.retried else 1
    low_calls, high_calls = item.calls[0], item.calls[1] * tries
    high_llm = item.model_calls[1] * tries  # low: no token is certain
    per_call = sum(prices.calls.per_call.values())
    per_second = sum(prices.calls.per_second.values())
    tally.low += low_calls * per_call
    tally.high += high_calls * (per_call + per_second * bounds.timeout_s)
    for meter, quantity in prices.unknown_per_call.items():
        tally.unpriced(meter, low_calls * quantity, high_calls * quantity)
    for meter, quantity in prices.unknown_per_second.items():
        tally.unpriced(meter, 0.0, high_calls * quantity * bounds.timeout_s)
    if high_llm:
        tokens = bounds.input_tokens + bounds.max_tokens
        priced = [prices.models[m] for m in models if m in prices.models]
        if priced:
            dearest = max(p.input * bounds.input_tokens + p.output * bounds.max_tokens for p in priced)
            tally.high += high_llm * dearest
        for model in models:
            if model not in prices.models:
                tally.unpriced(f"llm.tokens:{model}", 0.0, high_llm * tokens)
    if item.tool is not None:
        family = item.tool.split(".", 1)[0]
        price = _tool_price(item.tool, prices.tools)
        if price is not None:
            tally.low += low_calls * price
            tally.high += high_calls * price
        elif family not in ("function", "python"):
            tally.unpriced(f"tools.calls:{item.tool}", low_calls, high_calls)
    if item.search and prices.search_unknown:
        tally.unpriced("search.queries", low_calls, high_calls)
    if item.sql and prices.sql_unknown:
        tally.unpriced("sql.seconds", 0.0, high_calls * bounds.timeout_s)
    if item.sandbox:
        if prices.sandbox_per_second is None:
            tally.unpriced("sandbox.azure_sessions.seconds", 0.0, high_calls * bounds.timeout_s)
        else:
            tally.high += high_calls * bounds.timeout_s * prices.sandbox_per_second
    return tally


def _tool_price(tool: str, prices: dict[str, float]) -> float | None:
    """A tool's price: its own name, else its longest ``.``-prefix (as shared/runtime/pricing.py)."""
    parts = tool.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in prices:
            return prices[name]
    return None


def quote(
    items: Iterable[Item],
    bounds: QuoteBounds,
    prices: QuotePrices,
    *,
    spent: float = 0.0,
    assumptions: Iterable[str] = (),
) -> Quote:
    """The range a job's ``items`` may cost under ``bounds`` at ``prices``; ``spent``: already spent (planning)."""
    job = _Tally()
    job.low = job.high = sum(prices.per_job.values())
    for meter, quantity in prices.unknown_per_job.items():
        job.unpriced(meter, quantity, quantity)
    steps: list[QuoteStep] = []
    tallies = [job]
    if spent or prices.per_job or prices.unknown_per_job:
        steps.append(_step("(job)", "(job)", (0, 0), job, spent))
    items = list(items)
    notes = list(assumptions)
    if any(item.model_calls[1] for item in items):
        notes.insert(0, f"each model call sends at most {bounds.input_tokens} input tokens (assumed, not enforced)")
    for item in items:
        tally = _item_tally(item, bounds, prices)
        tallies.append(tally)
        steps.append(_step(item.step_id, item.kind, item.calls, tally))
    steps = _merged(steps)
    low = sum(step.low for step in steps)
    high = sum(step.high for step in steps)
    unknown: dict[str, list[float]] = {}
    for tally in tallies:
        for meter, (lo, hi) in tally.unknown.items():
            have = unknown.setdefault(meter, [0.0, 0.0])
            have[0] += lo
            have[1] += hi
    kept = cut_steps(steps, MAX_QUOTE_STEPS)
    return Quote(
        low=_r(low),
        high=_r(high),
        currency=prices.currency,
        price_table_version=prices.version,
        by_step=kept,
        unknown=[
            UnknownMeter(meter=m, unit=_unit(m), low=round(lo, 6), high=round(hi, 6))
            for m, (lo, hi) in sorted(unknown.items())
        ],
        assumptions=notes,
    )


def cut_steps(steps: list[QuoteStep], keep: int) -> list[QuoteStep]:
    """The first ``keep`` entries, the rest summed in one ``(+n more)`` entry (the totals do not change)."""
    if len(steps) <= keep:
        return list(steps)
    rest = steps[keep:]
    more = QuoteStep(
        step_id=f"(+{len(rest)} more)",
        kind="(more)",
        low=_r(sum(s.low for s in rest)),
        high=_r(sum(s.high for s in rest)),
        calls=(sum(s.calls[0] for s in rest), sum(s.calls[1] for s in rest)),
    )
    return [*steps[:keep], more]


def _merged(steps: list[QuoteStep]) -> list[QuoteStep]:
    """One entry per step id (a step and its Supervisor call, an agent's turns and tool calls), first kind kept."""
    by_id: dict[str, QuoteStep] = {}
    for step in steps:
        have = by_id.get(step.step_id)
        if have is None:
            by_id[step.step_id] = step.model_copy()
            continue
        have.low = _r(have.low + step.low)
        have.high = _r(have.high + step.high)
        have.calls = (have.calls[0] + step.calls[0], have.calls[1] + step.calls[1])
    return list(by_id.values())


def _step(step_id: str, kind: str, calls: tuple[int, int], tally: _Tally, spent: float = 0.0) -> QuoteStep:
    return QuoteStep(
        step_id=step_id,
        kind=kind,
        low=_r(tally.low + spent),
        high=_r(tally.high + spent),
        calls=calls,
    )


def _unit(meter: str) -> str:
    if meter.startswith("llm.tokens"):
        return "token"
    if meter.startswith("tools.calls"):
        return "call"
    return _UNITS.get(meter, "unit")


def _r(value: float) -> float:
    return round(value, 10)


# --- work items of a plan, an agent job -----------------------------------------------------------------


def plan_items(
    steps: Iterable[tuple[str, str]],
    uses_llm: Callable[[str], bool],
    *,
    sql_kinds: Iterable[str] = (),
    code_kinds: Iterable[str] = (),
    no_call_kinds: Iterable[str] = (),
    agent_kinds: Iterable[str] = (),
    search_kinds: Iterable[str] = (),
    sql_approval: bool = False,
    python_approval: str = "never",
    supervised: bool = False,
    agent_turns: int = 8,
    agent_tool_calls: int = 12,
) -> list[Item]:
    """The work items of a plan's ``(step id, kind)`` steps.

    A SQL step drafts then runs under an approval (2 calls); a run_python step under ``writes_files`` may
    run twice; a question to a person makes no call; an agent step is ``agent_turns`` model calls and up to
    ``agent_tool_calls`` tool calls; a supervised (hybrid) step is followed by one Supervisor call.
    """
    sql, code, none = set(sql_kinds), set(code_kinds), set(no_call_kinds)
    agents, search = set(agent_kinds), set(search_kinds)
    items: list[Item] = []
    for step_id, kind in steps:
        if kind in none:
            items.append(Item(step_id, kind, (0, 0)))
            continue
        if kind in agents:
            items.extend(agent_items(agent_turns, agent_tool_calls, step_id=step_id))
            continue
        llm = uses_llm(kind)
        calls = 1
        if kind in sql and sql_approval:
            calls = 2
        if kind in code and python_approval == "writes_files":
            calls = 2
        items.append(
            Item(
                step_id,
                kind,
                (1, calls),
                (1 if llm else 0, calls if llm else 0),
                search=kind in search,
                sql=kind in sql,
                sandbox=kind in code,
            )
        )
        if supervised:
            items.append(Item(step_id, "supervise", (1, 1), (1, 1)))  # shown in its step's entry
    return items


def agent_items(
    turns: int,
    tool_calls: int,
    *,
    step_id: str = "agent",
    tool: str | None = None,
    max_tokens: int | None = None,
    timeout_s: float | None = None,
    models: tuple[str, ...] = (),
) -> list[Item]:
    """An agent's work (one entry, ``step_id``): 1 to ``turns`` model turns, at most ``tool_calls`` tool calls."""
    turn = Item(
        step_id, "agent_turn", (1, turns), (1, turns), max_tokens=max_tokens, timeout_s=timeout_s, models=models
    )
    # A tool call may be a step kind that calls a model (a SQL draft): the high end counts each as one.
    call = Item(
        step_id,
        "call_tool",
        (0, tool_calls),
        (0, tool_calls),
        tool=tool,
        max_tokens=max_tokens,
        timeout_s=timeout_s,
        models=models,
    )
    return [turn, call]
