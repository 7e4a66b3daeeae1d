"""What a step of the job orchestration may end in besides a result: stopping the job, an edit, an expired wait.

Shared by the orchestrator's modules (job.py and the step kinds it works in modules of their own), so none of them
imports another for these.
"""

from __future__ import annotations

import json
from typing import Any

from shared.jobs.contracts import ExecutorOutput
from shared.jobs.models import ErrorInfo, UserAnswer


class ExpiredAnswer(UserAnswer):
    """The default taken when a wait expired: no human said it, so it never approves a sensitive read or code."""


class EditedTask:
    """An edit of a SQL step that already passed approval: the new input must be drafted and approved again."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task


class JobStop(Exception):
    """Ends the job as failed with a code, at a step."""

    def __init__(self, code: str, message: str, step_id: str | None = None, *, limit: str | None = None) -> None:
        super().__init__(message)
        self.info = ErrorInfo(code=code, message=message[:600], step_id=step_id, limit=limit)


class ToolStepFailed(Exception):
    """A tool step failed for good under the policy; in agent mode its error goes back to the model."""

    def __init__(self, out: ExecutorOutput) -> None:
        super().__init__(out.error.message if out.error else "failed")
        self.out = out


def event_data(raw: Any) -> Any:
    """An external event's data: raised through the SDK client it arrives as JSON text (once or twice encoded)."""
    for _ in range(2):
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                break
    return raw


def structured(text: str, schema: dict[str, Any], node_id: str) -> dict[str, Any]:
    """The JSON object in an agent's answer, checked against its output schema; a failed node says why."""
    from shared.runtime.schema_safety import SchemaLimitExceeded, UnsafeSchema, safe_validator

    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise JobStop("OUTPUT_INVALID", "the agent's answer holds no JSON object for its output schema", node_id)
    try:
        # No wall-clock bound here (a replay must reach the same verdict); the work bound holds.
        found = safe_validator(schema).errors(data, time_s=None)
    except (UnsafeSchema, SchemaLimitExceeded) as exc:
        raise JobStop(
            "OUTPUT_INVALID", f"the agent's output cannot be checked against its schema: {exc}"[:600], node_id
        ) from None
    problems = sorted(found, key=lambda e: list(e.path))
    if problems:
        where = ".".join(str(p) for p in problems[0].path) or "(root)"
        raise JobStop(
            "OUTPUT_INVALID",
            f"the agent's output does not fit its schema at {where}: {problems[0].message}"[:600],
            node_id,
        )
    return data
