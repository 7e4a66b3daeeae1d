"""The product's blueprints for the agent-loop benchmark (never deployed).

Two changes from function_app.py, both for measuring: the Executor is scripted (each turn calls the
cheap built-in ``function.percent_change`` up to 8 times until the job's tool calls are spent, then
``format_output``; every other model call goes to the offline model), and every activity is the
product's own executor call timed from inside, its body time appended to ``BENCH_BODY_TIMES`` as
``<task_id> <seconds> <start>`` so the benchmark can subtract exactly the time the activities themselves took.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from api import blueprint as api_blueprint
from orchestrators import blueprint as orchestrators_blueprint
from shared.executors import executor_types
from shared.executors.runner import run_executor
from shared.jobs.agent import FORMAT_OUTPUT, AgentToolCall, AgentTurn
from shared.providers.clients import Clients, get_clients, set_clients
from shared.providers.interfaces import LLMRequest, LLMResponse, LLMTask, T
from shared.runtime.settings import get_settings

TOOL = "function.percent_change"
PER_TURN = 8  # the most tool calls one AgentTurn may carry
_TIMES = os.environ.get("BENCH_BODY_TIMES", "")
_LOCK = threading.Lock()


class ScriptedExecutor:
    """The offline model, except that Executor turns call the cheap tool until no tool calls are left."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.default_model = inner.name, inner.default_model

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """A scripted AgentTurn for Executor turns; the offline model's answer for everything else."""
        if request.task is not LLMTask.AGENT_TURN:
            return self.inner.generate(request)
        left = int(str(request.inputs.get("calls_left") or 0))
        calls = [
            AgentToolCall(id=f"c{i}", tool=TOOL, arguments_json=json.dumps({"old": 100 + i, "new": 110 + i}))
            for i in range(min(PER_TURN, left))
        ]
        turn = AgentTurn(
            reasoning=f"{left} tool calls left", tool_calls=calls or [AgentToolCall(id="c0", tool=FORMAT_OUTPUT)]
        )
        output = request.output_type.model_validate(turn.model_dump())
        return LLMResponse(output=output, tokens_input=10, tokens_output=10, model_used="scripted")


def _timed(executor_type: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def activity(payload: dict[str, Any]) -> dict[str, Any]:
        """Run one step through the executor contract, timing the call."""
        started = time.perf_counter()
        try:
            return run_executor(payload, expected_type=executor_type, clients=get_clients)
        finally:
            spent = time.perf_counter() - started
            if _TIMES:
                with _LOCK, open(_TIMES, "a", encoding="utf-8") as out:
                    # Start and end on the host's monotonic clock: calls of one turn overlap, so the bench
                    # subtracts the time covered by at least one body, not the sum of them.
                    out.write(f"{payload.get('task_id')} {spent:.9f} {started:.9f}\n")

    activity.__name__ = activity.__qualname__ = executor_type
    return activity


activities = df.Blueprint()
for _executor_type in executor_types():
    activities.function_name(_executor_type)(
        activities.activity_trigger(input_name="payload", activity=_executor_type)(_timed(_executor_type))
    )

_base = Clients(get_settings())
set_clients(Clients(_base.settings, llm=ScriptedExecutor(_base.llm)))

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(api_blueprint)
app.register_functions(orchestrators_blueprint)
app.register_functions(activities)
