"""A run of a user-defined workflow or team: what the API pins when it starts one (the orchestration input).

The run names its definition by kind, id and version, never "latest": the API resolved every version
when it accepted the run (``pins``), so editing a definition never changes a run in flight. The graph
itself is not here: the orchestrator loads each pinned definition through the ``load_definition``
activity, whose result Durable records, so a replay sees the very same definition and the input stays
small whatever the size of the definition (up to 256 KB).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.contracts import Usage

RunKind = Literal["workflow", "team"]
# The orchestrator of a part of a run (a parallel branch, a sub-workflow); never listed as a job.
PART_ORCHESTRATOR = "workflow_part"
LOAD_DEFINITION = "load_definition"
# The activity a part calls to tell the root run of its questions, and the root's event for that news
# ("part-news:<n>", one name per wait on parts, so a late report never reaches a later wait).
REPORT_PART = "report_part"
PART_NEWS_EVENT = "part-news"
# A team's one input (as an InputSpec of the definitions): the task its members work on.
TEAM_INPUTS: dict[str, dict[str, Any]] = {"task": {"type": "string", "description": "What the team works on"}}
# The code a run ends with when it reaches one of its limits (``RunLimits``); ErrorInfo.limit names which.
RUN_LIMIT_EXCEEDED = "RUN_LIMIT_EXCEEDED"


class RunLimits(BaseModel):
    """A run's total-work budget, set by the API at start (app settings, lowered per run) and never by a definition.

    The root run holds the run's limits; a part (a parallel branch, a sub-workflow) gets its share from its
    parent (``share``) and hands back what it used (``PartResult``), so the counts hold across the whole tree.
    """

    model_config = ConfigDict(extra="forbid")

    # Node executions in all (a loop's body counts once per iteration, a sub-workflow's nodes count too).
    max_node_runs: int = Field(default=1000, ge=1, le=100_000)
    # Sub-orchestrations (parallel branches, sub-workflows) alive at once, below this one.
    max_parts_alive: int = Field(default=64, ge=0, le=10_000)
    # Branches one parallel node may start.
    max_parallel_width: int = Field(default=16, ge=1, le=16)
    # How deep sub-orchestrations nest below this one (a branch or a sub-workflow is one level).
    max_depth: int = Field(default=8, ge=0, le=32)
    # Tool calls in all: tool nodes and an agent's family tool calls (HTTP, MCP, functions) and run_python runs,
    # every attempt. A priced tool (TOOL_PRICES) counts into the estimated cost too.
    max_tool_calls: int = Field(default=500, ge=0, le=100_000)


# What each limit counts, as the job view says it.
LIMIT_TEXT: dict[str, str] = {
    "max_node_runs": "node executions",
    "max_parts_alive": "sub-orchestrations alive at once",
    "max_parallel_width": "branches of one parallel node",
    "max_depth": "levels of nested sub-orchestrations",
    "max_tool_calls": "tool calls",
}


class BranchFork(BaseModel):
    """A fork at a node inside this branch: the branch's nodes that ended before it, carried over from the origin's
    branch (their steps as they ran there, their outputs as the walk holds them), and the fork point's input edit."""

    model_config = ConfigDict(extra="forbid")

    at: str = Field(min_length=1, max_length=32)
    steps: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    outputs: dict[str, Any] = Field(default_factory=dict)
    edit: dict[str, Any] | None = None


class RunPart(BaseModel):
    """A part of a run executed as a sub-orchestration: one parallel branch of the workflow (its entry node)."""

    model_config = ConfigDict(extra="forbid")

    entry: str = Field(min_length=1, max_length=32)
    # Outputs of the nodes that ran before the fan-out, which the branch's mappings may read.
    seed: dict[str, Any] = Field(default_factory=dict)
    # A fork whose fork point is a node of this branch (None: the branch runs from its entry).
    fork: BranchFork | None = None


class RunReport(BaseModel):
    """Where a part of a run reports its questions: the root run's instance and the event it waits for."""

    model_config = ConfigDict(extra="forbid")

    instance: str = Field(min_length=1, max_length=256)
    event: str = Field(min_length=1, max_length=64)
    # The root's step a question belongs to when the asking step is not one of the root's own nodes (inside
    # a sub-workflow: the root's workflow node that started it); None in the root's own branches.
    anchor: str | None = Field(default=None, max_length=32)


class RunSpec(BaseModel):
    """The definition a run executes, pinned, and the typed inputs the API validated against its InputSpecs."""

    model_config = ConfigDict(extra="forbid")

    kind: RunKind
    id: str = Field(min_length=1, max_length=63)
    version: int = Field(ge=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    # "agent/<id>" / "workflow/<id>" → the version a reference without a version resolved to at start.
    pins: dict[str, int] = Field(default_factory=dict)
    # Every definition the run may load ("kind/id"): what delete checks against runs in flight.
    uses: list[str] = Field(default_factory=list, max_length=256)
    # Family tools named by the run's definitions that this app configures (checked by the API at start):
    # a definition never widens what a run may call beyond these.
    tools: list[str] = Field(default_factory=list, max_length=64)
    part: RunPart | None = None
    # A part (and the parts it starts) reports its questions here, so the root's job view shows them and the
    # job API answers them. A part started before parts could ask has none: its questions fail it.
    report_to: RunReport | None = None
    # The run's limits (a part: its share of its parent's). None: a run started before runs had limits, which
    # runs on as it began (jobs in flight keep their schedule).
    limits: RunLimits | None = None


class PartResult(BaseModel):
    """What a part (sub-orchestration) hands back: how it ended, its node outputs and its steps."""

    status: Literal["completed", "failed"]
    outputs: dict[str, Any] = Field(default_factory=dict)
    steps: list[dict[str, Any]] = Field(default_factory=list)
    # Each node that ran and how it ended (succeeded, failed, skipped).
    ended: dict[str, str] = Field(default_factory=dict)
    result: Any = None
    usage: Usage = Field(default_factory=Usage)
    error: dict[str, Any] | None = None
    # What the part (and the parts it started) used of its RunLimits share.
    node_runs: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    sandbox_ms: int = Field(default=0, ge=0)
