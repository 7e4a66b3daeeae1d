"""Activity functions: one per registered executor type, each a thin call into the executor runner."""

from collections.abc import Callable
from typing import Any

import azure.durable_functions as df

from shared.executors import executor_types
from shared.executors.runner import run_executor
from shared.providers.clients import get_clients

blueprint = df.Blueprint()


def _make_activity(executor_type: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def activity(payload: dict[str, Any]) -> dict[str, Any]:
        """Run one step through the executor contract."""
        return run_executor(payload, expected_type=executor_type, clients=get_clients)

    activity.__name__ = activity.__qualname__ = executor_type
    return activity


for _executor_type in executor_types():
    blueprint.function_name(_executor_type)(
        blueprint.activity_trigger(input_name="payload", activity=_executor_type)(_make_activity(_executor_type))
    )

# A run's definitions, loaded by pinned version (orchestrators/workflow.py).
from activities.definitions import register as _register_definitions  # noqa: E402

_register_definitions(blueprint)

# Questions of a run's parts, reported to its root run (orchestrators/part_questions.py).
from activities.parts import register as _register_parts  # noqa: E402

_register_parts(blueprint)

# What a fork carries over from its origin (orchestrators/fork.py).
from activities.fork import register as _register_fork  # noqa: E402

_register_fork(blueprint)
