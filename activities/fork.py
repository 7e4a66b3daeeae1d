"""The load_fork_base activity: read what a fork carries over from its origin's committed history.

Orchestrators cannot read another instance, so this activity does, with the durable client; its result (the
origin's plan and the carried steps' results) is recorded in the fork's own history, so the fork replays
without reading the origin again, and a restart never runs a carried step.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.fork import LOAD_FORK_BASE, ForkBaseResult, ForkError, fork_base


class LoadForkBase(BaseModel):
    """The activity's input: the origin job and the step the fork re-runs from."""

    model_config = ConfigDict(extra="forbid")

    origin: str = Field(min_length=1, max_length=256)
    from_step: str = Field(min_length=1, max_length=64)


async def load_fork_base(payload: dict[str, Any], client: df.DurableOrchestrationClient) -> dict[str, Any]:
    """The origin's plan and carried steps, or why the fork cannot start (the origin may be gone by now)."""
    ask = LoadForkBase.model_validate(payload)
    status = await client.get_status(ask.origin, show_history=True, show_history_output=True, show_input=True)
    data = status.to_json() if status else {}
    if not status or not data.get("instanceId"):
        result = ForkBaseResult(error_code="JOB_NOT_FOUND", error_message=f"the origin job {ask.origin} is gone")
        return result.model_dump(mode="json")
    data["historyEvents"] = getattr(status, "historyEvents", None) or data.get("history") or []
    try:
        result = ForkBaseResult(base=fork_base(data, ask.from_step, _writes_answer()))
    except ForkError as exc:
        result = ForkBaseResult(error_code=exc.code, error_message=exc.message[:600])
    return result.model_dump(mode="json")


def register(bp: df.Blueprint) -> None:
    """Register the activity on the blueprint."""
    bp.function_name(LOAD_FORK_BASE)(
        bp.activity_trigger(input_name="payload", activity=LOAD_FORK_BASE)(
            bp.durable_client_input(client_name="client")(load_fork_base)
        )
    )


def _writes_answer() -> Any:
    """The registry's rule of which step kinds write the answer (a hybrid job's replans are rebuilt with it)."""
    from shared.executors import writes_answer

    return writes_answer
