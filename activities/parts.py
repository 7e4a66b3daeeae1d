"""The report_part activity: a part of a run tells its root run of a question (orchestrators/part_questions.py).

Orchestrators cannot raise events on other orchestrations, so this activity does, with the durable client.
A root that has ended (cancelled, failed) no longer shows anything: the report says so and the part's
question simply waits out its deadline.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

from shared.jobs.models import PartReport
from shared.jobs.runs import REPORT_PART

# What DurableOrchestrationClient.raise_event says of an instance that is gone or unknown (404 / 410).
GONE = ("is gone", "No instance with ID")


async def report_part(payload: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    """Raise the part's news on the root run; ``delivered`` is False when the root has ended."""
    report = PartReport.model_validate(payload)
    try:
        await client.raise_event(report.to.instance, report.to.event, report.news.model_dump(mode="json"))
    except Exception as exc:
        if not any(marker in str(exc) for marker in GONE):
            raise  # anything else may pass: the orchestrator logs it, the question still waits
        return {"delivered": False, "reason": str(exc)[:300]}
    return {"delivered": True}


def register(bp: df.Blueprint) -> None:
    """Register the activity on the blueprint."""
    bp.function_name(REPORT_PART)(
        bp.activity_trigger(input_name="payload", activity=REPORT_PART)(
            bp.durable_client_input(client_name="client")(report_part)
        )
    )
