"""The plan a planner (LLM or offline) produces for a question, and the other LLM output shapes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Step kinds are executor types from the registry, plus "ask_user"; the plan executor checks them.
StepKind = str
ASK_USER = "ask_user"


class AskUserInput(BaseModel):
    """The input of an ask_user step: the only fields a plan may set for it."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=1000)
    options: list[str] = Field(default_factory=list, max_length=8)


class PlanStep(BaseModel):
    """One step of a plan.

    ``input`` by kind: consult_rag ``{"query": str}``; execute_azure_sql ``{"question": str, "sql": str?}``;
    generate_response ``{"question": str}``; ask_user ``{"question": str, "options": [str, ...]}``.
    ``depends_on`` names earlier steps whose outputs this step uses. The input is checked against the
    typed input model its kind registered: any other field (``allow_sensitive``, ``mode``, ...) is an error.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_-]{1,32}$")
    kind: StepKind = Field(pattern=r"^[a-z][a-z0-9_]{1,63}$")
    title: str = Field(min_length=1, max_length=200)
    input: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _input_fits_kind(self) -> PlanStep:
        # Imported here: the registry's executor modules import this module.
        from shared.executors import StepInputError, validate_step_input

        required = {"consult_rag": "query"}.get(self.kind, "question")
        value = self.input.get(required)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"step {self.id!r} ({self.kind}) needs a non-empty input.{required}")
        try:
            self.input = validate_step_input(self.kind, self.input)
        except StepInputError as exc:
            raise ValueError(f"step {self.id!r} ({self.kind}): {exc.message}") from exc
        return self


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
        if not any(s.kind == "generate_response" for s in self.steps):
            raise ValueError("a plan needs a generate_response step")
        return self


class SqlDraft(BaseModel):
    """SQL written by the LLM for one question, before the guard sees it."""

    sql: str = Field(min_length=1, max_length=20_000)
    tables: list[str] = Field(default_factory=list)
    explanation: str | None = Field(default=None, max_length=2000)


class SupervisorDecision(BaseModel):
    """What the optional Supervisor hook decides after a step (hybrid mode)."""

    action: Literal["continue", "retry", "ask_user", "replan", "choose_tool"]
    reason: str = Field(max_length=1000)
    question: str | None = Field(default=None, max_length=1000)
    options: list[str] = Field(default_factory=list, max_length=8)
    executor_type: str | None = None
