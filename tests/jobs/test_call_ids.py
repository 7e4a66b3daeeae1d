"""The call id the orchestrator writes into every step call's execution context (driven inline): the same for
every attempt of one call (policy retries), new for a new call (another tool call, a loop's next iteration).
Tools send "<job id>:<call id>" as their idempotency key. A failure marked final is not retried."""

from __future__ import annotations

from typing import Any

from shared.jobs.contracts import ErrorCode, ExecutorOutput
from tests.jobs.test_agent_mode import DONE, job, turn
from tests.jobs.test_policy_inline import ANSWER_OK, Script, fail, ok
from tests.runs.runkit import Activities, defs, start
from tests.runs.shapes import TOOL, change

HTTP_TOOL = "http.book"


def contexts(script: Script, name: str) -> list[dict[str, Any]]:
    return [payload["execution_context"] for n, payload in script.calls if n == name]


def final_failure() -> dict[str, Any]:
    out = ExecutorOutput.failure(ErrorCode.UPSTREAM_ERROR, "HTTP 500", final=True)
    return out.model_dump(mode="json")


def test_every_attempt_of_one_tool_call_carries_one_call_id() -> None:
    booked = {"success": True, "data": {"booked": True}}
    script = Script(
        agent_turn=[turn((HTTP_TOOL, {}), (HTTP_TOOL, {})), DONE],
        # The first attempts of one turn start together; the first call then fails twice before it succeeds.
        call_tool=[fail("UPSTREAM_ERROR"), ok(booked), fail("TRANSIENT"), ok(booked)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, _ = job(script, tools=[HTTP_TOOL])
    assert result["status"] == "completed"
    seen = [(c["step_id"], c["attempt"], c["call_id"]) for c in contexts(script, "call_tool")]
    assert sorted(seen) == [("t1", 1, "t1:1"), ("t1", 2, "t1:1"), ("t1", 3, "t1:1"), ("t2", 1, "t2:1")]


def test_a_failure_marked_final_is_not_retried() -> None:
    script = Script(
        agent_turn=[turn((HTTP_TOOL, {})), DONE],
        call_tool=[final_failure()],
        generate_response=[ok(ANSWER_OK)],
    )
    result, _ = job(script, tools=[HTTP_TOOL])
    assert result["status"] == "completed"
    assert [c["attempt"] for c in contexts(script, "call_tool")] == [1]
    # Without the mark the same code is retried up to the policy's attempts.
    retried = Script(
        agent_turn=[turn((HTTP_TOOL, {})), DONE],
        call_tool=[fail("UPSTREAM_ERROR")] * 3,
        generate_response=[ok(ANSWER_OK)],
    )
    job(retried, tools=[HTTP_TOOL])
    assert [c["attempt"] for c in contexts(retried, "call_tool")] == [1, 2, 3]


def test_each_iteration_of_a_workflow_loop_is_a_new_call() -> None:
    looped = {
        "id": "loop",
        "name": "Loop",
        "nodes": [
            {"id": "again", "kind": "loop", "body": ["grow"], "max_iterations": 3},
            change("grow", {"value": 80}),
        ],
        "outputs": {"iterations": {"from": "again.iterations"}},
    }
    acts = Activities(defs(looped))
    result, _ = start(acts, "workflow", "loop", tools=[TOOL])
    assert result["outputs"] == {"iterations": 3}
    ids = [call["execution_context"]["call_id"] for call in acts.named("call_tool")]
    assert ids == ["grow:1", "grow:2", "grow:3"]
