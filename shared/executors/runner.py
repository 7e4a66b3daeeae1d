"""Run one executor under the contract: validate the input, never let an exception out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shared.executors import get_executor
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput, ProviderError

if TYPE_CHECKING:
    from shared.providers.clients import Clients

logger = logging.getLogger(__name__)


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "input"
    return f"invalid executor input at {where}: {first.get('msg', 'invalid')}"


def run_executor(
    payload: Any, *, clients: Clients | Callable[[], Clients], expected_type: str | None = None
) -> dict[str, Any]:
    """Run the executor named by ``payload`` and return the contract output as plain JSON.

    ``clients`` is the providers, or the factory that builds them (the activities pass ``get_clients``, so a
    settings error still becomes the step's failure here, not an activity exception).
    """
    from shared.runtime import telemetry

    try:
        inp = ExecutorInput.model_validate(payload)
    except ValidationError as exc:
        return ExecutorOutput.failure(ErrorCode.INVALID_INPUT, _validation_message(exc)).model_dump(mode="json")
    if expected_type is not None and inp.executor_type != expected_type:
        message = f"activity {expected_type!r} was given executor_type {inp.executor_type!r}"
        return ExecutorOutput.failure(ErrorCode.INVALID_INPUT, message).model_dump(mode="json")
    spec = get_executor(inp.executor_type)
    if spec is None:
        message = f"no executor is registered for executor_type {inp.executor_type!r}"
        return ExecutorOutput.failure(ErrorCode.UNKNOWN_EXECUTOR, message).model_dump(mode="json")

    ctx = inp.execution_context
    with telemetry.executor_span(
        job_id=ctx.job_id or "",
        step_id=ctx.step_id or "",
        executor_type=inp.executor_type,
        task_id=inp.task_id,
        attempt=ctx.attempt,
        carrier=ctx.trace,
    ) as span:
        try:
            output = spec.run(inp, clients() if callable(clients) else clients)
        except ProviderError as exc:
            model = exc.model_used or ctx.model
            output = ExecutorOutput.failure(
                exc.code,
                exc.message,
                retry_after_ms=exc.retry_after_ms,
                model_used=model,
                usage=exc.usage,
                result={"rejected_output": exc.output} if exc.output else None,
            )
        except ValidationError as exc:
            output = ExecutorOutput.failure(ErrorCode.INVALID_INPUT, _validation_message(exc))
        except Exception:
            # Never leak internals into the job; the traceback goes to the logs with the task id.
            logger.exception("executor %s failed unexpectedly (task %s)", inp.executor_type, inp.task_id)
            output = ExecutorOutput.failure(
                ErrorCode.INTERNAL_ERROR, f"{inp.executor_type} failed unexpectedly; see logs for task {inp.task_id}"
            )
        telemetry.record_executor_output(span, output, operation=spec.telemetry_operation)
    return output.model_dump(mode="json")
