"""The job view of a workflow run: what kind of question waits, the branches' outputs, its graph, its log."""

from __future__ import annotations

from typing import Any

import pytest

from api.view import build_log, build_view, step_outputs

ASKED = {"question_id": "q1", "step_id": "go", "asked_at": "2026-01-01T00:00:00+00:00"}
WORKFLOW = {"id": "wf", "nodes": [{"id": "both", "kind": "parallel", "branches": ["figures"]}]}
ROWS = {"sql": "SELECT 1", "columns": ["n"], "rows": [[1]], "row_count": 1}


def run_view(waiting: dict[str, Any] | None, history: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [{"id": "figures", "kind": "execute_azure_sql", "title": "figures", "state": "succeeded"}]
    custom = {"status": "waiting_for_user", "step_index": 0, "steps": steps, "waiting": waiting}
    job_input = {
        "request": {"question": "workflow wf v1", "constraints": {"max_tokens": 9}},
        "run": {"kind": "workflow", "id": "wf", "version": 1, "inputs": {"region": "North"}},
    }
    status = {"instanceId": "j1", "runtimeStatus": "Running", "customStatus": custom, "historyEvents": history}
    return build_view(status | {"input": job_input}, {}, partials=lambda job, step: None)


@pytest.mark.parametrize(
    ("kind", "details", "free_text", "form"),
    [
        ("approval", {"sql": "SELECT 1", "tables": []}, False, "sql"),
        ("approval", {"code": "result = 1", "inputs": {}}, False, "code"),
        ("approval", {}, False, "choice"),  # a workflow's human node with approve/reject: no SQL to show
        ("clarify", {}, True, "text"),
        ("clarify", {}, False, "choice"),
        ("error", {"error": {"code": "X", "message": "m"}}, False, "step_error"),
    ],
)
def test_the_view_says_what_kind_of_question_waits(
    kind: str, details: dict[str, Any], free_text: bool, form: str
) -> None:
    waiting: dict[str, Any] = ASKED | {"kind": kind, "question": "?", "options": ["approve", "reject"]}
    waiting |= {"details": details}
    waiting |= {"free_text": free_text, "expires_at": "2026-01-02T00:00:00+00:00"}
    shown = run_view(waiting, [])["waiting"]
    assert shown["form"] == form
    assert shown["expires_at"] == "2026-01-02T00:00:00+00:00"


def test_a_branchs_outputs_are_the_runs_step_results_and_a_sub_workflows_are_not() -> None:
    branch_input = {"run": {"kind": "workflow", "id": "wf", "version": 1, "part": {"entry": "figures"}}}
    result: dict[str, Any] = {"status": "completed", "outputs": {"figures": ROWS}, "steps": [{"id": "figures"}]}
    branch: dict[str, Any] = {"EventType": "SubOrchestrationInstanceCompleted", "Input": branch_input, "Result": result}
    sub_input = {"run": {"kind": "workflow", "id": "other", "version": 1, "part": None}}
    sub = branch | {"Input": sub_input, "Result": result | {"outputs": {"figures": {"rows": "other"}}, "result": {}}}
    assert step_outputs([branch])[0] == {"figures": ROWS}
    assert step_outputs([sub])[0] == {}
    assert run_view(None, [branch])["steps"][0]["output"] == ROWS


def test_a_run_shows_its_inputs_its_graph_and_a_readable_load_line() -> None:
    load = {
        "EventType": "TaskCompleted",
        "FunctionName": "load_definition",
        "Input": {"kind": "workflow", "id": "wf", "version": 1},
        "Result": WORKFLOW,
    }
    agent = load | {"Input": {"kind": "agent", "id": "reader", "version": 2}, "Result": {"id": "reader"}}
    view = run_view(None, [load, agent])
    assert view["run"]["inputs"] == {"region": "North"}
    assert view["run"]["graph"] == {"nodes": WORKFLOW["nodes"], "start": None}
    assert view["request"]["constraints"] == {"max_tokens": 9}
    lines = [e.message for e in build_log([load, agent], 0, 10).entries]
    assert lines == ["load_definition: loaded workflow wf v1", "load_definition: loaded agent reader v2"]
    assert not any("None" in line for line in lines)
