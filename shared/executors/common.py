"""Helpers shared by executors: model choice, usage accounting and LLM calls."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from shared.jobs.contracts import ErrorCode, ExecutorInput, ProviderError, Usage
from shared.providers.interfaces import LLMRequest, LLMResponse, LLMTask

if TYPE_CHECKING:
    from shared.providers.clients import Clients

T = TypeVar("T", bound=BaseModel)


def choose_model(inp: ExecutorInput, clients: Clients) -> str:
    """The model this step must use: the orchestrator's pick, else the first allowed, else the default."""
    allowed = inp.constraints.allowed_models
    wanted = inp.execution_context.model
    if wanted:
        if allowed and wanted not in allowed:
            raise ProviderError(ErrorCode.MODEL_NOT_ALLOWED, f"model {wanted!r} is not in allowed_models {allowed}")
        return wanted
    return allowed[0] if allowed else clients.llm.default_model


def usage_of(response: LLMResponse[T], clients: Clients) -> Usage:
    """Usage and estimated cost of one LLM response, priced from settings."""
    return priced_usage(
        response.model_used,
        response.tokens_input,
        response.tokens_output,
        clients,
        estimated=response.usage_estimated,
    )


def priced_usage(model: str, tokens_in: int, tokens_out: int, clients: Clients, *, estimated: bool = False) -> Usage:
    """Usage of ``tokens_in``/``tokens_out`` on ``model``, with its cost priced from settings."""
    from shared.runtime.pricing import estimate_cost

    return Usage(
        tokens_input=tokens_in,
        tokens_output=tokens_out,
        total_tokens=tokens_in + tokens_out,
        estimated_cost=estimate_cost(model, tokens_in, tokens_out, clients.settings.model_prices),
        estimated=estimated,
    )


def charge_failure(exc: ProviderError, usage: Usage, model_used: str | None) -> ProviderError:
    """Attach usage spent earlier in the step to a later failure (e.g. the SQL writer's tokens to a DB error)."""
    if exc.usage is None:
        exc.usage = usage
    else:
        exc.usage = exc.usage + usage
    exc.model_used = exc.model_used or model_used
    return exc


# Prompt templates add text around the inputs; count it so the budget check errs on the safe side.
PROMPT_OVERHEAD_TOKENS = 200


def check_budget(inp: ExecutorInput, clients: Clients, model: str, inputs: dict[str, object]) -> None:
    """Refuse a call whose estimated prompt plus max_tokens would not fit the job's remaining budget."""
    from shared.jobs.tokens import estimate_tokens
    from shared.runtime.pricing import estimate_cost

    tokens_left = inp.execution_context.budget_tokens_left
    cost_left = inp.execution_context.budget_cost_left
    if tokens_left is None and cost_left is None:
        return
    prompt = estimate_tokens(json.dumps(inputs, default=str)) + PROMPT_OVERHEAD_TOKENS
    worst_tokens = prompt + inp.constraints.max_tokens
    if tokens_left is not None and worst_tokens > int(tokens_left):
        raise ProviderError(
            ErrorCode.BUDGET_EXCEEDED,
            f"the call needs up to {worst_tokens} tokens (prompt ~{prompt} + max_tokens "
            f"{inp.constraints.max_tokens}); the job has {tokens_left} left",
        )
    if cost_left is not None:
        worst_cost = estimate_cost(model, prompt, inp.constraints.max_tokens, clients.settings.model_prices)
        if worst_cost > float(cost_left):
            raise ProviderError(
                ErrorCode.BUDGET_EXCEEDED,
                f"the call may cost up to {worst_cost:.6f} USD; the job has {float(cost_left):.6f} USD left; "
                f"the meter that crosses it: llm.tokens:{model}",
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
    model = choose_model(inp, clients)
    check_budget(inp, clients, model, inputs)
    request: LLMRequest[T] = LLMRequest(
        task=task,
        inputs=dict(inputs),
        output_type=output_type,
        model=model,
        max_tokens=inp.constraints.max_tokens,
        temperature=inp.constraints.temperature,
        timeout_s=inp.constraints.timeout_ms / 1000,
    )
    on_delta = extra.get("on_delta")
    if callable(on_delta):
        request.on_delta = on_delta
    schema = extra.get("output_schema")
    if isinstance(schema, dict):
        request.output_schema = schema
    try:
        return clients.llm.generate(request)
    except ProviderError as exc:
        # A failed call (cut, invalid, unparseable output) still spent tokens: price them so the
        # executor's failure output, and so the job's budget, count them.
        if exc.usage is not None:
            exc.model_used = exc.model_used or model
            exc.usage = priced_usage(
                exc.model_used,
                exc.usage.tokens_input,
                exc.usage.tokens_output,
                clients,
                estimated=exc.usage.estimated,
            )
        raise
