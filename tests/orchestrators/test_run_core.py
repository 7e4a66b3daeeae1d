"""The run's core (orchestrators/run/), each collaborator on its own: what the producers may and may not do."""

from __future__ import annotations

from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.agent import agent_step
from orchestrators.job import JobRun
from orchestrators.outcomes import JobStop
from orchestrators.run.attempts import AttemptKey
from orchestrators.run.core import RunCore
from shared.jobs.contracts import Constraints, ExecutionContext, Usage
from shared.jobs.models import Budget

JOB = "j1"


def core(**request: Any) -> RunCore:
    payload = {"job_id": JOB, "request": {"question": "q", **request}}
    return RunCore(InlineContext(payload, lambda name, body: None, instance_id=JOB), agent_step=agent_step)


def test_an_attempt_key_is_made_in_one_place_and_names_the_task_and_the_call() -> None:
    run = core()
    key = run.attempts.key("t1", 1)
    assert key == AttemptKey(JOB, "t1", 1)
    assert (key.task_id, key.call_id) == (f"{JOB}:t1:1", "t1:1")
    # The payload of an attempt names its task by the same key: the agent loop's fan-out and the step agree.
    payload = run.attempts.executor_input("t1", "call_tool", {}, ExecutionContext(call_id=key.call_id), None, 1)
    assert payload.task_id == key.task_id
    run.attempts.hand_over(key, {"status": "succeeded"})
    assert run.attempts.key("t1", 1) in run.attempts.prefetched
    assert f"{JOB}:t1:1" not in run.attempts.prefetched  # a string both sides format is no key


def test_an_execution_context_passes_on_only_the_fields_its_caller_set() -> None:
    run = core()
    context = ExecutionContext(allowed_tools=["x.y"])
    made = run.attempts.executor_input("s1", "call_tool", {}, context, "m", 2).execution_context
    assert (made.job_id, made.step_id, made.attempt, made.model, made.allowed_tools) == (JOB, "s1", 2, "m", ["x.y"])
    # A field the caller did not set keeps what the orchestrator set, never the model's default over it.
    assert made.call_id is None and made.sql_mode == "run"


def test_the_step_outputs_are_read_only_to_the_producers() -> None:
    run = core()
    run.record.keep("s1", {"answer": "a"})
    assert dict(run.outputs) == {"s1": {"answer": "a"}}
    with pytest.raises(TypeError):
        run.outputs["s2"] = {}  # type: ignore[index]
    run.record.drop("s1")
    assert "s1" not in run.outputs


def test_an_agent_nodes_scoped_budget_counts_from_its_start_and_ends_with_it_even_on_a_stop() -> None:
    run = core()
    run.state.usage = Usage(total_tokens=100, estimated_cost=0.5)
    limits = Constraints(max_tokens=50)
    with pytest.raises(JobStop), run.budgets.scoped("agent 'a'", Budget(max_total_tokens=10), limits):
        assert run.budgets.constraints == limits
        run.state.usage = Usage(total_tokens=105, estimated_cost=0.5)
        assert run.budgets.budgets()[1][0:3:2] == ("agent 'a'", 5)
        run.budgets.check_budget("s1", uses_llm=True, model=None)  # 5 used + 50 reserved > 10: stops
    assert run.budgets.scoped_budget is None and run.budgets.step_constraints is None
    assert run.budgets.constraints == Constraints()


def test_the_skip_of_a_step_is_recorded_through_the_record_and_a_new_step_clears_it() -> None:
    run = core()
    run.record.skipped("the user rejected its SQL query", by_user=True)
    assert (run.record.skip_reason, run.record.skipped_by_user) == ("the user rejected its SQL query", True)
    run.record.begin_step()  # a tool call of the Executor: who chose the last skip is kept for the Supervisor
    assert (run.record.skip_reason, run.record.skipped_by_user) == (None, True)
    run.record.begin_step(by_user_too=True)  # a plan step
    assert run.record.skipped_by_user is False


def test_the_walk_of_a_run_is_injected_not_installed() -> None:
    seen: list[RunCore] = []

    class Walk:
        def __init__(self, run: RunCore) -> None:
            seen.append(run)

        def work(self) -> Any:
            return {"answer": "walked", "outputs": {"n": 1}}
            yield

    payload = {"job_id": JOB, "request": {"question": "q"}, "run": {"kind": "workflow", "id": "w", "version": 1}}
    ctx = InlineContext(payload, lambda name, body: None, instance_id=JOB)
    result = run_inline(lambda c: JobRun(c, walker=Walk).run(), ctx)
    assert (result["status"], result["answer"], result["outputs"]) == ("completed", "walked", {"n": 1})
    assert len(seen) == 1 and seen[0].job.job_id == JOB
