"""call_tool: one call of a family tool (function, HTTP, MCP) for the agent-mode Executor (internal executor).

The job's allowed tools travel in the execution context, which only the orchestrator writes; a tool
the job does not allow is refused here whatever the model asked. The tool's envelope is the result;
a failed call is a failed output with the tool's code, so the orchestrator's policy retries the
retryable ones like any step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from shared.executors import CALL_TOOL, register
from shared.jobs.agent import TOOL_NAME
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput, Usage
from shared.runtime.pricing import tool_price
from shared.tools.base import ToolContext

if TYPE_CHECKING:
    from shared.providers.clients import Clients


class CallToolTask(BaseModel):
    """Which tool, with the arguments the model wrote (checked against the tool's schema when it runs)."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(pattern=TOOL_NAME, max_length=100)
    arguments: dict[str, Any] = Field(default_factory=dict)


def _code(code: str) -> ErrorCode:
    # A tool's own code outside the contract is a final failure for that input.
    return ErrorCode(code) if code in ErrorCode.__members__.values() else ErrorCode.BAD_REQUEST


@register(
    CALL_TOOL,
    description="Call one tool of a tool family.",
    uses_llm=False,
    internal=True,
    input_model=CallToolTask,
    text_field="tool",
)
def call_tool(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Run one allowed family tool and return its envelope."""
    from shared.tools import run_tool, tools

    task = CallToolTask.model_validate(inp.task)
    allowed = inp.execution_context.allowed_tools
    if task.tool not in allowed:
        return ExecutorOutput.failure(
            ErrorCode.INVALID_INPUT, f"tool {task.tool!r} is not allowed for this job (allowed: {allowed})"
        )
    try:
        tool = tools(clients.settings).get(task.tool)
    except ValueError as exc:
        return ExecutorOutput.failure(ErrorCode.CONFIG_ERROR, f"the tool configuration is not valid: {exc}")
    if tool is None:
        return ExecutorOutput.failure(ErrorCode.CONFIG_ERROR, f"tool {task.tool!r} is not configured")
    ctx = inp.execution_context
    # Durable ids only (never a clock or randomness): every attempt of this call, a re-run after a crash
    # included, sends the same key; an input from before call ids falls back to the step id.
    key = f"{ctx.job_id or ''}:{ctx.call_id or ctx.step_id or ''}"
    tool_ctx = ToolContext(job_id=ctx.job_id or "", step_id=ctx.step_id or "", idempotency_key=key)
    result = run_tool(tool, task.arguments, tool_ctx)
    envelope = result.model_dump(mode="json")
    # A priced tool's call counts into the job's estimated cost, failed or not (it was made).
    usage = Usage(estimated_cost=tool_price(task.tool, clients.settings.tool_prices) or 0.0)
    if result.success or result.error is None:
        return ExecutorOutput(status="success", result=envelope, usage=usage)
    code = _code(result.error.code)
    # A tool declared non-retryable fails for good: the policy does not call it again.
    final = not tool.spec.retryable
    return ExecutorOutput.failure(code, result.error.message, result=envelope, usage=usage, final=final)
