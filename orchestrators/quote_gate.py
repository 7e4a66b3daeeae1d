"""The job's quote and its money approval (``approval.cost_over``), worked by the orchestrator.

A plain generator driven by ``RunCore`` (deterministic, no I/O): the quote is the pure function of
shared/jobs/quote.py over the plan (or the agent's limits, or the run's quote the API made from its graph)
and the prices the API fixed at submit. When ``approval.cost_over`` is set and the quote's high end is over it,
the job asks a person (a ``cost`` question, with the quote) before it spends anything past planning; reject
(or an expired wait, unless ``approval.on_timeout`` is ``approve``) stops it with QUOTE_REJECTED. Jobs started
before quotes existed have no ``quote_prices`` and are left as they ran (replay).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from orchestrators.outcomes import ExpiredAnswer, JobStop
from shared.definitions.quote import job_bounds
from shared.executors import get_executor, kinds_where
from shared.executors import uses_llm as executor_uses_llm
from shared.jobs.models import STATUS_BUDGET_BYTES, custom_status
from shared.jobs.plan import AGENT_STEP, ORCHESTRATOR_KINDS, Plan
from shared.jobs.quote import Item, Quote, QuoteBounds, agent_items, cut_steps, plan_items, quote

if TYPE_CHECKING:
    from orchestrators.run.core import RunCore
    from orchestrators.run.record import Gen

logger = logging.getLogger(__name__)
QUOTE_REJECTED = "QUOTE_REJECTED"
QUOTE_EVENT = "job.quote"
# Room kept in the custom status for the cost question (1000 characters and its fields), in UTF-16 bytes.
QUESTION_ROOM = 2 * 1500
COST_OPTIONS = ["approve", "reject"]
SEARCH_KIND = "consult_rag"
NOT_BOUNDED = "a person's 'retry' after a step failed for good is not bounded: each one can add a step's high end"
REPLANS = "hybrid mode: the Supervisor's replans and re-runs are not in the range"


def bounds_of(run: RunCore) -> QuoteBounds:
    """The bounds the quote multiplies by: the job's constraints and the app's retry policy."""
    return job_bounds(run.job.request, run.job.policy)


def spent_so_far(run: RunCore) -> float:
    """What the job has spent on its priced meters so far (planning): tokens and tools, and the calls' meters."""
    prices = run.job.policy.call_prices
    infra = sum(run.budgets.spend.by_meter(prices).values()) if prices is not None else 0.0
    return run.state.usage.estimated_cost + infra


def plan_quote(run: RunCore, plan: Plan) -> Quote | None:
    """The quote of a planned job, from its steps' kinds (None: the job has no quote prices)."""
    prices = run.job.policy.quote_prices
    if prices is None:
        return None
    request = run.job.request
    items = plan_items(
        [(step.id, step.kind) for step in plan.steps],
        executor_uses_llm,
        sql_kinds=kinds_where(lambda spec: spec.runs_sql),
        code_kinds=kinds_where(lambda spec: spec.runs_code),
        no_call_kinds=[k for k in ORCHESTRATOR_KINDS if k != AGENT_STEP],
        agent_kinds=[AGENT_STEP],
        search_kinds=[SEARCH_KIND] if get_executor(SEARCH_KIND) else [],
        sql_approval=request.approval.sql != "never",
        python_approval=request.approval.python,
        supervised=request.mode == "hybrid",
        agent_turns=request.agent.max_turns,
        agent_tool_calls=request.agent.max_tool_calls,
    )
    notes = [NOT_BOUNDED, *([REPLANS] if request.mode == "hybrid" else [])]
    return quote(items, bounds_of(run), prices, spent=spent_so_far(run), assumptions=notes)


def agent_quote(run: RunCore) -> Quote | None:
    """The quote of an agent-mode job before it starts: its turns, tool calls and the answer step."""
    prices = run.job.policy.quote_prices
    if prices is None:
        return None
    limits = run.job.request.agent
    answer = sorted(kinds_where(lambda spec: spec.writes_answer))
    items = agent_items(limits.max_turns, limits.max_tool_calls, step_id="agent")
    items += [Item("answer", kind, (1, 1), (1, 1)) for kind in answer[:1]]
    return quote(items, bounds_of(run), prices, spent=spent_so_far(run), assumptions=[NOT_BOUNDED])


