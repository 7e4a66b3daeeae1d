"""Thin decisions: the model's choice when it is one of the options, the rules otherwise; never a failed step."""

from __future__ import annotations

from typing import Any

import pytest

from shared.executors.decisions import Choice, DecisionHook, decide
from shared.jobs.contracts import ErrorCode, ExecutorInput, ProviderError
from shared.providers.clients import Clients
from shared.providers.interfaces import LLMRequest, LLMResponse, LLMTask
from shared.runtime.settings import Settings


class ScriptedModel:
    """An LLMProvider (the app's own interface) answering decisions from a script, recording each request."""

    name = "scripted"
    default_model = "m1"

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[LLMRequest[Any]] = []

    def generate(self, request: LLMRequest[Any]) -> LLMResponse[Any]:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return LLMResponse(
            output=request.output_type.model_validate(answer), tokens_input=30, tokens_output=5, model_used="m1"
        )


HOOK = DecisionHook(
    "choose_sql_tool",
    "Which database?",
    {"sqlite": "the local sample", "postgresql": "PostgreSQL"},
    lambda: ("sqlite", "the question names no database"),
)
INP = ExecutorInput(task_id="j:s1:1", executor_type="execute_azure_sql")


def clients(model: ScriptedModel, **settings: Any) -> Clients:
    return Clients(Settings(llm_provider="openai", openai_base_url="http://127.0.0.1:9/v1", **settings), llm=model)


def test_a_valid_model_choice_is_taken_with_its_reason_and_usage() -> None:
    model = ScriptedModel({"choice": "postgresql", "reason": "the user asked for postgres"})
    decided = decide(HOOK, {"question": "q"}, INP, clients(model))
    assert (decided.choice, decided.decided_by, decided.reason) == (
        "postgresql",
        "model",
        "the user asked for postgres",
    )
    assert decided.usage.total_tokens == 35 and decided.model_used == "m1"
    assert model.requests[0].task is LLMTask.DECIDE and model.requests[0].output_type is Choice
    assert model.requests[0].inputs["options"] == dict(HOOK.options)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"choice": "mysql", "reason": "x"}, "not an option"),
        ({"choice": "azure_sql; DROP TABLE orders", "reason": "x"}, "not an option"),
        (ProviderError(ErrorCode.RATE_LIMITED, "slow down"), "could not decide (RATE_LIMITED)"),
        (ProviderError(ErrorCode.BAD_REQUEST, "unparseable"), "could not decide (BAD_REQUEST)"),
    ],
)
def test_anything_but_a_valid_choice_falls_back_to_the_rules(answer: Any, why: str) -> None:
    decided = decide(HOOK, {"question": "q"}, INP, clients(ScriptedModel(answer)))
    assert decided.choice == "sqlite" and decided.decided_by == "rules"
    assert why in decided.reason and "names no database" in decided.reason


def test_rules_only_when_the_setting_says_so_or_no_model_is_configured() -> None:
    model = ScriptedModel()
    assert decide(HOOK, {}, INP, clients(model, decisions="rules")).decided_by == "rules"
    offline = Clients(Settings(llm_provider="offline"), llm=model)
    assert decide(HOOK, {}, INP, offline).decided_by == "rules"
    assert model.requests == []


def test_one_option_is_no_decision() -> None:
    model = ScriptedModel()
    hook = DecisionHook("x", "?", {"sqlite": "only"}, lambda: ("sqlite", "rules"))
    decided = decide(hook, {}, INP, clients(model))
    assert decided.choice == "sqlite" and decided.reason == "the only option" and model.requests == []
