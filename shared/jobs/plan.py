"""The plan a planner (LLM or offline) produces for a question, and the other LLM output shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Step kinds are executor types from the registry, plus the kinds the orchestrator works itself (below). The
# domain does not know the registry: ``shared.executors.check_plan`` checks a plan against it.
StepKind = str
ASK_USER = "ask_user"
# A step the agent-mode Executor works with tools (a bounded loop inside a planned job).
AGENT_STEP = "agent"


class AskUserInput(BaseModel):
    """The input of an ask_user step: the only fields a plan may set for it."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=1000, title="Question to ask")
    options: list[str] = Field(default_factory=list, max_length=8)


class AgentStepInput(BaseModel):
    """The input of an agent step: the part of the question the Executor works with tools."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000, title="Step question")


# The kinds the orchestrator works itself, with their typed input and what the planner is told of them.
ORCHESTRATOR_KINDS: dict[str, tuple[type[BaseModel], str]] = {
    ASK_USER: (AskUserInput, "Ask the user a clarifying question with options."),
    AGENT_STEP: (
        AgentStepInput,
        "Let the Executor work this part of the question with tools (documents, data, the job's tools), "
        "calling them as it sees fit; for a part that needs several lookups chosen as results come in.",
    ),
}


class PlanStep(BaseModel):
    """One step of a plan.

    ``input`` is checked by ``shared.executors.check_plan`` against the typed input model its kind
    registered: any other field (``allow_sensitive``, ``mode``, ...) is an error. ``depends_on`` names
    earlier steps whose outputs this step uses.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_-]{1,32}$")
    kind: StepKind = Field(pattern=r"^[a-z][a-z0-9_]{1,63}$")
    title: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """An ordered, validated list of steps."""

    model_config = ConfigDict(extra="forbid")

    steps: list[PlanStep] = Field(min_length=1, max_length=12)
    rationale: str | None = Field(default=None, max_length=1000)

    @model_validator(mode="after")
    def _check_order(self) -> Plan:
        seen: set[str] = set()
        for step in self.steps:
            if step.id in seen:
                raise ValueError(f"duplicate step id {step.id!r}")
            unknown = [d for d in step.depends_on if d not in seen]
            if unknown:
                raise ValueError(f"step {step.id!r} depends on {unknown}, which are not earlier steps")
            seen.add(step.id)
        return self


def replanned_steps(
    new: list[PlanStep], kept: list[str], suffix: str, writes_answer: Callable[[str], bool]
) -> list[PlanStep]:
    """A replan's steps as they join the plan: ids with ``suffix`` (never clashing with the steps that ran),
    their dependencies renamed alike, and an answer step also citing ``kept`` (what already ran)."""
    return [
        s.model_copy(
            update={
                "id": f"{s.id}{suffix}"[:32],
                "depends_on": (list(kept) if writes_answer(s.kind) else [])
                + [f"{d}{suffix}"[:32] for d in s.depends_on],
            }
        )
        for s in new
    ]


class SqlDraft(BaseModel):
    """SQL written by the LLM for one question, before the guard sees it."""

    sql: str = Field(min_length=1, max_length=20_000)
    tables: list[str] = Field(default_factory=list)
    explanation: str | None = Field(default=None, max_length=2000)


# How a replan tells the planner what already ran, after the question: "<id>=<kind> <its question as JSON>, ...".
ALREADY_DONE = "Already done: "


class SupervisorDecision(BaseModel):
    """What the optional Supervisor hook decides after a step (hybrid mode)."""

    action: Literal["continue", "retry", "ask_user", "replan", "choose_tool"]
    reason: str = Field(max_length=1000)
    question: str | None = Field(default=None, max_length=1000)
    options: list[str] = Field(default_factory=list, max_length=8)
    executor_type: str | None = None
