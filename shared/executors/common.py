"""Helpers shared by executors: model choice, usage accounting and LLM calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from shared.contracts import ErrorCode, ExecutorInput, ProviderError, Usage
from shared.providers import LLMRequest, LLMResponse, LLMTask

if TYPE_CHECKING:
    from shared.clients import Clients

T = TypeVar("T", bound=BaseModel)


def choose_model(inp: ExecutorInput, clients: Clients) -> str:
    """The model this step must use: the orchestrator's pick, else the first allowed, else the default."""
    allowed = inp.constraints.allowed_models
    wanted = inp.execution_context.get("model")
    if isinstance(wanted, str) and wanted:
        if allowed and wanted not in allowed:
            raise ProviderError(ErrorCode.MODEL_NOT_ALLOWED, f"model {wanted!r} is not in allowed_models {allowed}")
        return wanted
    return allowed[0] if allowed else clients.llm.default_model


def usage_of(response: LLMResponse[T], clients: Clients) -> Usage:
    """Usage and estimated cost of one LLM response, priced from settings."""
    from shared.pricing import estimate_cost

    cost = estimate_cost(
        response.model_used, response.tokens_input, response.tokens_output, clients.settings.model_prices
    )
    return Usage(
        tokens_input=response.tokens_input,
        tokens_output=response.tokens_output,
        total_tokens=response.tokens_input + response.tokens_output,
        estimated_cost=cost,
    )


def call_llm(
    inp: ExecutorInput,
    clients: Clients,
    task: LLMTask,
    inputs: dict[str, object],
    output_type: type[T],
    **extra: object,
) -> LLMResponse[T]:
    """Make one structured LLM call under the step's constraints."""
    request: LLMRequest[T] = LLMRequest(
        task=task,
        inputs=dict(inputs),
        output_type=output_type,
        model=choose_model(inp, clients),
        max_tokens=inp.constraints.max_tokens,
        temperature=inp.constraints.temperature,
        timeout_s=inp.constraints.timeout_ms / 1000,
    )
    on_delta = extra.get("on_delta")
    if callable(on_delta):
        request.on_delta = on_delta
    return clients.llm.generate(request)
