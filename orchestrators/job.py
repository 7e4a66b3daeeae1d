"""The AI job orchestration: plan, then run each step as an activity, with the policy in one place.

Deterministic by construction: no I/O, clock, randomness or environment reads. Time comes from
``context.current_utc_datetime``; everything the policy needs (retry limits, prices) was resolved by
the API into the orchestration input. The orchestrator owns every decision: retry with backoff
through durable timers, fall back across ``allowed_models``, stop before the budget would be
exceeded, and otherwise ask the user (retry, skip, edit or abort). Human waits race a durable timer.

Trust boundary: plan steps, Supervisor decisions and user edits are untrusted data. A step's input is
validated against its kind's typed model (only question/sql/query-like fields), here again even though
the plan executor checked it. What a SQL step may read (draft or run, and the exact statement a human
approved) is set by this code alone, in the execution context, after the checks that justify it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrators.agent import AgentLoop, agent_step
from orchestrators.fork import run_fork
from orchestrators.outcomes import JobStop
from orchestrators.plan import PlanRun
from orchestrators.quote_gate import gate as quote_gate
from orchestrators.run.core import RunCore
from orchestrators.run.record import Gen
from orchestrators.workflow import WorkflowWalk
from shared.jobs.models import JobResult

# How a workflow or team run walks its graph: a factory of walks, each with ``work()`` (a fork of one uses it too).
Walker = Callable[[RunCore], Any]


class JobRun:
    """One execution of the job orchestration: builds the run's core and hands it to the producer of its steps."""

    def __init__(self, context: Any, *, walker: Walker = WorkflowWalk) -> None:
        self.core = RunCore(context, agent_step=agent_step)
        self.walker = walker

    def run(self) -> Gen:
        """Plan, run every step, and return the JobResult."""
        self.core.log("planning: %s", self.core.job.request.question[:80])
        self.core.publish()
        try:
            if self.core.job.fork is not None:
                # A fork: the steps before the fork point are carried over, the rest run (orchestrators/fork.py).
                answer = yield from run_fork(self.core, PlanRun(self.core), self.walker)
            elif self.core.job.run is not None:
                # A workflow or team run: the graph replaces the plan (orchestrators/workflow.py).
                yield from quote_gate(
                    self.core
                )  # the run's quote, and approval.cost_over (orchestrators/quote_gate.py)
                answer = yield from self.walker(self.core).work()
            elif self.core.job.request.mode == "agent":
                self.core.attempts.hand_failures_to_executor()
                yield from quote_gate(self.core)
                answer = yield from AgentLoop(self.core).work()
            else:
                answer = yield from PlanRun(self.core).work()
        except JobStop as stop:
            return self.core.record.finish_failed(stop.info)
        self.core.record.complete()
        unsupported = answer.get("unsupported") if answer else None
        if isinstance(unsupported, str):
            self.core.record.note_unsupported(unsupported)
        self.core.publish()
        self.core.log("completed; %s tokens", self.core.state.usage.total_tokens)
        return JobResult(
            status="completed",
            answer=answer.get("answer") if answer else None,
            citations=answer.get("citations", []) if answer else [],
            unsupported=unsupported[:500] if isinstance(unsupported, str) else None,
            usage=self.core.state.usage,
            outputs=answer.get("outputs") if answer and self.core.job.run is not None else None,
        ).model_dump(mode="json")


def job_orchestrator_body(context: Any) -> Gen:
    """The orchestrator body as a plain generator (the decorated function only delegates to it)."""
    return (yield from JobRun(context).run())
