"""The core of one run, as the producers of steps are given it: its collaborators, built together.

A producer (a plan, the Executor loop, a workflow graph, a team, a fork) reads the run through ``job``, ``state``
and ``outputs``, runs a step through ``steps.run_step``, calls an executor through ``attempts.execute``, asks a
person through ``questions.ask`` and checks limits through ``budgets``; it writes no field of the core, only calls
these (the state changes through ``record``'s methods: ``show_plan``, ``add_step``, ``set_quote``...). What an
agent step runs (the agent loop) is given to the core when it is built, so the core imports no producer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrators.run.approvals import SqlApprovals
from orchestrators.run.attempts import Attempts
from orchestrators.run.budgets import Budgets
from orchestrators.run.questions import Questions
from orchestrators.run.record import RunRecord, StepOutput
from orchestrators.run.steps import AgentStep, Steps
from shared.jobs.models import JobInput, JobState


class RunCore:
    """One run's collaborators: record, budgets, questions, attempts, approvals and steps."""

    __slots__ = ("approvals", "attempts", "budgets", "questions", "record", "steps")

    def __init__(self, context: Any, *, agent_step: AgentStep, part_of_run: bool = False) -> None:
        self.record = RunRecord(context, part_of_run=part_of_run)
        self.budgets = Budgets(self.record)
        self.questions = Questions(self.record)
        self.attempts = Attempts(self.record, self.budgets, self.questions)
        self.approvals = SqlApprovals(self.record, self.attempts, self.questions)
        self.steps = Steps(self, agent_step)

    # --- the record, as the producers of steps read it -------------------------------------------

    @property
    def ctx(self) -> Any:
        """The orchestration context."""
        return self.record.ctx

    @property
    def job(self) -> JobInput:
        """The job's input."""
        return self.record.job

    @property
    def state(self) -> JobState:
        """The job's state (what the view shows)."""
        return self.record.state

    @property
    def outputs(self) -> Mapping[str, StepOutput]:
        """The outputs of the steps that succeeded (read-only: ``record.keep`` adds one)."""
        return self.record.outputs

    def log(self, message: str, *args: Any) -> None:
        """Log once, not on replay."""
        self.record.log(message, *args)

    def publish(self) -> None:
        """Publish the state."""
        self.record.publish()

    def now_iso(self) -> str:
        """Orchestration time, replay-safe."""
        return self.record.now_iso()
