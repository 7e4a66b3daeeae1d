"""The quote of a workflow or team run before it starts, from its graph and bounds (shared/jobs/quote.py).

Pure: saved definitions are read only through the ``Resolver`` it is given (the API's, at start). Each node's
work, as the orchestrator runs it (orchestrators/workflow.py):

- a step node: its kind's calls (a SQL step under an approval drafts, then runs); a tool node: one tool call;
- an agent node: the agent's loop (``limits.max_turns`` turns, ``limits.max_tool_calls`` tool calls) and its
  answer, each call under the agent's own ``max_tokens`` and ``timeout_ms``;
- a sub-workflow node: its workflow's nodes; a node in a loop: ``max_iterations`` times at the high end (nested
  loops multiply), once at the low end; human, condition, parallel, join and loop nodes make no call;
- a team: each member once (sequential), each member and the aggregator (parallel), or ``max_rounds`` rounds of
  the supervisor and the heaviest member (supervisor).

The low end counts every node once: a condition's branch not taken, or a loop that ends early, is not
subtracted (said in the quote's ``assumptions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shared.definitions.models import (
    Agent,
    AgentNode,
    LoopNode,
    StepNode,
    Supervisor,
    Team,
    ToolNode,
    Workflow,
    WorkflowNode,
)
from shared.executors import get_executor, kinds_where
from shared.executors import uses_llm as executor_uses_llm
from shared.jobs.models import JobRequest, RetryPolicy
from shared.jobs.quote import Item, Quote, QuoteBounds, agent_items, plan_items, quote

if TYPE_CHECKING:
    from shared.definitions.validate import Resolver

_MAX_WALK = 16  # sub-workflows deeper than this are refused at start anyway
SEARCH_KIND = "consult_rag"
RUN_LOW = "a workflow's low end counts every node once; a condition's branch not taken can take a run below it"
NOT_BOUNDED = "a person's 'retry' after a step failed for good is not bounded: each one can add a step's high end"


def job_bounds(request: JobRequest, policy: RetryPolicy) -> QuoteBounds:
    """The bounds a job's quote multiplies by: its constraints and the app's retry policy."""
    constraints = request.constraints
    prices = policy.quote_prices
    return QuoteBounds(
        # No allowed_models: the app's default model, the first priced (a run's agents may add their own after it).
        models=list(constraints.allowed_models) or (list(prices.models)[:1] if prices else []),
        attempts_per_model=policy.max_attempts_per_model,
        max_tokens=constraints.max_tokens,
        timeout_s=constraints.timeout_ms / 1000,
    )


def step_items(steps: list[tuple[str, str]], request: JobRequest) -> list[Item]:
    """The work items of ``(id, kind)`` steps under the request's approvals."""
    return plan_items(
        steps,
        executor_uses_llm,
        sql_kinds=kinds_where(lambda spec: spec.runs_sql),
        code_kinds=kinds_where(lambda spec: spec.runs_code),
        search_kinds=[SEARCH_KIND] if get_executor(SEARCH_KIND) else [],
        sql_approval=request.approval.sql != "never",
        python_approval=request.approval.python,
    )


def agent_models(agent: Agent, allowed: list[str]) -> tuple[str, ...]:
    """The models an agent's calls may use: its own cut to the job's (as the orchestrator); empty: the job's."""
    wanted = [m for m in [agent.model.model, *agent.model.fallbacks] if m]
    return tuple(m for m in wanted if not allowed or m in allowed)


def agent_work(agent: Agent, step_id: str, allowed: list[str]) -> list[Item]:
    """One run of an agent (one entry, ``step_id``): its loop and its answer, under its own per-call limits."""
    limits, constraints = agent.limits, agent.constraints
    timeout_s, models = constraints.timeout_ms / 1000, agent_models(agent, allowed)
    items = agent_items(
        limits.max_turns,
        limits.max_tool_calls,
        step_id=step_id,
        max_tokens=constraints.max_tokens,
        timeout_s=timeout_s,
        models=models,
    )
    answer = sorted(kinds_where(lambda spec: spec.writes_answer))[:1]
    items += [
        Item(step_id, kind, (1, 1), (1, 1), max_tokens=constraints.max_tokens, timeout_s=timeout_s, models=models)
        for kind in answer
    ]
    return items


