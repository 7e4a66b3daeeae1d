"""``devhost ask`` at a Python code approval: the code (highlighted), the inputs it reads, the files a draft wrote,
and the same approve / edit / reject / abort flow as SQL; an edit replaces the code (in $EDITOR, or typed).

The prompt reads the terminal through ``input()``; here stdin is a StringIO holding what a person types.
"""

from __future__ import annotations

import io
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from devhost.jobs.prompts import ask_user
from devhost.jobs.render import deadline_text

CODE = "growth = rows['revenue'].iloc[-1] / rows['revenue'].iloc[0] - 1\nresult = {'growth_rate': growth}\n"
APPROVAL: dict[str, Any] = {
    "question_id": "s2-q1",
    "kind": "approval",
    "question": "Approve this Python code for step 'Growth rate'?",
    "options": ["approve", "edit", "reject", "abort"],
    "details": {"code": CODE, "inputs": {"rows": "s1"}},
}


def answer(waiting: dict[str, Any], typed: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """What ask_user sends back when a person types ``typed``, and what the terminal showed."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    return ask_user(console, waiting), out.getvalue()


@pytest.fixture(autouse=True)
def no_editor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)


@pytest.mark.parametrize("choice", ["approve", "reject", "abort"])
def test_the_code_and_its_inputs_are_shown_and_the_choice_sent(choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reply, shown = answer(APPROVAL, f"{choice}\n", monkeypatch)
    assert reply == {"answer": choice, "question_id": "s2-q1"}
    assert "Approve this Python code" in shown
    assert "1 growth = rows['revenue']" in shown and "2 result = {'growth_rate': growth}" in shown  # numbered
    assert "inputs the code reads" in shown and "rows" in shown and "s1" in shown
    assert "approve/edit/reject/abort" in shown


def test_an_unknown_choice_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    reply, _ = answer(APPROVAL, "yes\napprove\n", monkeypatch)
    assert reply["answer"] == "approve"


def test_code_with_markup_is_shown_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = {**APPROVAL, "details": {"code": "print('[bold red]x[/]')\n", "inputs": {}}}
    _, shown = answer(waiting, "reject\n", monkeypatch)
    assert "print('[bold red]x[/]')" in shown and "the code reads no inputs" in shown


def test_the_files_a_draft_wrote_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [{"name": "chart.png", "media_type": "image/png", "size": 18234}]
    waiting = {**APPROVAL, "details": {**APPROVAL["details"], "files": files}}
    _, shown = answer(waiting, "approve\n", monkeypatch)
    assert "files a trial run wrote" in shown and "chart.png" in shown and "18234" in shown


def test_edit_sends_the_typed_code(monkeypatch: pytest.MonkeyPatch) -> None:
    reply, shown = answer(APPROVAL, "edit\nresult = 42\nprint(result)\n.\n", monkeypatch)
    assert reply == {"answer": {"action": "edit", "code": "result = 42\nprint(result)\n"}, "question_id": "s2-q1"}
    assert "end with a line holding only '.'" in shown


def test_edit_with_nothing_typed_keeps_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    reply, _ = answer(APPROVAL, "edit\n.\n", monkeypatch)
    assert reply["answer"] == {"action": "edit", "code": CODE}


def test_edit_opens_the_editor_on_the_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = tmp_path / "seen.py"
    editor = tmp_path / "editor.sh"
    # An "editor" that keeps what it was given and writes new code over the file.
    editor.write_text(f'#!/bin/sh\ncp "$1" {seen}\nprintf "result = 7\\n" > "$1"\n', encoding="utf-8")
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    reply, _ = answer(APPROVAL, "edit\n", monkeypatch)
    assert seen.read_text(encoding="utf-8") == CODE
    assert reply["answer"] == {"action": "edit", "code": "result = 7\n"}


def test_a_failed_run_python_step_shows_its_code_and_edits_it(monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = {
        "question_id": "s2-q2",
        "kind": "error",
        "question": "Step 'Growth rate' failed (TOOL_ERROR): ZeroDivisionError",
        "options": ["retry", "skip", "edit", "abort"],
        "details": {
            "error": {"code": "TOOL_ERROR", "message": "ZeroDivisionError: division by zero"},
            "input": {"question": "growth", "code": "x = 1 / 0\n", "inputs": {"rows": "s1"}},
        },
    }
    reply, shown = answer(waiting, "edit\nx = 1\n.\n", monkeypatch)
    assert "1 x = 1 / 0" in shown and "TOOL_ERROR" in shown and "s1" in shown
    assert reply["answer"] == {"action": "edit", "code": "x = 1\n"}


def test_a_sql_approval_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = {
        "question_id": "s1-q1",
        "kind": "approval",
        "question": "Approve this SQL?",
        "options": ["approve", "edit", "reject", "abort"],
        "details": {"sql": "SELECT 1", "input": {"question": "q", "sql": "SELECT 1"}},
    }
    reply, shown = answer(waiting, "edit\nSELECT 2\n", monkeypatch)
    assert reply["answer"] == {"action": "edit", "sql": "SELECT 2"}
    assert "inputs the code reads" not in shown


def test_an_edit_the_job_refused_is_said_before_the_question_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = "answer.allow_sensitive: this step does not take allow_sensitive"
    waiting = {**APPROVAL, "details": {**APPROVAL["details"], "refused_edit": refused}}
    _, shown = answer(waiting, "approve\n", monkeypatch)
    assert f"your last edit was not applied: {refused}" in shown


def test_the_deadline_is_said_with_its_zone_and_what_happens_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    now = datetime(2026, 11, 28, 11, 0, tzinfo=UTC)
    waiting = {**APPROVAL, "expires_at": "2026-12-01T12:30:00+00:00"}
    said = deadline_text(waiting, now)
    assert said == "answer by 2026-12-01 12:30 UTC (in 3 d 1 h); after that the job fails (WAIT_EXPIRED)"
    soon = deadline_text({**waiting, "expires_at": "2026-11-28T11:45:00Z", "expiry_default": "reject"}, now)
    assert soon == "answer by 2026-11-28 11:45 UTC (in 45 min); after that the job goes on with 'reject'"
    assert deadline_text({**APPROVAL}) is None
    monkeypatch.undo()
    time.tzset()  # the process's own zone again