def fitted(run: RunCore, made: Quote) -> Quote:
    """The quote as the job's state can hold it with a question still to ask: ``by_step`` cut while it does not."""
    keep = len(made.by_step)
    while True:
        cut = made.model_copy(update={"by_step": cut_steps(made.by_step, keep)})
        run.record.set_quote(cut)
        size = len(json.dumps(custom_status(run.state), separators=(",", ":"), ensure_ascii=False).encode("utf-16-le"))
        if size + QUESTION_ROOM <= STATUS_BUDGET_BYTES or keep == 0:
            return cut
        keep -= 1


def log_quote(run: RunCore, made: Quote) -> None:
    """The ``job.quote`` event, once (never on replay): App Insights gets it as a trace with these dimensions
    (the names follow shared/runtime/telemetry.py's, which orchestrator code may not import)."""
    if run.ctx.is_replaying:
        return
    extra = {
        "job.event": QUOTE_EVENT,
        "job.id": run.job.job_id,
        "job.quote.low": made.low,
        "job.quote.high": made.high,
        "job.quote.currency": made.currency,
        "job.quote.price_table": made.price_table_version,
        "job.quote.unknown": ",".join(u.meter for u in made.unknown),
        "job.workflow": run.job.run.id if run.job.run else "ask",
    }
    logger.info("job %s quote %.8f-%.8f %s", run.job.job_id, made.low, made.high, made.currency, extra=extra)


def gate(run: RunCore, plan: Plan | None = None) -> Gen:
    """Quote the job (after planning; an agent job or a run: before it starts) and ask when over cost_over."""
    if run.record.part_of_run or (run.job.run is not None and run.job.run.part is not None):
        return  # a part of a run: the root run was quoted (and approved) as a whole
    if run.job.run is not None:
        made = run.job.quote
    elif plan is not None:
        made = plan_quote(run, plan)
    else:
        made = agent_quote(run)
    if made is None:
        return
    run.record.set_quote(fitted(run, made))
    run.publish()
    log_quote(run, made)
    limit = run.job.request.approval.cost_over
    if limit is None or made.high <= limit:
        return
    unknown = f"; meters without a price: {', '.join(u.meter for u in made.unknown)}" if made.unknown else ""
    question = (
        f"This job may cost {made.low:.6f} to {made.high:.6f} {made.currency} (prices {made.price_table_version})"
        f", over its approval limit of {limit:g} {made.currency}{unknown}. Go on?"
    )
    on_timeout = run.job.request.approval.on_timeout
    reply = yield from run.questions.ask(
        None,
        "cost",
        question[:1000],
        COST_OPTIONS,
        default={"approve": "approve", "reject": "reject"}.get(on_timeout),
        # The view shows the quote; the question carries its range (the state has 16 KB in all).
        details={"low": made.low, "high": made.high, "currency": made.currency, "cost_over": limit},
        timeout_seconds=run.questions.approval_seconds,
        expiry_falls_back=on_timeout != "fail",
        expiry_message=(
            f"the quote of this job (up to {made.high:.6f} {made.currency}, over approval.cost_over {limit:g}) was "
            f"not approved within {run.questions.approval_seconds} s, so it stopped before spending past planning"
        ),
    )
    if reply.action() == "approve":
        expired = " (the wait expired)" if isinstance(reply, ExpiredAnswer) else ""
        run.log("quote %.6f-%.6f approved%s", made.low, made.high, expired)
        return
    who = "no one approved it in time" if isinstance(reply, ExpiredAnswer) else "a person rejected it"
    raise JobStop(
        QUOTE_REJECTED,
        f"stopped before spending past planning: the quote's high end {made.high:.6f} {made.currency} is over "
        f"approval.cost_over {limit:g} {made.currency}, and {who}",
    )
