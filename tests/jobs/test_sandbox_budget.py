"""budget.max_sandbox_seconds counts every run of code, failed and timed-out ones too, and is checked before every
attempt (a retry a person asked for included), each attempt getting only the seconds left (inline, scripted)."""

from __future__ import annotations

from typing import Any

from shared.jobs.contracts import ErrorCode, ExecutorOutput
from tests.security.test_python_policy import GROWTH, Harness, plan

RETRY = {"answer": "retry"}


def timed_out(wall_ms: int) -> dict[str, Any]:
    """A run_python output whose code ran into the wall time limit (the executor keeps the sandbox time)."""
    result: dict[str, Any] = {
        "stdout": "",
        "result": None,
        "files": [],
        "sandbox": {"provider": "local", "status": "timeout", "wall_ms": wall_ms, "cpu_ms": wall_ms},
    }
    return ExecutorOutput.failure(
        ErrorCode.TOOL_ERROR, "the code did not finish (timeout): wall time limit of 3 s exceeded", result=result
    ).model_dump(mode="json")


def test_a_timed_out_run_spends_the_budget_and_a_retry_stops_with_budget_exceeded() -> None:
    h = Harness(plan(GROWTH), [timed_out(3004), timed_out(3004)], answers=[RETRY, RETRY])
    result = h.run(tools=["python.run"], constraints={"budget": {"max_sandbox_seconds": 3}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED", result
    message = result["error"]["message"]
    assert "3.004 s of sandbox time (failed and timed-out runs included), its budget is 3 s" in message
    assert len(h.runs()) == 1  # the person's retry never ran the endless loop again
    assert [q["kind"] for q in h.questions] == ["error"]


def test_each_attempt_gets_only_the_seconds_left() -> None:
    h = Harness(plan(GROWTH), [timed_out(2000), timed_out(1000), timed_out(1)], answers=[RETRY, RETRY, RETRY])
    result = h.run(tools=["python.run"], constraints={"budget": {"max_sandbox_seconds": 3}})
    assert result["error"]["code"] == "BUDGET_EXCEEDED", result
    assert [r["execution_context"]["sandbox_seconds_left"] for r in h.runs()] == [3, 1]
