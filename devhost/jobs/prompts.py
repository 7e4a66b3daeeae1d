"""Answering a job's question in the terminal: the choice, a free answer, or code to approve or edit."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.prompt import Prompt
from rich.syntax import Syntax
from rich.table import Table

from devhost.jobs.render import deadline_text


def ask_user(console: Console, waiting: dict[str, Any]) -> dict[str, Any]:
    """Ask the job's question in the terminal; returns the feedback body."""
    console.print(Panel(escape(waiting["question"]), title=f"the job asks ({waiting['kind']})", border_style="magenta"))
    deadline = deadline_text(waiting)
    if deadline:
        console.print(f"[dim]{escape(deadline)}[/]")
    details = waiting.get("details") or {}
    if isinstance(details.get("refused_edit"), str):
        # The job refused the last edit itself (a field the step does not take) and asks again.
        console.print(f"[red]your last edit was not applied:[/] {escape(details['refused_edit'])}")
    code = code_of(details)
    if code is not None:
        show_code(console, details, code)
    elif details.get("sql"):
        console.print(Syntax(details["sql"], "sql", word_wrap=True))
    if details.get("error"):
        console.print(
            f"[red]{escape(str(details['error'].get('code')))}[/]: {escape(str(details['error'].get('message')))}"
        )
    options = waiting.get("options") or []
    if waiting.get("free_text") or not options:
        hint = f" (suggestions: {', '.join(options)})" if options else ""
        text = Prompt.ask(f"your answer{hint}", console=console)
        return {"answer": text, "question_id": waiting["question_id"]}
    choice = Prompt.ask("choose", choices=options, console=console)
    if choice == "edit":
        return {"answer": edit_answer(console, details), "question_id": waiting["question_id"]}
    return {"answer": choice, "question_id": waiting["question_id"]}


def code_of(details: dict[str, Any]) -> str | None:
    """The Python code a question is about (an approval's ``code``, or a failed run_python step's input)."""
    code = details.get("code")
    if not isinstance(code, str):
        code = (details.get("input") or {}).get("code")
    return code if isinstance(code, str) else None


def show_code(console: Console, details: dict[str, Any], code: str) -> None:
    """The code (highlighted; a model wrote it, so never read as markup), the inputs it reads, the files it wrote."""
    console.print(Syntax(code, "python", line_numbers=True, word_wrap=True))
    inputs = details.get("inputs") or (details.get("input") or {}).get("inputs") or {}
    if isinstance(inputs, dict) and inputs:
        table = Table(title="inputs the code reads")
        table.add_column("variable")
        table.add_column("output of step")
        for name, step in inputs.items():
            table.add_row(escape(str(name)), escape(str(step)))
        console.print(table)
    else:
        console.print("[dim]the code reads no inputs[/]")
    files = details.get("files")
    if isinstance(files, list) and files:
        written = Table(title="files a trial run wrote (kept only if you approve)")
        for column in ("name", "type", "bytes"):
            written.add_column(column)
        for f in files:
            if isinstance(f, dict):
                written.add_row(escape(str(f.get("name"))), escape(str(f.get("media_type"))), str(f.get("size")))
        console.print(written)


def edit_answer(console: Console, details: dict[str, Any]) -> dict[str, Any]:
    """The ``edit`` answer: new code (in $VISUAL/$EDITOR, else typed), else a new SQL statement or question."""
    code = code_of(details)
    if code is not None:
        return {"action": "edit", "code": edit_code(console, code)}
    key = "sql" if details.get("sql") or "sql" in (details.get("input") or {}) else "question"
    current = details.get("sql") or (details.get("input") or {}).get(key, "")
    console.print(f"current {key}: {current}", markup=False, highlight=False)
    new_value = Prompt.ask(f"new {key}", console=console)
    return {"action": "edit", key: new_value}


def edit_code(console: Console, current: str) -> str:
    """New code: edited in $VISUAL or $EDITOR when set, else typed line by line (a lone '.' ends it)."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if editor:
        with tempfile.TemporaryDirectory(prefix="devhost-edit-") as folder:
            path = Path(folder) / "step.py"
            path.write_text(current, encoding="utf-8")
            subprocess.run([*shlex.split(editor), str(path)], check=False)
            edited = path.read_text(encoding="utf-8")
        return edited if edited.strip() else current
    console.print("type the new code; end with a line holding only '.' (nothing typed keeps the current code)")
    lines: list[str] = []
    while True:
        try:
            line = console.input("")
        except EOFError:
            break
        if line.strip() == ".":
            break
        lines.append(line)
    typed = "\n".join(lines)
    return typed + "\n" if typed.strip() else current
