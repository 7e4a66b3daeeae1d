"""The job's failure policy as a pure function: a failed call and where it stands → what the orchestrator does.

No Durable calls, no state: `Attempts.execute` (orchestrators/run/attempts.py) turns the decision into timers,
model switches, questions or a stop. A policy change is a change here and one row in tests/jobs/test_policy_table.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.jobs.contracts import ErrorCode
from shared.jobs.models import RetryPolicy

# Codes specific to one model: another allowed model may succeed where this one did not (a deployment that
# refuses an agent's output schema is one: another may support structured output).
MODEL_SPECIFIC = frozenset({ErrorCode.CONTENT_FILTERED, ErrorCode.MODEL_NOT_ALLOWED, ErrorCode.OUTPUT_SCHEMA_REFUSED})

Caller = Literal["step", "plan", "supervise", "executor"]
Action = Literal["stop_budget", "retry", "fall_back", "repair", "stop", "give_up_quietly", "ask_user"]


# Failures no later turn can get past: the job stops with the error instead of answering from nothing.
CANNOT_WORK = frozenset({ErrorCode.CONFIG_ERROR, ErrorCode.AUTH_FAILED, ErrorCode.MODEL_NOT_ALLOWED})


# Failures of a step that neither another try nor an edit of its input can fix (no sandbox on this host, a
# missing setting): the user is asked once, skip or abort, instead of being offered a retry that fails again.
ONLY_SKIP_OR_ABORT = frozenset({ErrorCode.CONFIG_ERROR})
ERROR_OPTIONS = ["retry", "skip", "edit", "abort"]


def error_options(code: str) -> list[str]:
    """What the user may answer about a step that failed for good with this code."""
    return ["skip", "abort"] if code in ONLY_SKIP_OR_ABORT else list(ERROR_OPTIONS)


@dataclass(frozen=True)
class Failure:
    """What failed: the executor's error code, whether it is transient, and the wait it asked for."""

    code: str
    retryable: bool
    retry_after_ms: int | None = None
    # The failed call returned the model's rejected output, so the model can be shown it and fix it.
    repairable: bool = False


@dataclass(frozen=True)
class Standing:
    """Where the call stands: tries on the current model, which model of how many, and who is calling."""

    tries_on_model: int
    model_index: int
    models: int
    uses_llm: bool
    caller: Caller
    repaired: bool = False


@dataclass(frozen=True)
class Decision:
    """What to do next; ``delay_ms`` only for a retry."""

    action: Action
    delay_ms: int = 0


def backoff_ms(failure: Failure, tries_on_model: int, policy: RetryPolicy) -> int:
    """Backoff doubling from ``first_retry_ms``: at least the server's ``retry_after_ms``, at most ``max_retry_ms``."""
    exponential: int = policy.first_retry_ms * (1 << tries_on_model)
    return min(policy.max_retry_ms, max(failure.retry_after_ms or 0, exponential))


def decide(failure: Failure, standing: Standing, policy: RetryPolicy) -> Decision:
    """The orchestrator's answer to a failed executor call."""
    if failure.code == ErrorCode.BUDGET_EXCEEDED:
        return Decision("stop_budget")
    if failure.retryable and standing.tries_on_model + 1 < policy.max_attempts_per_model:
        return Decision("retry", backoff_ms(failure, standing.tries_on_model, policy))
    may_switch = failure.retryable or failure.code in MODEL_SPECIFIC
    if may_switch and standing.uses_llm and standing.model_index + 1 < standing.models:
        return Decision("fall_back")
    if standing.caller == "plan":
        # An invalid plan gets one repair turn: the planner sees its reply and the problems found in it.
        if failure.code == ErrorCode.BAD_REQUEST and failure.repairable and not standing.repaired:
            return Decision("repair")
        # Out of automatic tries on a transient fault (a local server restarting, a cut stream): a person may
        # try again later or abort, as for any step; a plan the model got wrong is final.
        return Decision("ask_user" if failure.retryable else "stop")
    if standing.caller == "supervise":
        return Decision("give_up_quietly")  # a failed Supervisor never blocks the job: deterministic code goes on
    if standing.caller == "executor":
        # A turn the agent-mode Executor could not make: the answer is written from what the tools found,
        # unless nothing can work (configuration, credentials, a model the job may not use): then say so.
        return Decision("stop" if failure.code in CANNOT_WORK else "give_up_quietly")
    return Decision("ask_user")
