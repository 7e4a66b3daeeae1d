"""``python -m devhost ask --json`` and ``python -m devhost jobs ...`` against a real ``devhost serve``."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"


def devhost(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devhost", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("cli-host"))
    proc.start()
    yield proc
    proc.stop()


def target(host: DevHostProcess) -> list[str]:
    assert host.keys is not None
    return ["--url", host.base_url, "--key", host.keys.function]


def waiting_job(host: DevHostProcess) -> dict[str, Any]:
    """A job that waits for SQL approval, as ``ask --json --no-input`` reports it on stdout."""
    result = devhost("ask", MIXED_Q, *target(host), "--approval", "always", "--no-input", "--json")
    assert result.returncode == 4, result.stdout + result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    assert view["status"] == "waiting_for_user" and view["waiting"]["question_id"]
    return view


def test_ask_json_prints_only_json_on_stdout_and_labels_the_offline_model(host: DevHostProcess) -> None:
    result = devhost("ask", MIXED_Q, *target(host), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)  # nothing but the view: `| jq` works
    assert view["status"] == "completed" and "West" in view["answer"]["text"]
    assert "keyword-matching stand-in, not an LLM" in result.stderr


def test_ask_prints_a_failed_job_as_a_sentence(host: DevHostProcess) -> None:
    result = devhost("ask", MIXED_Q, *target(host), "--budget-tokens", "300")
    assert result.returncode == 1
    assert "The job failed" in result.stdout and "BUDGET_EXCEEDED" in result.stdout
    assert "at step None" not in result.stdout


def test_jobs_list_show_answer_attach(host: DevHostProcess) -> None:
    view = waiting_job(host)
    job_id, question_id = view["id"], view["waiting"]["question_id"]

    listed = devhost("jobs", "list", *target(host), "--status", "waiting_for_user", "--json")
    assert listed.returncode == 0, listed.stderr
    assert job_id in [j["id"] for j in json.loads(listed.stdout)["jobs"]]
    table = devhost("jobs", "list", *target(host))
    assert table.returncode == 0 and job_id in table.stdout and "newest first" in table.stdout
    # The statuses are the host's, not a copy in the CLI: "planning" is one, and an unknown one is refused by
    # the host, naming them all (the CLI keeps no list to fall out of step).
    planning = devhost("jobs", "list", *target(host), "--status", "planning", "--json")
    assert planning.returncode == 0, planning.stderr
    unknown = devhost("jobs", "list", *target(host), "--status", "sleeping")
    assert unknown.returncode == 2 and "INVALID_PARAMETER" in unknown.stdout + unknown.stderr
    assert "planning" in unknown.stdout + unknown.stderr

    shown = devhost("jobs", "show", job_id, *target(host))
    assert shown.returncode == 0, shown.stderr
    assert question_id in shown.stdout and "approve" in shown.stdout

    stale = devhost("jobs", "answer", job_id, "approve", "--question-id", "not-the-question", *target(host))
    assert stale.returncode == 2 and "{" not in stale.stdout, stale.stdout

    answered = devhost("jobs", "answer", job_id, "approve", "--question-id", question_id, *target(host))
    assert answered.returncode == 0, answered.stdout + answered.stderr

    attached = devhost("jobs", "attach", job_id, *target(host))
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert "West" in attached.stdout and "returns-and-refunds.md#" in attached.stdout

    done = devhost("jobs", "show", job_id, *target(host), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "completed"


def test_jobs_cancel(host: DevHostProcess) -> None:
    job_id = waiting_job(host)["id"]
    cancelled = devhost("jobs", "cancel", job_id, *target(host))
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    deadline = time.monotonic() + 60
    status = ""
    while time.monotonic() < deadline and status != "cancelled":
        shown = devhost("jobs", "show", job_id, *target(host), "--json")
        status = json.loads(shown.stdout)["status"]
    assert status == "cancelled"
    assert devhost("jobs", "show", job_id, *target(host)).returncode == 3


def test_errors_are_sentences(host: DevHostProcess) -> None:
    wrong_key = devhost("jobs", "list", "--url", host.base_url, "--key", "wrong")
    assert wrong_key.returncode == 2
    assert "function key is missing or wrong" in wrong_key.stdout

    ask_wrong_key = devhost("ask", "anything", "--url", host.base_url, "--key", "wrong")
    assert ask_wrong_key.returncode == 2
    assert "function key is missing or wrong" in ask_wrong_key.stdout and "{" not in ask_wrong_key.stdout

    unknown = devhost("jobs", "show", "no-such-job", *target(host))
    assert unknown.returncode == 2 and "{" not in unknown.stdout and "Traceback" not in unknown.stderr

    no_host = devhost("jobs", "list", "--url", "http://127.0.0.1:9", "--key", "k")
    assert no_host.returncode == 2
    assert "no host is running at http://127.0.0.1:9" in no_host.stdout


SCREEN_ROWS, SCREEN_COLUMNS = 50, 200


def screen_of(raw: str) -> list[str]:
    """What a person can read after this output: the lines scrolled off the top, then the screen, as a terminal
    shows them once every cursor move is applied (a line drawn over is gone)."""
    screen = pyte.HistoryScreen(SCREEN_COLUMNS, SCREEN_ROWS, history=100_000)
    pyte.Stream(screen).feed(raw)
    scrolled = ["".join(line[x].data for x in range(SCREEN_COLUMNS)) for line in screen.history.top]
    return [line.rstrip() for line in [*scrolled, *screen.display]]


def run_in_pty(args: list[str], on_output: Any, timeout: float = 200) -> tuple[int, str]:
    """Run ``python -m devhost *args`` on a pty; ``on_output(seen, proc, master)`` reacts to what it printed."""
    master, slave = pty.openpty()
    # A terminal of 50 rows and 200 columns (rich reads its size; tests/devhost/jobs emulate the same screen).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SCREEN_ROWS, SCREEN_COLUMNS, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "devhost", *args],
        cwd=REPO_ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
        # A terminal user's Ctrl+C: a CI runner may start the suite with SIGINT ignored, which children inherit.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
            on_output(seen, proc, master)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # A hang guard on a busy machine, not a speed target: say what the program printed.
            printed = seen.decode(errors="replace")
            raise AssertionError(f"devhost {args[0]} did not finish; it printed:\n{printed}") from None
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, seen.decode(errors="replace")


def test_ctrl_c_in_ask_prints_how_to_attach_and_attach_answers_at_the_prompt(host: DevHostProcess) -> None:
    sent: list[float] = []

    def interrupt(seen: bytes, proc: subprocess.Popen[bytes], master: int) -> None:
        # What Ctrl+C at the prompt delivers. A person presses it again when nothing happens: a signal that
        # lands while the prompt is still being drawn (seen on a loaded machine) must not hang the test.
        if b"choose" in seen and (not sent or time.monotonic() - sent[-1] > 3):
            proc.send_signal(signal.SIGINT)
            sent.append(time.monotonic())

    code, text = run_in_pty(["ask", MIXED_Q, *target(host), "--approval", "always"], interrupt)
    assert sent, text
    assert code == 130, text
    assert "Traceback" not in text
    assert "python -m devhost jobs attach " in text
    job_id = text.split("python -m devhost jobs attach ")[1].split()[0]

    answered: list[bool] = []

    def approve(seen: bytes, proc: subprocess.Popen[bytes], master: int) -> None:
        if not answered and b"choose" in seen:
            os.write(master, b"approve\n")
            answered.append(True)

    code, out = run_in_pty(["jobs", "attach", job_id, *target(host)], approve)
    assert answered, out
    assert code == 0, out
    assert "West" in out


def test_get_root_points_to_the_console_and_the_api(host: DevHostProcess) -> None:
    response = host.client.get("/")
    assert response.status_code == 200
    body = response.json()
    assert body["console"] == "/api/ui/" and body["api"] == "/api/"
    assert "/api/jobs" in body["functions"]


@pytest.mark.parametrize("kind", ["file", "under-a-file"])
def test_serve_refuses_an_unusable_data_path_in_one_line(tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    data = blocker if kind == "file" else blocker / "sub"
    result = devhost("serve", "--port", "0", "--data", str(data))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: --data {data}: ")


def plain(raw: str) -> str:
    """What a person reads: the terminal's colours and cursor moves taken out."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)


