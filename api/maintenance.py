"""History retention: a timer purges finished jobs older than JOB_HISTORY_RETENTION_DAYS from the Durable store.

The Durable store keeps every instance's history until someone purges it; production apps own that
policy. This timer runs on the schedule JOB_HISTORY_PURGE_SCHEDULE (NCRONTAB, UTC) and deletes, with
the Durable purge API, the completed, failed and terminated instances created before the retention
horizon. Running or waiting jobs are never purged, however old.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import azure.durable_functions as df
import azure.functions as func
from pydantic import BaseModel

logger = logging.getLogger(__name__)

# The purge API needs a lower bound; every instance of this app was created after it.
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PURGED_STATUSES = [
    df.OrchestrationRuntimeStatus.Completed,
    df.OrchestrationRuntimeStatus.Failed,
    df.OrchestrationRuntimeStatus.Terminated,
]
DEFAULT_SCHEDULE = "0 30 3 * * *"


class PurgeReport(BaseModel):
    """What one retention run did."""

    horizon: datetime
    instances_deleted: int


def purge_after(created: datetime, retention_days: float) -> datetime:
    """When a job created at ``created`` becomes old enough to purge (once it has finished)."""
    return created + timedelta(days=retention_days)


async def purge_finished_jobs(
    client: df.DurableOrchestrationClient, *, now: datetime, retention: timedelta
) -> PurgeReport:
    """Purge finished instances created before ``now - retention``; returns the horizon and the count."""
    horizon = now - retention
    result = await client.purge_instance_history_by(
        created_time_from=EPOCH, created_time_to=horizon, runtime_status=PURGED_STATUSES
    )
    return PurgeReport(horizon=horizon, instances_deleted=int(result.instances_deleted))


def purge_schedule() -> str:
    """The timer's NCRONTAB schedule from the settings (the default while they are invalid)."""
    from shared.runtime.settings import ConfigError, get_settings

    try:
        return get_settings().job_history_purge_schedule.strip()
    except ConfigError:
        # Importing the app must never fail on Azure; the invalid setting is reported on every request.
        return DEFAULT_SCHEDULE


def register(bp: df.Blueprint) -> None:
    """Register the retention timer on the blueprint."""

    @bp.timer_trigger(arg_name="timer", schedule=purge_schedule(), run_on_startup=False, use_monitor=True)
    @bp.durable_client_input(client_name="client")
    async def purge_job_history(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
        """Purge the history of finished jobs older than the retention setting."""
        from shared.runtime.settings import ConfigError, get_settings

        try:
            days = get_settings().job_history_retention_days
        except ConfigError as exc:
            logger.error("job history retention skipped: %s", exc.public_message)
            return
        report = await purge_finished_jobs(client, now=datetime.now(UTC), retention=timedelta(days=days))
        logger.info(
            "job history retention: purged %d finished job(s) created before %s%s",
            report.instances_deleted,
            report.horizon.isoformat(),
            " (run was past due)" if timer.past_due else "",
        )
