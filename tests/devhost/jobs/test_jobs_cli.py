"""``python -m devhost ask --json`` and ``python -m devhost jobs ...`` against a real ``devhost serve``."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def run_in_pty(args: list[str], on_output: Any, timeout: float = 200) -> tuple[int, str]:
    """Run ``python -m devhost *args`` on a pty; ``on_output(seen, proc, master)`` reacts to what it printed."""
    master, slave = pty.openpty()
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
