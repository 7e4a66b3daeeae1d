"""The job view lists artifacts only for steps that run code (run_python, also python.run calls): a tool or
model result that merely has a ``files`` list (an HTTP or MCP tool's data) cannot put download entries in
the console, and entries must be well-formed references."""

from __future__ import annotations

from typing import Any

from api.view import _step_entry
from shared.jobs.models import StepState

PNG = {"name": "chart.png", "media_type": "image/png", "size": 4, "ref": "s2-a1-0"}


def entry(kind: str, files: list[Any]) -> dict[str, Any]:
    step = StepState(id="s2", kind=kind, state="succeeded")
    return _step_entry(step, "Running", {"s2": {"files": files}}, {}).model_dump(mode="json", exclude_unset=True)


def test_a_code_step_lists_its_files() -> None:
    assert entry("run_python", [PNG])["artifacts"] == [PNG]
    assert entry("python.run", [PNG])["artifacts"] == [PNG]  # an agent's call, run as a run_python step


def test_another_kinds_files_list_is_not_artifacts() -> None:
    assert "artifacts" not in entry("call_tool", [PNG])
    assert "artifacts" not in entry("consult_rag", [PNG])


def test_only_well_formed_references_are_listed() -> None:
    bad = [{**PNG, "ref": "../other-job/s1-a1-0"}, {**PNG, "name": ""}, {"ref": "s2-a1-1"}, "s2-a1-2"]
    assert entry("run_python", [*bad, PNG])["artifacts"] == [PNG]