@pytest.mark.parametrize("command", ["ask", "attach"])
def test_a_refused_answer_is_shown_and_asked_again(host: DevHostProcess, command: str) -> None:
    # The SQL guard refuses a DELETE (400 INVALID_ANSWER): the reason is shown and the question asked again,
    # in ask and in jobs attach alike; then an approval finishes the job.
    typed = ["edit", "DELETE FROM returns", "approve"]
    sent: list[str] = []

    def respond(seen: bytes, proc: subprocess.Popen[bytes], master: int) -> None:
        text = plain(seen.decode(errors="replace"))
        prompts = text.count("approve/edit/reject/abort") + text.count("new sql")
        if prompts > len(sent) and len(sent) < len(typed):
            os.write(master, f"{typed[len(sent)]}\n".encode())
            sent.append(typed[len(sent)])

    if command == "ask":
        args = ["ask", MIXED_Q, *target(host), "--approval", "always"]
    else:
        args = ["jobs", "attach", waiting_job(host)["id"], *target(host)]
    code, raw = run_in_pty(args, respond)
    out = plain(raw)
    assert sent == typed, out
    assert code == 0, out
    refused = out.split("DELETE FROM returns", 1)[1]
    assert "the answer was not accepted" in refused and "INVALID_ANSWER" in refused
    assert "the job still waits on this question: answer it again" in refused
    assert "approve/edit/reject/abort" in refused  # asked again, below the reason
    assert "answer by " in out and "after that the job fails (WAIT_EXPIRED)" in out  # the deadline
    # On the terminal (not only in the byte stream): the typed SQL, the reason, the question again and the
    # approval typed at it, in that order; the live table, drawn again afterwards, covers none of them.
    screen = "\n".join(screen_of(raw))
    typed_at = screen.find("new sql: DELETE FROM returns")
    reason_at = screen.find("the answer was not accepted")
    approved_at = screen.rfind("reject/abort]: approve")
    assert 0 <= typed_at < reason_at < approved_at, screen


