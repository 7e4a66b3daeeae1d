"""A workflow's agent node: the pinned agent's Executor loop under its own limits, then its answer over what it found.

The agent definition is data: its tools are cut to the run's, its models to the job's, and its per-call limits and
budget hold while the node runs (``Budgets.scoped``), on top of the run's. Only a JSON object that passes the
agent's output schema becomes a structured output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrators.agent import AgentLoop, AgentProfile
from orchestrators.outcomes import JobStop, structured
from orchestrators.run.record import Gen
from shared.definitions.models import Agent
from shared.executors import input_for_text, kinds_where, lookup_kinds
from shared.jobs.contracts import Constraints, ExecutionContext
from shared.jobs.models import StepState
from shared.jobs.plan import PlanStep

if TYPE_CHECKING:
    from orchestrators.workflow import WorkflowWalk

MAX_PROMPT = 2000  # the Executor's question (AgentTurnTask.question)


class AgentNodes:
    """The agent nodes (and team members) of one walk."""

    def __init__(self, walk: WorkflowWalk) -> None:
        self.walk = walk

    def run_agent(self, step: StepState, agent_id: str, version: int | None, prompt: str) -> Gen:
        """An agent: its Executor loop (its instructions, tools, bounds, models), then its answer over what it found."""
        pinned = self.walk.pinned("agent", agent_id, version)
        agent = yield from self.walk.load("agent", agent_id, pinned)
        assert isinstance(agent, Agent)
        step.tool_input = f"{agent_id} v{pinned}"  # which agent ran: the view and /api/logs show it
        profile = self.profile(agent, step.id)
        limits = agent.constraints
        # The agent's per-call limits; which models may run stays the job's (checked again by every executor).
        constraints = Constraints(
            max_tokens=limits.max_tokens,
            temperature=limits.temperature,
            timeout_ms=limits.timeout_ms,
            allowed_models=list(self.walk.run.job.request.constraints.allowed_models),
        )
        # The agent's own budget counts what this node uses, on top of the run's budget (checked too).
        with self.walk.run.budgets.scoped(f"agent {agent_id!r}", limits.budget, constraints):
            return (yield from self.agent_work(agent, step, prompt, profile))

    def agent_work(self, agent: Agent, step: StepState, prompt: str, profile: AgentProfile) -> Gen:
        """The agent's loop and its answer, under its limits."""
        found = yield from AgentLoop(self.walk.run, prompt[:MAX_PROMPT] or agent.name, step, profile).work_step()
        kind = sorted(kinds_where(lambda spec: spec.writes_answer))[0]
        self.walk.run.record.keep(step.id, found)  # the sources of its answer are its own lookups
        spec = PlanStep(
            id=step.id, kind=kind, title=step.title or kind, input=input_for_text(kind, prompt or agent.name)
        )
        spec.depends_on = [step.id]
        extra = ExecutionContext(sources=self.walk.run.steps.sources_for(spec), step_notes=[])
        if agent.output_schema is not None:
            # The answer writer is asked for an object of this shape.
            extra = extra.model_copy(update={"output_schema": agent.output_schema})
        out = yield from self.walk.run.attempts.execute(step, kind, dict(spec.input), extra, models=profile.models)
        answer = (out.result or {}) if out is not None else {}
        text = str(answer.get("answer") or "")
        output = {"text": text, "citations": answer.get("citations", []), "tool_calls": found["tool_calls"]}
        if agent.output_schema is not None:
            # The model's text is untrusted: only a JSON object that passes the agent's schema becomes its output.
            output = {**output, **structured(text, agent.output_schema, step.id)}
        return output

    def profile(self, agent: Agent, node_id: str) -> AgentProfile:
        """What the agent may use in this run: its tools cut to the run's, its models cut to the job's."""
        tools = [t for t in agent.tools if t in self.walk.spec.tools]
        wanted = [m for m in [agent.model.model, *agent.model.fallbacks] if m]
        allowed = self.walk.run.job.request.constraints.allowed_models
        models: list[str | None] = [m for m in wanted if not allowed or m in allowed]
        if wanted and not models:
            raise JobStop("MODEL_NOT_ALLOWED", f"agent {agent.id!r}: none of {wanted} is in {allowed}", node_id)
        lookups = [t for t in agent.tools if t in lookup_kinds()]
        return AgentProfile(
            instructions=agent.instructions, tools=tools, limits=agent.limits, models=models or None, lookups=lookups
        )
