"""supervise: the optional Supervisor hook of hybrid mode (internal executor)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.executors import SUPERVISE, register
from shared.executors.common import call_llm, usage_of
from shared.jobs.contracts import ExecutorInput, ExecutorOutput
from shared.jobs.plan import SupervisorDecision
from shared.providers.interfaces import LLMTask

if TYPE_CHECKING:
    from shared.providers.clients import Clients


@register(SUPERVISE, description="Decide what to do after a step.", uses_llm=True, internal=True)
def supervise(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Ask the Supervisor for a typed decision about the step that just ran."""
    inputs = {k: inp.task.get(k) for k in ("question", "plan", "step", "output")}
    response = call_llm(inp, clients, LLMTask.SUPERVISE, inputs, SupervisorDecision)
    return ExecutorOutput(
        status="success",
        result=response.output.model_dump(mode="json"),
        usage=usage_of(response, clients),
        model_used=response.model_used,
    )
