"""The current state's step events are stamped with the time of their change, not the step's first start.

Each case is a custom status and the history the status API returns with it (TaskScheduled events are folded
into their completion as ``ScheduledTime``; an attempt in flight is not in the history yet).
"""

from __future__ import annotations

from typing import Any

from api.events_derive import current_state
from shared.jobs.events import Cursor, StepEvent

NOW = "2026-01-01T09:00:00.000Z"
STARTED = "2026-01-01T00:00:01+00:00"


def _end(step: str, attempt: int, scheduled: str, ended: str, *, failed: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"status": "failed" if failed else "success", "result": {}, "usage": {}}
    if failed:
        result["error"] = {"code": "RATE_LIMITED", "message": "slow down"}
    return {
        "EventType": "TaskCompleted",
        "Timestamp": ended,
        "ScheduledTime": scheduled,
        "Input": {"task_id": f"job:{step}:{attempt}", "executor_type": "generate_response", "task": {}},
        "Result": result,
    }


START = {"EventType": "ExecutionStarted", "Timestamp": "2026-01-01T00:00:00.0000000Z"}
FAILED_1 = _end("answer", 1, "2026-01-01T00:00:01.1Z", "2026-01-01T00:00:02.5Z", failed=True)
TIMER_CREATED = {"EventType": "TimerCreated", "Timestamp": "2026-01-01T00:00:02.6Z", "FireAt": "2026-01-01T00:00:04Z"}
RETRY_FIRED = {"EventType": "TimerFired", "Timestamp": "2026-01-01T00:00:04.02Z", "FireAt": "2026-01-01T00:00:04Z"}


def _step(state: str, attempts: int) -> dict[str, Any]:
    return {"id": "answer", "kind": "generate_response", "state": state, "attempts": attempts, "started_at": STARTED}


def _shown(custom: dict[str, Any], history: list[dict[str, Any]]) -> StepEvent:
    steps = [e for e in current_state("Running", custom, None, NOW, history) if isinstance(e, StepEvent)]
    assert len(steps) == 1 and not steps[0].committed
    return steps[0]


def test_a_first_attempt_is_stamped_with_the_steps_start() -> None:
    shown = _shown({"status": "running", "steps": [_step("running", 1)]}, [START])
    assert (shown.state, shown.attempt, shown.at) == ("started", 1, "2026-01-01T00:00:01Z")


def test_a_retry_wait_starts_when_the_failed_attempt_ended_and_names_the_next_attempt() -> None:
    step = {**_step("retrying", 1), "retry_at": "2026-01-01T00:00:04+00:00", "next_attempt": 2}
    shown = _shown({"status": "running", "steps": [step]}, [START, FAILED_1, TIMER_CREATED])
    assert (shown.state, shown.attempt, shown.at, shown.retry_at) == (
        "retrying",
        2,
        "2026-01-01T00:00:02.5Z",
        "2026-01-01T00:00:04Z",
    )


def test_the_next_attempt_starts_when_its_backoff_timer_fired() -> None:
    history = [START, FAILED_1, TIMER_CREATED, RETRY_FIRED]
    shown = _shown({"status": "running", "steps": [_step("running", 2)]}, history)
    assert (shown.state, shown.attempt, shown.at) == ("started", 2, "2026-01-01T00:00:04.02Z")


def test_an_attempt_on_the_next_model_starts_when_the_last_one_failed() -> None:
    # A fall-back to the next model needs no timer: the attempt starts in the episode of the failure.
    shown = _shown({"status": "running", "steps": [_step("running", 2)]}, [START, FAILED_1])
    assert (shown.attempt, shown.at) == (2, "2026-01-01T00:00:02.5Z")


def test_a_retry_counts_attempts_over_every_model_not_the_current_models() -> None:
    # Attempts 1-2 on the first model failed, attempt 3 on the second failed: next is 4 (2nd on this model).
    step = {**_step("retrying", 3), "retry_at": "2026-01-01T00:01:00+00:00", "next_attempt": 2, "max_attempts": 3}
    assert _shown({"status": "running", "steps": [step]}, [START]).attempt == 4


