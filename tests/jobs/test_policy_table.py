"""The failure policy, one row per case: a failed call and where it stands → what the orchestrator does."""

from __future__ import annotations

import pytest

from orchestrators.policy import Decision, Failure, Standing, decide
from shared.jobs.models import RetryPolicy

POLICY = RetryPolicy(max_attempts_per_model=3, first_retry_ms=1000, max_retry_ms=60_000)

# (code, retryable, retry_after_ms, tries_on_model, model_index, models, uses_llm, caller) -> decision
ROWS = [
    # the budget stops everything, even a retryable error
    (("BUDGET_EXCEEDED", True, None, 0, 0, 2, True, "step"), Decision("stop_budget")),
    # transient errors back off exponentially, at least retry_after, at most max_retry_ms
    (("RATE_LIMITED", True, None, 0, 0, 1, True, "step"), Decision("retry", 1000)),
    (("RATE_LIMITED", True, None, 1, 0, 1, True, "step"), Decision("retry", 2000)),
    (("RATE_LIMITED", True, 5000, 0, 0, 1, True, "step"), Decision("retry", 5000)),
    (("RATE_LIMITED", True, 600_000, 1, 0, 1, True, "step"), Decision("retry", 60_000)),
    (("TRANSIENT", True, None, 0, 0, 1, False, "plan"), Decision("retry", 1000)),
    # out of tries on this model: the next allowed model, for LLM calls only
    (("MODEL_TIMEOUT", True, None, 2, 0, 2, True, "step"), Decision("fall_back")),
    (("MODEL_TIMEOUT", True, None, 2, 1, 2, True, "step"), Decision("ask_user")),
    (("TRANSIENT", True, None, 2, 0, 2, False, "step"), Decision("ask_user")),
    # model-specific refusals switch models at once
    (("CONTENT_FILTERED", False, None, 0, 0, 2, True, "step"), Decision("fall_back")),
    (("MODEL_NOT_ALLOWED", False, None, 0, 0, 3, True, "plan"), Decision("fall_back")),
    (("CONTENT_FILTERED", False, None, 0, 0, 1, True, "step"), Decision("ask_user")),
    # A deployment that refuses the agent's output schema: another model may take it; the last one asks.
    (("OUTPUT_SCHEMA_REFUSED", False, None, 0, 0, 2, True, "step"), Decision("fall_back")),
    (("OUTPUT_SCHEMA_REFUSED", False, None, 0, 1, 2, True, "step"), Decision("ask_user")),
    # content errors go to the user for a step, end planning, and never block the job from a Supervisor
    (("SQL_REJECTED", False, None, 0, 0, 2, True, "step"), Decision("ask_user")),
    (("BAD_REQUEST", False, None, 0, 0, 1, True, "plan"), Decision("stop")),
    # planning out of automatic tries on a transient fault waits for a person (retry or abort)
    (("UPSTREAM_ERROR", True, None, 2, 0, 1, True, "plan"), Decision("ask_user")),
    (("MODEL_TIMEOUT", True, None, 2, 1, 2, True, "plan"), Decision("ask_user")),
    (("UPSTREAM_ERROR", True, 5000, 1, 0, 1, True, "plan"), Decision("retry", 5000)),
    (("BAD_REQUEST", False, None, 0, 0, 1, True, "supervise"), Decision("give_up_quietly")),
    # an Executor turn that failed: answer from what was found, unless the job cannot work at all
    (("BAD_REQUEST", False, None, 0, 0, 1, True, "executor"), Decision("give_up_quietly")),
    (("RATE_LIMITED", True, None, 2, 0, 1, True, "executor"), Decision("give_up_quietly")),
    (("RATE_LIMITED", True, None, 0, 0, 1, True, "executor"), Decision("retry", 1000)),
    (("CONFIG_ERROR", False, None, 0, 0, 1, True, "executor"), Decision("stop")),
    (("AUTH_FAILED", False, None, 0, 0, 1, True, "executor"), Decision("stop")),
]


@pytest.mark.parametrize(("row", "expected"), ROWS, ids=[f"{r[0][0]}-{r[0][7]}-{i}" for i, r in enumerate(ROWS)])
def test_policy_row(row: tuple, expected: Decision) -> None:
    code, retryable, retry_after, tries, index, models, uses_llm, caller = row
    decision = decide(Failure(code, retryable, retry_after), Standing(tries, index, models, uses_llm, caller), POLICY)
    assert decision == expected


# Planning repair: (repairable, repaired) -> decision for an invalid plan (BAD_REQUEST, not retryable)
REPAIR_ROWS = [
    ((True, False), Decision("repair")),
    ((True, True), Decision("stop")),
    ((False, False), Decision("stop")),
]


@pytest.mark.parametrize(("row", "expected"), REPAIR_ROWS)
def test_an_invalid_plan_is_repaired_once(row: tuple[bool, bool], expected: Decision) -> None:
    repairable, repaired = row
    failure = Failure("BAD_REQUEST", False, None, repairable=repairable)
    assert decide(failure, Standing(0, 0, 1, True, "plan", repaired), POLICY) == expected
    # Only planning is repaired: a step's rejected output goes to the user.
    assert decide(failure, Standing(0, 0, 1, True, "step", repaired), POLICY) == Decision("ask_user")
