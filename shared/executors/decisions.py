"""Thin decisions inside deterministic steps: a typed hook a model may answer, with deterministic rules behind it.

A hook names what is decided, its options (each with a description) and the rules that decide without a
model. ``decide`` asks the configured model (setting DECISIONS: model, or auto when a model is configured)
for one option and a reason; anything else the model says (an unknown option, an error, no model) falls
back to the rules, so a decision never fails its step. The model's choice is data: it can only pick one
of the options the step offered, and what each option may do is decided elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.executors.common import call_llm, usage_of
from shared.jobs.contracts import ExecutorInput, ProviderError, Usage
from shared.providers.interfaces import LLMTask

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class Choice(BaseModel):
    """What a model answers to a decision: one option's name and why."""

    model_config = ConfigDict(extra="forbid")

    choice: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="", max_length=500)


@dataclass(frozen=True)
class DecisionHook:
    """One decision: its name, what is decided, the options (name -> description) and the rules' pick."""

    name: str
    question: str
    options: Mapping[str, str]
    rules: Callable[[], tuple[str, str]]


@dataclass
class Decided:
    """The outcome: the option, why, who decided, and the tokens a model spent on it."""

    choice: str
    reason: str
    decided_by: Literal["model", "rules"]
    usage: Usage = field(default_factory=Usage)
    model_used: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The decision as a step's result reports it."""
        return {"choice": self.choice, "reason": self.reason, "decided_by": self.decided_by}


def _model_decides(clients: Clients) -> bool:
    settings = clients.settings
    if settings.decisions == "rules":
        return False
    return settings.llm_provider != "offline"


def _by_rules(hook: DecisionHook, why: str = "") -> Decided:
    choice, reason = hook.rules()
    return Decided(choice, f"{why}{reason}"[:500], "rules")


def decide(hook: DecisionHook, context: dict[str, Any], inp: ExecutorInput, clients: Clients) -> Decided:
    """Make one decision: the model's valid choice, else the rules'."""
    if len(hook.options) == 1:
        only = next(iter(hook.options))
        return Decided(only, "the only option", "rules")
    if not _model_decides(clients):
        return _by_rules(hook)
    inputs: dict[str, object] = {
        "decision": hook.name,
        "question": hook.question,
        "options": dict(hook.options),
        "context": context,
    }
    try:
        response = call_llm(inp, clients, LLMTask.DECIDE, inputs, Choice)
    except ProviderError as exc:
        fallback = _by_rules(hook, f"the model could not decide ({exc.code}); by the rules: ")
        fallback.usage = exc.usage or Usage()
        return fallback
    usage = usage_of(response, clients)
    picked = response.output
    if picked.choice not in hook.options:
        fallback = _by_rules(hook, f"the model chose {picked.choice[:40]!r}, which is not an option; by the rules: ")
        fallback.usage, fallback.model_used = usage, response.model_used
        return fallback
    return Decided(picked.choice, picked.reason or "the model's choice", "model", usage, response.model_used)
