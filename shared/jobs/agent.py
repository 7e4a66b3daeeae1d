"""Agent mode, the domain: the Executor's turns, its tool calls and the bounds the orchestrator holds it to.

The Executor is a model that works a job with tools. Each turn it may call tools (several at once);
each call runs as its own durable activity and its result comes back in one envelope
``{success, data, error{code, message}}``. The model's arguments are untrusted data: the orchestrator
checks each against the tool's typed input model, and what a tool may reach is set by the job, never
by a call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The Executor's own tools (the others are step kinds of the registry and tools of the families).
REQUEST_USER_FEEDBACK = "request_user_feedback"
FORMAT_OUTPUT = "format_output"
GET_JOB_STATE = "get_job_state"
# The python tool family's tool and the step kind that runs it (shared/tools/python.py,
# shared/executors/run_python.py): named here so the orchestrator need not import the tool's module.
PYTHON_TOOL = "python.run"
RUN_PYTHON = "run_python"
# Tool names as the model writes them: a step kind, an Executor tool, or "<family>.<name>".
TOOL_NAME = r"^[a-z][a-z0-9_]{0,31}(\.[A-Za-z0-9_.-]{1,64})?$"


class AgentLimits(BaseModel):
    """How far the Executor may go in one job; the orchestrator stops it there."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=8, ge=1, le=32)
    max_tool_calls: int = Field(default=12, ge=1, le=64)


class AgentToolCall(BaseModel):
    """One tool call the model asks for; ``arguments_json`` is parsed and checked by the orchestrator."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=40)
    tool: str = Field(min_length=1, max_length=100)
    arguments_json: str = Field(default="{}", max_length=8000)

    def arguments(self) -> Any:
        """The arguments as JSON data (``None`` when they are not JSON)."""
        try:
            return json.loads(self.arguments_json or "{}")
        except ValueError:
            return None


class AgentTurn(BaseModel):
    """One Executor turn: its reasoning, then the tools it calls now (none: it has what it needs)."""

    model_config = ConfigDict(extra="forbid")

    reasoning: str = Field(default="", max_length=2000)
    tool_calls: list[AgentToolCall] = Field(default_factory=list, max_length=8)


class ToolCallRecord(BaseModel):
    """A finished tool call as the Executor sees it on its next turn (bounded)."""

    id: str
    tool: str
    arguments: Any = None
    success: bool
    # The job step the call ran as: what a later python.run names in its inputs to read this call's output.
    step: str | None = None
    data: Any = None
    error: dict[str, str] | None = None
    truncated: bool = False