class _Walk:
    """The items of one workflow's nodes, sub-workflows through the resolver."""

    def __init__(self, resolver: Resolver, request: JobRequest) -> None:
        self.resolver = resolver
        self.request = request

    def workflow(self, wf: Workflow, prefix: str, times: int, depth: int) -> list[Item]:
        loop_of: dict[str, LoopNode] = {}
        for node in wf.nodes:
            if isinstance(node, LoopNode):
                for member in node.body:
                    loop_of.setdefault(member, node)
        items: list[Item] = []
        for node in wf.nodes:
            repeat = times * _iterations(node.id, loop_of)
            items += [_times(item, repeat) for item in self.node(node, f"{prefix}{node.id}", repeat, depth)]
        return items

    def node(self, node: Any, path: str, times: int, depth: int) -> list[Item]:
        if isinstance(node, StepNode):
            return step_items([(path, node.step)], self.request)
        if isinstance(node, ToolNode):
            return [Item(path, "call_tool", (1, 1), tool=node.tool)]
        if isinstance(node, AgentNode):
            agent = self.resolver.find("agent", node.agent, node.version)
            allowed = self.request.constraints.allowed_models
            return agent_work(agent, path, allowed) if isinstance(agent, Agent) else []
        if isinstance(node, WorkflowNode) and depth < _MAX_WALK:
            sub = self.resolver.find("workflow", node.workflow, node.version)
            if isinstance(sub, Workflow):
                # The sub-workflow's items are multiplied by its own loops here, and by this node's by the caller.
                return self.workflow(sub, f"{path}/", 1, depth + 1)
        return []


def _iterations(node_id: str, loop_of: dict[str, LoopNode]) -> int:
    count, seen, loop = 1, {node_id}, loop_of.get(node_id)
    while loop is not None and loop.id not in seen:
        seen.add(loop.id)
        count *= loop.max_iterations
        loop = loop_of.get(loop.id)
    return count


def _times(item: Item, repeat: int) -> Item:
    """An item run up to ``repeat`` times (a loop's body): once at the low end."""
    if repeat == 1:
        return item
    return Item(
        item.step_id,
        item.kind,
        (item.calls[0], item.calls[1] * repeat),
        (item.model_calls[0], item.model_calls[1] * repeat),
        tool=item.tool,
        search=item.search,
        sql=item.sql,
        sandbox=item.sandbox,
        retried=item.retried,
        max_tokens=item.max_tokens,
        timeout_s=item.timeout_s,
    )


def team_items(team: Team, resolver: Resolver, allowed: list[str]) -> list[Item]:
    """A team's work by its strategy."""
    agents = {a: resolver.find("agent", a, None) for a in team.agents}
    members = {a: found for a, found in agents.items() if isinstance(found, Agent)}
    strategy = team.strategy
    items: list[Item] = []
    if isinstance(strategy, Supervisor):
        supervisor = resolver.find("agent", strategy.supervisor, None)
        if not members:
            return items
        heaviest = max(members.values(), key=lambda a: (a.limits.max_turns + a.limits.max_tool_calls, a.id))
        rounds = strategy.max_rounds
        boss = agent_work(supervisor, f"supervisor:{supervisor.id}", allowed) if isinstance(supervisor, Agent) else []
        work = boss + agent_work(heaviest, f"member:{heaviest.id}", allowed)
        return [_times(item, rounds) for item in work]
    for agent_id, agent in members.items():
        items += agent_work(agent, agent_id, allowed)
    aggregator = getattr(strategy, "aggregator", None)
    if aggregator:
        found = resolver.find("agent", aggregator, None)
        if isinstance(found, Agent):
            items += agent_work(found, f"aggregator:{found.id}", allowed)
    return items


def run_quote(
    resolver: Resolver, definition: Workflow | Team, request: JobRequest, policy: RetryPolicy
) -> Quote | None:
    """The quote of a run of ``definition`` (None without quote prices)."""
    prices = policy.quote_prices
    if prices is None:
        return None
    if isinstance(definition, Team):
        items = team_items(definition, resolver, request.constraints.allowed_models)
    else:
        items = _Walk(resolver, request).workflow(definition, "", 1, 0)
    return quote(items, job_bounds(request, policy), prices, assumptions=[RUN_LOW, NOT_BOUNDED])
