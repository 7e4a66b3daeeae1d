"""Agent mode and python.run: the model's call can neither allow the tool, nor set its inputs' values, nor skip the
approval; it runs as a run_python step whose policy the orchestrator alone applies. Driven inline, scripted turns."""

from __future__ import annotations

from typing import Any

import pytest

from shared.runtime.settings import Settings
from shared.tools import tools as all_tools
from shared.tools import undeclared
from shared.tools.base import ToolContext, run_tool
from tests.jobs.test_agent_mode import DONE, SQL_ROWS, job, names, transcript_seen, turn
from tests.jobs.test_policy_inline import ANSWER_OK, Script, ok

CODE = "result = len(rows)"
PY_OK = {"stdout": "", "result": 1, "files": [], "sandbox": {"provider": "local", "status": "ok", "wall_ms": 5}}


def test_python_run_is_refused_when_the_job_does_not_allow_it() -> None:
    script = Script(
        agent_turn=[turn(("python.run", {"question": "q", "code": CODE})), DONE], generate_response=[ok(ANSWER_OK)]
    )
    result, _ = job(script)
    assert result["status"] == "completed"
    assert "run_python" not in names(script) and "call_tool" not in names(script)
    assert "unknown tool" in transcript_seen(script)[0]["error"]["message"]


@pytest.mark.parametrize(
    "extra",
    [
        {"allowed_tools": ["python.run"]},
        {"python_inputs": {"rows": {"columns": ["x"], "rows": [[1]]}}},
        {"python_mode": "run"},
        {"approved": True},
    ],
)
def test_the_models_arguments_cannot_carry_policy(extra: dict[str, Any]) -> None:
    script = Script(
        agent_turn=[turn(("python.run", {"question": "q", "code": CODE, **extra})), DONE],
        generate_response=[ok(ANSWER_OK)],
    )
    job(script, tools=["python.run"])
    assert "run_python" not in names(script)
    record = transcript_seen(script)[0]
    assert record["error"]["code"] == "INVALID_INPUT" and next(iter(extra)) in record["error"]["message"]


def test_a_call_runs_as_a_run_python_step_with_the_values_the_orchestrator_resolved() -> None:
    script = Script(
        agent_turn=[
            turn(("execute_azure_sql", {"question": "orders"})),
            turn(("python.run", {"question": "count", "code": CODE, "inputs": {"rows": "t1"}})),
            DONE,
        ],
        execute_azure_sql=[ok(SQL_ROWS)],
        run_python=[ok(PY_OK)],
        generate_response=[ok(ANSWER_OK)],
    )
    result, _ = job(script, tools=["python.run"])
    assert result["status"] == "completed"
    (payload,) = [p for n, p in script.calls if n == "run_python"]
    ctx = payload["execution_context"]
    assert ctx["python_inputs"] == {"rows": {"columns": ["x"], "rows": [[1]]}} and ctx["allowed_tools"] == [
        "python.run"
    ]
    # The record names the step each call ran as, which a later call's inputs refer to.
    assert [r["step"] for r in transcript_seen(script)] == ["t1", "t2"]


def test_a_call_naming_no_earlier_step_is_refused_to_the_model() -> None:
    script = Script(
        agent_turn=[turn(("python.run", {"question": "q", "code": CODE, "inputs": {"rows": "t7"}})), DONE],
        generate_response=[ok(ANSWER_OK)],
    )
    job(script, tools=["python.run"])
    assert "run_python" not in names(script)
    assert "'t7'" in transcript_seen(script)[0]["error"]["message"]


def test_the_approval_the_job_requires_applies_to_the_models_code() -> None:
    asked: list[str] = []

    def answer(event: str) -> Any:
        asked.append(event)
        return {"answer": "reject"}

    script = Script(
        agent_turn=[turn(("python.run", {"question": "q", "code": CODE})), DONE], generate_response=[ok(ANSWER_OK)]
    )
    result, _ = job(script, answer, tools=["python.run"], approval={"python": "always"})
    assert result["status"] == "completed" and asked == ["answer:t1-q1"]
    assert "run_python" not in names(script)
    assert transcript_seen(script)[0]["error"]["code"] == "SKIPPED"


def test_the_tool_is_declared_only_while_a_sandbox_is_configured() -> None:
    assert undeclared(Settings(sandbox_provider="local"), "python.run") is None
    assert "not configured" in str(undeclared(Settings(sandbox_provider="off"), "python.run"))
    tool = all_tools(Settings())["python.run"]
    assert set(tool.spec.input_schema["properties"]) == {"question", "code", "inputs"}
    # Called as a plain family tool (call_tool), it refuses: code runs only as a run_python step.
    got = run_tool(tool, {"question": "q", "code": CODE}, ToolContext(job_id="j1", step_id="t1"))
    assert got.success is False and got.error is not None and "run_python step" in got.error.message