def test_a_human_wait_is_stamped_when_it_was_asked_and_the_attempt_after_it_when_answered() -> None:
    asked = "2026-01-01T00:00:03+00:00"
    waiting = {
        "question_id": "answer-q1",
        "step_id": "answer",
        "kind": "error",
        "question": "Retry?",
        "options": ["retry", "skip"],
        "asked_at": asked,
        "expires_at": "2026-01-02T00:00:00+00:00",
    }
    step = {**_step("waiting", 1), "waiting_since": asked}
    shown = _shown({"status": "waiting_for_user", "steps": [step], "waiting": waiting}, [START, FAILED_1])
    assert (shown.state, shown.attempt, shown.at) == ("waiting", 1, "2026-01-01T00:00:03Z")
    answered = {"EventType": "EventRaised", "Timestamp": "2026-01-01T00:05:00.25Z", "Name": "answer:answer-q1"}
    other = {"EventType": "EventRaised", "Timestamp": "2026-01-01T00:06:00Z", "Name": "answer:policy-q2"}
    again = _shown({"status": "running", "steps": [_step("running", 2)]}, [START, FAILED_1, answered, other])
    assert (again.state, again.attempt, again.at) == ("started", 2, "2026-01-01T00:05:00.25Z")


def test_an_attempt_already_in_the_history_keeps_its_scheduled_time() -> None:
    # Agent mode runs the first attempts of a turn together: one may be back while its step still shows running.
    done = _end("answer", 1, "2026-01-01T00:00:01.2Z", "2026-01-01T00:00:02Z", failed=False)
    shown = _shown({"status": "running", "steps": [_step("running", 1)]}, [START, done, RETRY_FIRED])
    assert shown.at == "2026-01-01T00:00:01.2Z"


def test_times_in_different_precisions_compare_as_times() -> None:
    # Text order would put "01.5Z" before "01Z": the start and the failure are compared as times.
    failed = _end("answer", 1, "2026-01-01T00:00:00.9Z", "2026-01-01T00:00:01.5Z", failed=True)
    shown = _shown({"status": "running", "steps": [_step("running", 2)]}, [START, failed])
    assert shown.at == "2026-01-01T00:00:01.5Z"


class _Status:
    def __init__(self, history: list[dict[str, Any]], custom: dict[str, Any]) -> None:
        self.name = "job_orchestrator"
        self.historyEvents = history
        self._data = {"runtimeStatus": "Running", "customStatus": custom, "lastUpdatedTime": str(len(history))}

    def to_json(self) -> dict[str, Any]:
        return dict(self._data)


class _Client:
    """A durable client that answers the status the test sets."""

    def __init__(self, status: _Status) -> None:
        self.status = status

    async def get_status(self, job_id: str, **_: Any) -> _Status:
        return self.status


def test_a_state_published_while_the_subscriber_was_sending_is_not_skipped() -> None:
    import asyncio

    from api.events import FEEDS, stream
    from shared.jobs.events import KEEP_ALIVE

    lookup = {"id": "docs", "kind": "consult_rag", "started_at": STARTED}
    running = _Status([START], {"status": "running", "steps": [{**lookup, "state": "running", "attempts": 1}]})
    failed = {**_end("docs", 1, "2026-01-01T00:00:01.1Z", "2026-01-01T00:00:02.5Z", failed=True)}
    failed["Input"] = {**failed["Input"], "executor_type": "consult_rag"}
    retry = {**lookup, "state": "retrying", "attempts": 1, "retry_at": "2026-01-01T00:00:04+00:00"}
    retrying = _Status([START, failed], {"status": "running", "steps": [retry]})

    async def scenario() -> tuple[str, str]:
        client = _Client(running)
        body = stream("job-wake", client, Cursor(), poll_s=0.001, keepalive_s=0.2, max_s=30)
        first = await body.__anext__()
        # The generator waits at its yield (its client is still taking ``first``) while the job moves on.
        client.status = retrying
        feed = FEEDS.by_job["job-wake"]
        while "retrying" not in str(feed.snapshot.state):
            await feed.changed(feed.snapshot, 1.0)
        after = await body.__anext__()
        await body.aclose()
        return first, after

    first, after = asyncio.run(scenario())
    assert '"state":"started"' in first
    assert after != KEEP_ALIVE and '"state":"retrying"' in after and '"state":"failed"' in after