def test_the_exit_4_hint_names_the_question_and_commands_that_run_as_printed(host: DevHostProcess) -> None:
    result = devhost("ask", MIXED_Q, *target(host), "--approval", "always", "--no-input")
    assert result.returncode == 4, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("the job waits for input: "))
    assert lines[start - 1].strip() == ""  # on its own line, not glued to the table
    question_id = lines[start + 1].split()[1]
    assert lines[start + 1].startswith(f"question_id: {question_id}")
    assert lines[start + 2].startswith("answer by ")
    answer = lines[start + 4].strip()
    assert answer.startswith(".venv/bin/python -m devhost jobs answer ") and f"--question-id {question_id}" in answer
    assert '"question_id": "' + question_id + '"' in lines[start + 5]
    attach = lines[start + 7].strip()
    assert attach.startswith(".venv/bin/python -m devhost jobs attach ")
    # The printed commands run as printed (the --key given is repeated): no activated venv, from the repo.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    answered = subprocess.run(shlex.split(answer), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    followed = subprocess.run(
        shlex.split(attach),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        stdin=subprocess.DEVNULL,
        env={**env, "COLUMNS": "200"},
    )
    assert followed.returncode == 0, followed.stdout + followed.stderr
    # The answer is printed once: the last live frame is the table, the draft panel does not stay above it.
    assert followed.stdout.count("─ answer ─") == 1, followed.stdout
    assert "writing the answer" not in followed.stdout


def test_jobs_list_at_80_columns_shows_the_question_and_times_with_their_zone(host: DevHostProcess) -> None:
    view = waiting_job(host)
    result = subprocess.run(
        [sys.executable, "-m", "devhost", "jobs", "list", *target(host)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80", "TZ": "UTC"},
    )
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert view["id"] in result.stdout
    words = " ".join(result.stdout.split())
    assert "Which region had the most returns" in words and " UTC" in result.stdout
    shown = devhost("jobs", "show", view["id"], *target(host))
    assert "created " in shown.stdout and " UTC" in shown.stdout and "answer by " in shown.stdout
