"""A fork point inside a parallel branch of a run: what is carried over around it (a pure function of the origin's
state, its definition's nodes and its branches' part results; ``shared/jobs/fork.py`` uses it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shared.jobs.models import JobState, StepState

PARALLEL_NODE = "parallel"


class BranchRefused(Exception):
    """Why a node inside a branch is no fork point: a stable code, a message, and the request field at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class BranchWindow(BaseModel):
    """A fork point inside a branch of a root parallel node: what is carried over around it."""

    parallel: str
    started_at: str
    branch: str
    others: set[str]  # the nodes of the parallel's other branches: carried over whole, with their parts
    own: set[str]  # the forked branch's nodes

    def carries(self, step: StepState, fork_started: str) -> bool:
        """Whether a step is carried over: it ended before the parallel started, it is another branch's, or it is
        a node of the forked branch that ended before the fork point started."""
        ended = step.ended_at or ""
        if step.id in self.own:
            return ended <= fork_started
        return step.id in self.others or ended <= self.started_at


def branch_window(
    state: JobState,
    nodes: dict[str, dict[str, Any]],
    parts: dict[str, dict[str, Any]],
    branch_of: dict[str, str],
    from_step: str,
) -> BranchWindow:
    """The root parallel node a fork point inside one of its branches ran under, and what of it is carried over.

    The parallel is read from the run's definition (a fan-out team's compiled ``fan_out``: the parallel step that
    was running when the fork point ran). A branch with a parallel node of its own is refused: its branches' nodes
    run in sub-orchestrations of that branch, which the fork cannot enter (fork at the outer parallel node).
    """
    entry = branch_of[from_step]
    at = next(s for s in state.steps if s.id == from_step)
    parallel = next(
        (n for n in nodes.values() if n.get("kind") == PARALLEL_NODE and entry in (n.get("branches") or [])), None
    )
    step = next(
        (
            s
            for s in state.steps
            if (s.id == parallel.get("id") if parallel else s.kind == PARALLEL_NODE)
            and s.started_at is not None
            and s.started_at <= (at.started_at or "")
            and (s.ended_at is None or (at.started_at or "") <= s.ended_at)
        ),
        None,
    )
    if step is None or step.started_at is None:
        raise BranchRefused("FORK_NOT_SUPPORTED", f"the parallel node {from_step!r} ran under is not recorded")
    if parallel is not None:
        branches = [str(b) for b in parallel.get("branches") or []]
    else:  # a compiled team: the branches that started while its parallel step ran
        starts = {s.id: s.started_at for s in state.steps}
        branches = [b for b in parts if (starts.get(b) or "") >= step.started_at]
    missing = [b for b in branches if b not in parts]
    if missing:
        raise BranchRefused("FORK_NOT_SUPPORTED", f"branches {missing} of {step.id!r} are not in the history")
    own = {n for n, b in branch_of.items() if b == entry}
    inner = [s.id for s in state.steps if s.id in own and s.kind == PARALLEL_NODE]
    if inner:
        raise BranchRefused(
            "INVALID_FORK_POINT",
            f"{from_step!r} runs in branch {entry!r}, which has parallel nodes {inner} of its own: fork at {step.id!r}",
            "from_step",
        )
    others = {n for n, b in branch_of.items() if b in branches and b != entry}
    return BranchWindow(parallel=step.id, started_at=step.started_at, branch=entry, others=others, own=own)
