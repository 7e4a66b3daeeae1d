"""An ended job's cost, once: its summary kept for the job list, and the ``job.cost`` event for an end the
orchestrator never saw (a cancel or terminate, an orchestration that crashed).

The orchestrator logs ``job.cost`` itself when it completes or fails (orchestrators/job.py); a terminated
orchestration runs no more code, so its ledger is built here, from its history, the first time it is seen
ended: by the job view, by the job list, or by the cost timer (``record_ended_jobs``). The store's first
writer wins, so each job's summary is written and its event logged once.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from api.costs import part_histories
from api.view import decode, job_status
from shared.jobs.models import ORCHESTRATOR_NAME, TERMINAL_RUNTIME, JobState
from shared.runtime.cost_summaries import CostSummary, as_json, get_cost_summaries, summary_of
from shared.runtime.ledger import view_cost

logger = logging.getLogger(__name__)

# Ended jobs without a summary that one list request sums (a history read each); the rest show theirs later.
MAX_RECORDS_PER_LIST = 10
# The job statuses of an ended job (what the list shows).
ENDED = frozenset({"completed", "failed", "cancelled"})


def _status_of(status: dict[str, Any]) -> str:
    custom = status.get("customStatus")
    try:
        state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    except ValueError:
        state = None
    return job_status(status.get("runtimeStatus"), state, decode(status.get("output")))


def _logged_by_orchestrator(runtime: Any) -> bool:
    """Whether the orchestrator logged ``job.cost`` itself: it did when it returned (completed or failed)."""
    return bool(runtime == "Completed")


def remember(job_id: str, status: dict[str, Any], cost: dict[str, Any]) -> CostSummary | None:
    """Keep an ended job's summary from its view's ``cost``, and log ``job.cost`` when the orchestrator did not.

    A part of a run (its id ``<run id>:...``) is summed in its run's cost, so it gets no event of its own. A
    store that fails is a warning: the view and the list never fail for it.
    """
    runtime = status.get("runtimeStatus")
    if runtime not in TERMINAL_RUNTIME:
        return None
    current = _status_of(status)
    summary = summary_of(cost, current)
    if summary is None:
        return None
    from shared.runtime.settings import get_settings

    try:
        added = get_cost_summaries(get_settings()).add(job_id, summary)
    except Exception as exc:  # noqa: BLE001 - a side store must not fail the request
        logger.warning("job %s: cost summary not kept: %s", job_id, exc)
        return summary
    if added and not _logged_by_orchestrator(runtime) and ":" not in job_id:
        from shared.runtime.telemetry import emit_job_cost

        job_input = decode(status.get("input"))
        job_input = job_input if isinstance(job_input, dict) else {}
        owner, run = job_input.get("owner"), job_input.get("run")
        emit_job_cost(
            job_id=job_id,
            status=current,
            cost=cost,
            owner=str(owner.get("id") or "") if isinstance(owner, dict) else None,
            workflow=str(run.get("id") or "") if isinstance(run, dict) else None,
        )
    return summary


async def record(client: df.DurableOrchestrationClient, job_id: str) -> CostSummary | None:
    """Build an ended job's ledger from its history (and its parts') and remember it."""
    found = await client.get_status(job_id, show_history=True, show_history_output=True, show_input=True)
    if not found or found.name != ORCHESTRATOR_NAME:
        return None
    status = found.to_json()
    status["historyEvents"] = getattr(found, "historyEvents", None) or status.get("history") or []
    if status.get("runtimeStatus") not in TERMINAL_RUNTIME:
        return None
    parts = await part_histories(client, job_id, status)
    cost = view_cost(status["historyEvents"], status.get("createdTime"), parts=parts)
    return remember(job_id, status, cost)


async def attach_costs(
    items: list[dict[str, Any]], binding_json: str, *, max_records: int = MAX_RECORDS_PER_LIST
) -> None:
    """Give each listed job its ``cost`` (None while it runs): kept summaries in one lookup; at most
    ``max_records`` ended jobs without one are summed now, the others on a later list."""
    from shared.runtime.settings import get_settings

    ended = [str(item["id"]) for item in items if item.get("status") in ENDED and item.get("id")]
    try:
        kept = get_cost_summaries(get_settings()).get_many(ended)
    except Exception as exc:  # noqa: BLE001 - the list shows jobs without their cost rather than fail
        logger.warning("cost summaries not read: %s", exc)
        kept = {}
    missing = [job_id for job_id in ended if job_id not in kept][:max_records]
    if missing:
        client = df.DurableOrchestrationClient(binding_json)
        results = await asyncio.gather(*(record(client, job_id) for job_id in missing), return_exceptions=True)
        for job_id, result in zip(missing, results, strict=True):
            if isinstance(result, CostSummary):
                kept[job_id] = result
            elif isinstance(result, BaseException):
                logger.warning("job %s: cost not summed: %s", job_id, result)
    for item in items:
        item["cost"] = as_json(kept.get(str(item.get("id"))))


async def record_ended_jobs(
    client: df.DurableOrchestrationClient, *, now: datetime, lookback: timedelta, limit: int = 50
) -> int:
    """Sum the jobs that ended cancelled or crashed in the lookback window and have no summary yet (the cost
    timer: so their ``job.cost`` event does not wait for someone to look); how many were summed."""
    from shared.runtime.settings import get_settings

    ended = await client.get_status_by(
        created_time_from=now - lookback,
        created_time_to=now,
        runtime_status=[df.OrchestrationRuntimeStatus.Terminated, df.OrchestrationRuntimeStatus.Failed],
    )
    ids = [
        s.instance_id
        for s in ended
        if s.name == ORCHESTRATOR_NAME and s.instance_id and ":" not in s.instance_id  # roots: parts sum into them
    ]
    kept = get_cost_summaries(get_settings()).get_many(ids)
    summed = 0
    for job_id in [i for i in ids if i not in kept][:limit]:
        if await record(client, job_id) is not None:
            summed += 1
    return summed


# The cost timer: every 5 minutes, the jobs created in the last day (NCRONTAB, UTC).
COST_TIMER_SCHEDULE = "0 */5 * * * *"
COST_TIMER_LOOKBACK = timedelta(days=1)


def register(bp: df.Blueprint) -> None:
    """Register the cost timer on the blueprint."""

    @bp.timer_trigger(arg_name="timer", schedule=COST_TIMER_SCHEDULE, run_on_startup=False, use_monitor=True)
    @bp.durable_client_input(client_name="client")
    async def record_job_costs(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
        """Sum the cost of jobs that ended cancelled or crashed and were not seen since."""
        summed = await record_ended_jobs(client, now=datetime.now(UTC), lookback=COST_TIMER_LOOKBACK)
        if summed:
            logger.info("job costs: summed %d ended job(s)", summed)
