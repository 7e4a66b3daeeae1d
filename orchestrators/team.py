"""Teams: a sequential or fan-out team compiled to a workflow, and a supervisor team's rounds.

A supervisor's choice is untrusted text: only a member id (or "finish") is taken from it (``route``); each round is
a step of the run, through the walk's agent machinery and its run limits.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from orchestrators.graph import MAX_TEMPLATE_VALUE, short
from orchestrators.outcomes import JobStop
from orchestrators.run.record import Gen
from shared.definitions.models import (
    AgentNode,
    FanOut,
    InputSpec,
    JoinNode,
    ParallelNode,
    Ref,
    Supervisor,
    Team,
    Template,
    Workflow,
)
from shared.jobs.models import StepState
from shared.jobs.runs import TEAM_INPUTS as TEAM_SPEC

if TYPE_CHECKING:
    from orchestrators.workflow import WorkflowWalk

FINISH = "finish"
TEAM_INPUTS = {name: InputSpec.model_validate(spec) for name, spec in TEAM_SPEC.items()}


class TeamRounds:
    """A supervisor team's rounds on a walk: the supervisor, then the member it chose, until it finishes.

    A fork (orchestrators/fork.py) gives the rounds before its fork point as ``carried`` (each step with the output
    the origin recorded): those rounds are replayed from their text (no activity runs), so the supervisor's choices
    and the prompts after them are the origin's; the fork point's round takes the fork's prompt edit, if any.
    """

    def __init__(
        self,
        walk: WorkflowWalk,
        team: Team,
        carried: dict[str, tuple[StepState, dict[str, Any]]] | None = None,
        edit: tuple[str, str] | None = None,
    ) -> None:
        self.walk = walk
        self.team = team
        self.carried = dict(carried or {})
        self.edit = edit  # (step id, prompt): a fork's new prompt for its fork point's round

    def work(self) -> Gen:
        """A supervisor agent routes the task to one member at a time, for at most ``max_rounds`` rounds.

        Its choice is untrusted text: only a member id (or "finish") is taken from it; anything else ends.
        """
        team: Team = self.team
        strategy = team.strategy
        assert isinstance(strategy, Supervisor)
        task = str(self.walk.spec.inputs.get("task", ""))
        self.walk.run.record.start_running()
        done: list[tuple[str, str]] = []
        last = ""
        for round_ in range(1, strategy.max_rounds + 1):
            prompt = _supervisor_prompt(task, team.agents, done)
            said = yield from self.team_step(f"supervisor_{round_}", "supervisor", strategy.supervisor, prompt)
            choice = route(said, team.agents)
            if choice is None:
                last = last or said
                break
            member_prompt = f"{task}\n\nThe supervisor asks: {said[:MAX_TEMPLATE_VALUE]}"
            last = yield from self.team_step(f"r{round_}_{_node_id(choice)}"[:32], "agent", choice, member_prompt)
            done.append((choice, last))
        return {"answer": last, "citations": [], "outputs": {"answer": last, "rounds": len(done)}}

    def team_step(self, step_id: str, role: str, agent_id: str, prompt: str) -> Gen:
        """One agent's turn in a supervisor team, as its own step; its text."""
        run = self.walk.run
        if step_id in self.carried:
            return self.carried_step(step_id)
        if self.carried:
            # A round the origin did not reach this way: the carried rounds must all come before the fork point.
            raise JobStop("FORK_NOT_SUPPORTED", f"round {step_id!r} is not the origin's: {sorted(self.carried)} left")
        if self.edit is not None and self.edit[0] == step_id:
            prompt = self.edit[1]
        self.walk.limits.count_node(step_id)
        step = StepState(id=step_id, kind="agent", title=f"{role}: {agent_id}"[:200], state="running")
        step.started_at = run.now_iso()
        run.record.add_step(step)
        run.publish()
        try:
            out = yield from self.walk.agents.run_agent(step, agent_id, None, prompt)
        except JobStop as stop:
            stop.info.step_id = stop.info.step_id or step_id
            raise
        step.state, step.ended_at = "succeeded", run.now_iso()
        run.record.keep(step_id, out)
        step.tool_output = short(out["text"])
        run.publish()
        return str(out["text"])

    def carried_step(self, step_id: str) -> str:
        """A round carried over from the origin: its step as it ran there, its output kept; its text."""
        run = self.walk.run
        step, output = self.carried.pop(step_id)
        run.record.add_step(step, current=False)
        run.record.keep(step_id, output)
        return str(output.get("text") or "")


def _node_id(agent_id: str, index: int | None = None) -> str:
    base = agent_id.replace("-", "_")
    return (f"m{index}_{base}" if index is not None else base)[:32]


def compile_team(team: Team) -> Workflow:
    """A sequential or fan-out team as a workflow: each member an agent node, the task its one input."""
    task = "{input.task}"
    members = [_node_id(agent, i) for i, agent in enumerate(team.agents, 1)]
    nodes: list[Any] = []
    strategy = team.strategy
    if isinstance(strategy, FanOut) and len(members) > 1:
        nodes.append(ParallelNode(id="fan_out", kind="parallel", branches=members))
        for node_id, agent in zip(members, team.agents, strict=True):
            nodes.append(AgentNode(id=node_id, kind="agent", agent=agent, input={"prompt": Template(template=task)}))
        nodes.append(JoinNode(id="join", kind="join", after=members, wait="all", on_failure="continue"))
        aggregate = f"{task}\n\nWhat each member found:\n{{join.results}}"
        nodes.append(
            AgentNode(
                id="aggregate",
                kind="agent",
                agent=strategy.aggregator,
                after=["join"],
                input={"prompt": Template(template=aggregate)},
            )
        )
        last = "aggregate"
    else:
        previous: str | None = None
        for node_id, agent in zip(members, team.agents, strict=True):
            prompt = task if previous is None else f"{task}\n\nThe previous member's output:\n{{{previous}.text}}"
            nodes.append(
                AgentNode(
                    id=node_id,
                    kind="agent",
                    agent=agent,
                    after=[previous] if previous else [],
                    input={"prompt": Template(template=prompt)},
                )
            )
            previous = node_id
        last = previous or members[0]
    return Workflow.model_validate(
        {
            "id": team.id,
            "name": team.name,
            "inputs": TEAM_INPUTS,
            "nodes": nodes,
            "outputs": {"answer": Ref.model_validate({"from": f"{last}.text"})},
        }
    )


def route(said: str, members: list[str]) -> str | None:
    """The member a supervisor chose: the first member id (or "finish") among its words; None ends the rounds."""
    words: list[str] = re.findall(r"[a-z][a-z0-9-]*", said.lower())
    for word in words:
        if word == FINISH:
            return None
        if word in members:
            return word
    return None


def _supervisor_prompt(task: str, members: list[str], done: list[tuple[str, str]]) -> str:
    worked = "\n".join(f"- {member}: {text[:300]}" for member, text in done[-6:]) or "(nobody yet)"
    return (
        f"Task: {task}\nMembers: {', '.join(members)}\nDone so far:\n{worked}\n"
        "Reply with the id of the member who works next, or FINISH when the task is done."
    )
