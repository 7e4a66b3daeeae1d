"""Reads for the cost ledger at the HTTP edge: the histories of a finished run's parts (shared/runtime/ledger.py)."""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

from shared.jobs.models import TERMINAL_RUNTIME
from shared.runtime.history_counts import part_instances

# A run's parts whose histories one view reads (each is one status call); the rest are left out of the cost.
MAX_PART_HISTORIES = 64


async def part_histories(
    client: df.DurableOrchestrationClient, job_id: str, status: dict[str, Any], limit: int = MAX_PART_HISTORIES
) -> dict[str, list[dict[str, Any]]]:
    """The histories of a finished run's parts and their own parts, by instance id (only ids under the job's)."""
    if status.get("runtimeStatus") not in TERMINAL_RUNTIME:
        return {}
    queue = part_instances(status.get("historyEvents") or [])
    found: dict[str, list[dict[str, Any]]] = {}
    while queue and len(found) < limit:
        instance = queue.pop(0)
        # A part's id always begins with its job's: nothing else is read, whatever a history says.
        if instance in found or not instance.startswith(f"{job_id}:"):
            continue
        part = await client.get_status(instance, show_history=True, show_history_output=True, show_input=True)
        events = list(getattr(part, "historyEvents", None) or []) if part else []
        found[instance] = events
        queue.extend(part_instances(events))
    return found
