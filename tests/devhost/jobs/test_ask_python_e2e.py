"""``devhost ask`` on a terminal at a Python code approval, against a ``devhost serve`` with the local sandbox:
the code and its inputs are shown, an edit made in $EDITOR is asked about again, then approved and run.

Needs bubblewrap and ``.venv-sandbox`` (``make sandbox``): skipped without them, failed when SANDBOX_REQUIRED=1.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.sandbox.local import LocalSandbox
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.devhost.jobs.test_jobs_cli import run_in_pty, target

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"
EDITED = 'result["edited_by"] = "a person"'


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    if not LocalSandbox().available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    data = tmp_path_factory.mktemp("ask-python-host")
    env = {"SANDBOX_PROVIDER": "local", "ARTIFACT_STORE": "local", "ARTIFACT_PATH": str(data / "artifacts.sqlite3")}
    proc = DevHostProcess(REPO_ROOT, data / "host", env=env)
    proc.start()
    yield proc
    proc.stop()


def test_ask_shows_the_code_takes_an_edit_and_asks_again(
    host: DevHostProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text(f"#!/bin/sh\nprintf '\\n{EDITED}\\n' >> \"$1\"\n", encoding="utf-8")
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    answers = ["edit", "approve"]

    def respond(seen: bytes, proc: subprocess.Popen[bytes], master: int) -> None:
        asked = seen.count(b"approve/edit/reject/abort")
        given = len(answers_sent)
        if asked > given and given < len(answers):
            os.write(master, f"{answers[given]}\n".encode())
            answers_sent.append(answers[given])

    answers_sent: list[str] = []
    args = ["ask", QUESTION, *target(host), "--tools", "python.run", "--approval-python", "always"]
    code, raw = run_in_pty(args, respond)
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)  # the terminal's colours and cursor moves
    assert answers_sent == ["edit", "approve"], out
    assert code == 0, out
    first, _, second = out.partition("approve/edit/reject/abort")
    # The first question shows the model's code with its line numbers and the step whose rows it reads.
    assert "Approve this Python code" in first and "growth_rate" in first
    assert "inputs the code reads" in first and "rows" in first and "s1" in first
    assert EDITED not in first
    # The edited code is asked about again before it runs.
    assert "Approve this Python code" in second and EDITED in second
    assert "answer" in out
    # The chart the code drew is named with the URL that serves it.
    assert re.search(r"chart\.png \(image/png, \d+ bytes\) http://127\.0\.0\.1:\d+/api/jobs/\w+/artifacts/", out), out
    # What the code computed reaches the answer as words, never as a JSON object.
    answer = " ".join(out.rpartition("─ answer ─")[2].replace("│", " ").split())
    assert "computed with Python: " in answer and "result = {" not in answer, answer
