"""The call_tool executor's own barrier: only the tools the orchestrator put in the execution context run."""

from __future__ import annotations

from typing import Any

import pytest

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.settings import Settings

CLIENTS = Clients(Settings(llm_provider="offline"))
ARGS = {"old": 80, "new": 100}


def call(tool: str, allowed: list[str], arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = {
        "task_id": "j1:t1:1",
        "executor_type": "call_tool",
        "task": {"tool": tool, "arguments": ARGS if arguments is None else arguments},
        "execution_context": {"job_id": "j1", "step_id": "t1", "allowed_tools": allowed},
    }
    return run_executor(payload, expected_type="call_tool", clients=CLIENTS)


def test_an_allowed_tool_runs_and_returns_its_envelope() -> None:
    out = call("function.percent_change", ["function.percent_change"])
    assert out["status"] == "success" and out["result"]["success"] is True
    assert out["result"]["data"]["percent_change"] == 25.0


@pytest.mark.parametrize("allowed", [[], ["function.growth_rate"], ["function.percent_change.x"]])
def test_a_tool_the_context_does_not_allow_never_runs(allowed: list[str]) -> None:
    out = call("function.percent_change", allowed)
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT"
    assert "not allowed for this job" in out["error"]["message"] and out["result"] is None


def test_the_task_cannot_carry_its_own_allow_list() -> None:
    payload = {
        "task_id": "j1:t1:1",
        "executor_type": "call_tool",
        "task": {"tool": "function.percent_change", "arguments": ARGS, "allowed_tools": ["function.percent_change"]},
        "execution_context": {"job_id": "j1", "step_id": "t1"},
    }
    out = run_executor(payload, expected_type="call_tool", clients=CLIENTS)
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT"


def test_an_allowed_but_unconfigured_tool_is_a_config_error() -> None:
    out = call("http.nowhere", ["http.nowhere"])
    assert out["status"] == "failed" and out["error"]["code"] == "CONFIG_ERROR"
