"""Sandbox limits come from the app's settings alone: a plan, an edit or the model's tool arguments cannot carry
them, and the execution context (written by the orchestrator) has no field for them either."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.executors import StepInputError, check_edits, validate_step_input
from shared.jobs.contracts import ExecutionContext
from shared.tools.python import RunPythonInput
from tests.security.test_python_policy import GROWTH, ROWS, run_python

LIMITS: list[tuple[str, Any]] = [
    ("limits", {"wall_seconds": 3600, "memory_mb": 65536}),
    ("wall_seconds", 3600),
    ("cpu_seconds", 3600),
    ("memory_mb", 65536),
    ("max_file_bytes", 10**10),
    ("sandbox_provider", "off"),
]


@pytest.mark.parametrize(("field", "value"), LIMITS)
def test_a_plan_step_or_an_edit_cannot_set_a_sandbox_limit(field: str, value: Any) -> None:
    with pytest.raises(StepInputError) as refused:
        validate_step_input("run_python", {**GROWTH, field: value})
    assert refused.value.field == field
    with pytest.raises(StepInputError):
        check_edits("run_python", {field: value})


@pytest.mark.parametrize(("field", "value"), LIMITS)
def test_the_models_tool_arguments_cannot_set_a_sandbox_limit(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        RunPythonInput.model_validate({**GROWTH, field: value})


@pytest.mark.parametrize(("field", "value"), LIMITS)
def test_the_execution_context_has_no_limit_field(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        ExecutionContext.model_validate({"job_id": "j1", field: value})


def test_a_task_carrying_limits_is_refused_by_the_executor_before_any_run() -> None:
    ctx = {"allowed_tools": ["python.run"], "python_inputs": {"rows": ROWS}}
    out = run_python(ctx, {**GROWTH, "limits": {"wall_seconds": 3600}}, sandbox_provider="off")
    # INVALID_INPUT, not CONFIG_ERROR: the input was refused before the (absent) sandbox was asked.
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT"
