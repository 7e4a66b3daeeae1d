"""The run_python policy, each barrier on its own: what a plan or edit may set, what the orchestrator schedules
(allowed tool, resolved inputs, approval, sandbox budget), and what the executor refuses from its context alone.

The orchestrator is driven inline with scripted plan, SQL and answer outputs; run_python outputs are scripted
too where a test pins only what was scheduled, and the real executor where it pins the executor's refusal.
"""

from __future__ import annotations

from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors import StepInputError, check_edits, check_plan, validate_step_input
from shared.executors.runner import run_executor
from shared.jobs.contracts import ExecutorOutput, Usage
from shared.jobs.models import JobRequest
from shared.jobs.plan import Plan
from shared.providers.clients import Clients
from shared.providers.sql.catalog import load_catalog
from shared.runtime.settings import Settings

ROWS = {"sql": "SELECT month, revenue FROM t", "columns": ["month", "revenue"], "rows": [["01", 100], ["02", 120]]}
CODE = "result = rows['rows'][-1][1] / rows['rows'][0][1] - 1"


def ok(result: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return ExecutorOutput(status="success", result=result, usage=Usage(), **extra).model_dump(mode="json")


def python_out(*, wall_ms: int = 40, files: list[dict[str, Any]] | None = None, draft: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {
        "stdout": "",
        "result": 0.2,
        "files": [] if draft else (files or []),
        "sandbox": {"provider": "local", "status": "ok", "wall_ms": wall_ms, "cpu_ms": wall_ms},
    }
    if draft:
        result["files_written"] = [{"name": f["name"], "media_type": "image/png", "size": 10} for f in files or []]
        result["draft"] = True
    return ok(result)


def plan(*python_steps: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": {"question": "revenue by month"}}
    ]
    for index, inp in enumerate(python_steps, start=2):
        steps.append({"id": f"s{index}", "kind": "run_python", "title": f"compute {index}", "input": inp})
    ids = [s["id"] for s in steps]
    steps.append({"id": "sz", "kind": "generate_response", "title": "answer", "input": {"question": "q"}})
    steps[-1]["depends_on"] = ids
    return {"steps": steps}


GROWTH = {"question": "growth rate", "code": CODE, "inputs": {"rows": "s1"}}
CHART = [{"name": "chart.png", "media_type": "image/png", "size": 10, "ref": "s2-a1-0"}]


class Harness:
    """Scripted activities; records every call; scripted user answers (None: nobody answers, the wait expires)."""

    def __init__(self, the_plan: dict[str, Any], python: list[dict[str, Any]], answers: list[Any] | None = None):
        self.plan = the_plan
        self.python = list(python)
        self.answers = list(answers or [])
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.questions: list[dict[str, Any]] = []
        self.ctx: InlineContext | None = None

    def activity(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, payload))
        if name == "plan":
            return ok(self.plan)
        if name == "execute_azure_sql":
            return ok(ROWS)
        if name == "run_python":
            return self.python.pop(0)
        return ok({"answer": "Done.", "citations": []})

    def answer(self, event: str) -> Any:
        assert self.ctx is not None
        self.questions.append(self.ctx.custom_status["waiting"])
        return self.answers.pop(0) if self.answers else None

    def run(self, **request: Any) -> dict[str, Any]:
        job = {
            "job_id": "j1",
            "request": {"question": "What is the revenue growth?", **request},
            "policy": {"max_attempts_per_model": 1, "first_retry_ms": 1, "max_retry_ms": 5, "user_wait_seconds": 1},
        }
        self.ctx = InlineContext(job, self.activity, self.answer)
        return dict(run_inline(job_orchestrator_body, self.ctx))

    def runs(self) -> list[dict[str, Any]]:
        return [p for n, p in self.calls if n == "run_python"]

    def step(self, step_id: str) -> dict[str, Any]:
        assert self.ctx is not None
        return next(s for s in self.ctx.custom_status["steps"] if s["id"] == step_id)


# --- what a plan, the Executor or an edit may set ----------------------------------------------------


@pytest.mark.parametrize(
    "field", ["allowed_tools", "python_inputs", "python_mode", "approved", "sandbox_seconds_left", "approval"]
)
def test_a_run_python_input_cannot_carry_policy(field: str) -> None:
    with pytest.raises(StepInputError) as refused:
        validate_step_input("run_python", {**GROWTH, field: True})
    assert refused.value.field == field
    with pytest.raises(StepInputError):
        check_edits("run_python", {field: ["python.run"]})
    bad = plan({**GROWTH, field: True})
    with pytest.raises(ValueError, match=field):
        check_plan(Plan.model_validate(bad))


def test_input_names_and_step_refs_are_plain_identifiers() -> None:
    bad: list[dict[str, Any]] = [{"__import__": "s1"}, {"rows": "../s1"}, {"rows": {"columns": []}}, {"result": "s1"}]
    for inputs in bad:
        with pytest.raises(StepInputError):
            validate_step_input("run_python", {**GROWTH, "inputs": inputs})


def test_the_model_cannot_set_approval_or_tools_in_a_job_request_it_does_not_make() -> None:
    # Approval and tools are fields of the user's request only; the orchestrator copies nothing from steps.
    request = JobRequest.model_validate({"question": "q", "approval": {"python": "always"}, "tools": ["python.run"]})
    assert request.approval.python == "always"
    with pytest.raises(ValueError):
        JobRequest.model_validate({"question": "q", "approval": {"python": "sometimes"}})


# --- the orchestrator ------------------------------------------------------------------------------


def test_a_job_that_does_not_allow_python_run_never_schedules_code() -> None:
    h = Harness(plan(GROWTH), [python_out()])
    result = h.run()
    assert result["status"] == "completed"
    assert h.runs() == []
    assert h.step("s2")["state"] == "skipped" and "does not allow python.run" in h.step("s2")["note"]
    # The planner was not offered the kind either.
    plan_ctx = next(p for n, p in h.calls if n == "plan")["execution_context"]
    assert plan_ctx["allowed_tools"] == []


def test_inputs_are_resolved_by_the_orchestrator_from_earlier_outputs() -> None:
    h = Harness(plan(GROWTH), [python_out()])
    assert h.run(tools=["python.run"])["status"] == "completed"
    (call,) = h.runs()
    ctx = call["execution_context"]
    assert ctx["allowed_tools"] == ["python.run"]
    assert ctx["python_inputs"] == {"rows": {"columns": ROWS["columns"], "rows": ROWS["rows"]}}
    assert ctx["python_mode"] == "run"
    assert call["task"] == GROWTH
    # The answer is told what the code computed.
    answer_ctx = next(p for n, p in h.calls if n == "generate_response")["execution_context"]
    assert any("computed with Python" in note and "0.2" in note for note in answer_ctx["step_notes"])


def test_an_input_naming_no_earlier_step_stops_the_job() -> None:
    h = Harness(plan({**GROWTH, "inputs": {"rows": "s9"}}), [python_out()])
    result = h.run(tools=["python.run"])
    assert result["status"] == "failed" and result["error"]["code"] == "BAD_REQUEST"
    assert h.runs() == []


def test_approval_always_asks_before_any_run_and_a_rejection_runs_nothing() -> None:
    h = Harness(plan(GROWTH), [python_out()], answers=["reject"])
    assert h.run(tools=["python.run"], approval={"python": "always"})["status"] == "completed"
    assert h.runs() == []
    (question,) = h.questions
    assert question["kind"] == "approval" and question["details"]["code"] == CODE
    assert h.step("s2")["state"] == "skipped"


def test_approval_always_runs_the_approved_code_once() -> None:
    h = Harness(plan(GROWTH), [python_out()], answers=["approve"])
    assert h.run(tools=["python.run"], approval={"python": "always"})["status"] == "completed"
    assert [c["task"]["code"] for c in h.runs()] == [CODE]


def test_an_edit_at_the_approval_is_asked_again_and_runs_as_edited() -> None:
    edited = "result = 42"
    h = Harness(plan(GROWTH), [python_out()], answers=[{"answer": {"action": "edit", "code": edited}}, "approve"])
    assert h.run(tools=["python.run"], approval={"python": "always"})["status"] == "completed"
    assert [q["details"]["code"] for q in h.questions] == [CODE, edited]
    assert [c["task"]["code"] for c in h.runs()] == [edited]


def test_an_expired_wait_never_approves_code() -> None:
    h = Harness(plan(GROWTH), [python_out()], answers=[])
    result = h.run(tools=["python.run"], approval={"python": "always", "on_timeout": "approve", "timeout_seconds": 1})
    assert result["status"] == "failed" and result["error"]["code"] == "WAIT_EXPIRED"
    assert h.runs() == []


def test_writes_files_drafts_first_and_asks_only_when_files_were_written() -> None:
    quiet = Harness(plan(GROWTH), [python_out(draft=True)])
    assert quiet.run(tools=["python.run"], approval={"python": "writes_files"})["status"] == "completed"
    assert [c["execution_context"]["python_mode"] for c in quiet.runs()] == ["draft"]
    assert quiet.questions == []

    charts = Harness(plan(GROWTH), [python_out(draft=True, files=CHART), python_out(files=CHART)], ["approve"])
    assert charts.run(tools=["python.run"], approval={"python": "writes_files"})["status"] == "completed"
    assert [c["execution_context"]["python_mode"] for c in charts.runs()] == ["draft", "run"]
    (question,) = charts.questions
    assert question["details"]["files"] == [{"name": "chart.png", "media_type": "image/png", "size": 10}]


def test_the_sandbox_time_budget_stops_the_job_before_more_code_runs() -> None:
    h = Harness(plan(GROWTH, {**GROWTH, "question": "again"}), [python_out(wall_ms=1500), python_out()])
    result = h.run(tools=["python.run"], constraints={"budget": {"max_sandbox_seconds": 1}})
    assert result["status"] == "failed" and result["error"]["code"] == "BUDGET_EXCEEDED"
    assert len(h.runs()) == 1
    assert h.runs()[0]["execution_context"]["sandbox_seconds_left"] == 1


# --- the executor, from its execution context alone --------------------------------------------------


def run_python(context: dict[str, Any], task: dict[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    payload = {
        "task_id": "t",
        "executor_type": "run_python",
        "task": task or GROWTH,
        "execution_context": {"job_id": "j1", "step_id": "s2", **context},
    }
    clients = Clients(Settings(**settings), catalog=load_catalog())
    return run_executor(payload, expected_type="run_python", clients=clients)


def test_the_executor_refuses_code_a_job_does_not_allow_whatever_the_task_says() -> None:
    out = run_python({"python_inputs": {"rows": ROWS}}, sandbox_provider="off")
    # INVALID_INPUT (refused) and not CONFIG_ERROR: the sandbox was never reached.
    assert out["status"] == "failed" and out["error"]["code"] == "INVALID_INPUT"
    assert "does not allow python.run" in out["error"]["message"]


def test_the_executor_refuses_an_input_the_orchestrator_did_not_resolve() -> None:
    out = run_python({"allowed_tools": ["python.run"]}, sandbox_provider="off")
    assert out["error"]["code"] == "INVALID_INPUT" and "'rows'" in out["error"]["message"]


def test_no_sandbox_is_a_config_error_never_a_bare_run() -> None:
    out = run_python({"allowed_tools": ["python.run"], "python_inputs": {"rows": ROWS}}, sandbox_provider="off")
    assert out["status"] == "failed" and out["error"]["code"] == "CONFIG_ERROR"


def test_a_spent_sandbox_budget_is_refused_by_the_executor_too() -> None:
    ctx = {"allowed_tools": ["python.run"], "python_inputs": {"rows": ROWS}, "sandbox_seconds_left": 0}
    assert run_python(ctx, sandbox_provider="off")["error"]["code"] == "BUDGET_EXCEEDED"
