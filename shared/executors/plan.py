"""plan: turn the question into a validated Plan (internal executor, not a step kind)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.executors import PLAN, check_plan, register, step_kinds
from shared.executors.common import call_llm, usage_of
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput
from shared.jobs.plan import ASK_USER, Plan
from shared.providers.interfaces import LLMTask

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class PlanRepair(BaseModel):
    """The planner's rejected reply and the problems found in it."""

    model_config = ConfigDict(extra="forbid")

    rejected_output: str = Field(max_length=8000)
    problems: str = Field(max_length=2000)


class PlanTask(BaseModel):
    """The task of the planning call."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, max_length=4000)
    # Set by the orchestrator for the one repair turn: the rejected plan and why it was rejected.
    repair: PlanRepair | None = None


@register(PLAN, description="Plan the steps of a job.", uses_llm=True, internal=True)
def plan(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Ask the planner for a plan and check every step kind against the registry."""
    task = PlanTask.model_validate(inp.task)
    kinds = step_kinds()
    response = call_llm(
        inp,
        clients,
        LLMTask.PLAN,
        {
            "question": task.question,
            "catalog": clients.catalog.prompt_view(),
            "documents": clients.document_titles(),
            "step_kinds": kinds | {ASK_USER: "Ask the user a clarifying question with options."},
            "repair": _repair_lines(task.repair),
        },
        Plan,
    )
    usage = usage_of(response, clients)
    unknown = [s.kind for s in response.output.steps if s.kind != ASK_USER and s.kind not in kinds]
    if unknown:
        message = f"the plan uses unknown step kinds {unknown}; known: {sorted(kinds)}"
        rejected = {"rejected_output": response.output.model_dump_json()[:8000]}
        return ExecutorOutput.failure(
            ErrorCode.BAD_REQUEST, message, usage=usage, model_used=response.model_used, result=rejected
        )
    try:
        # Every step input is checked against its kind's typed model (the provider parsed it; check anyway).
        checked = check_plan(Plan.model_validate(response.output.model_dump(mode="json")))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "plan"
        message = f"the plan is not valid at {where}: {err.get('msg', 'invalid')}"
        return ExecutorOutput.failure(ErrorCode.BAD_REQUEST, message, usage=usage, model_used=response.model_used)
    except ValueError as exc:
        message = f"the plan is not valid: {exc}"
        rejected = {"rejected_output": response.output.model_dump_json()[:8000]}
        return ExecutorOutput.failure(
            ErrorCode.BAD_REQUEST, message, usage=usage, model_used=response.model_used, result=rejected
        )
    return ExecutorOutput(
        status="success", result=checked.model_dump(mode="json"), usage=usage, model_used=response.model_used
    )


def _repair_lines(repair: PlanRepair | None) -> list[str] | None:
    """The repair turn as prompt lines (untrusted: they quote the model's own earlier output)."""
    if repair is None:
        return None
    return [f"your previous reply: {repair.rejected_output}", f"why it was rejected: {repair.problems}"]
