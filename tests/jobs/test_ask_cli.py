"""``python -m devhost ask``: against a running host, with a host started in-process, and answering in a terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"


def ask(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devhost", "ask", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "160", **(env or {})},
    )


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("ask-host"))
    proc.start()
    yield proc
    proc.stop()


def test_ask_uses_a_running_host_and_prints_answer_sources_and_rows(host: DevHostProcess) -> None:
    assert host.keys is not None
    result = ask(MIXED_Q, "--url", host.base_url, "--key", host.keys.function)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "answer" in out and "West" in out and "returns-and-refunds.md#" in out
    assert "SELECT" in out and "return_count" in out  # the SQL and its result table


def test_ask_exits_4_when_the_job_waits_and_input_is_off(host: DevHostProcess) -> None:
    assert host.keys is not None
    result = ask(MIXED_Q, "--url", host.base_url, "--key", host.keys.function, "--approval", "always", "--no-input")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "waits for input" in result.stdout


def test_ask_exits_1_on_a_failed_job(host: DevHostProcess) -> None:
    assert host.keys is not None
    result = ask(MIXED_Q, "--url", host.base_url, "--key", host.keys.function, "--budget-tokens", "300")
    assert result.returncode == 1
    assert "BUDGET_EXCEEDED" in result.stdout


def test_ask_starts_a_host_in_process_when_none_runs(tmp_path: Path) -> None:
    result = ask(
        "What does the returns policy say about refunds after 30 days?",
        "--url",
        "http://127.0.0.1:9",
        "--data",
        str(tmp_path / "data"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no host at http://127.0.0.1:9; starting one here" in result.stdout
    assert "30 days" in result.stdout


def test_ask_asks_in_the_terminal_and_resumes_the_job(host: DevHostProcess) -> None:
    assert host.keys is not None
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost",
            "ask",
            MIXED_Q,
            "--url",
            host.base_url,
            "--key",
            host.keys.function,
            "--approval",
            "always",
        ],
        cwd=REPO_ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "COLUMNS": "160"},
    )
    os.close(slave)
    seen = b""
    answered = False
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
            if not answered and b"choose" in seen:
                os.write(master, b"approve\n")
                answered = True
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode(errors="replace")
    assert answered, text
    assert proc.returncode == 0, text
    assert "approval" in text and "West" in text


def test_ask_agent_mode_shows_each_tool_call_with_its_turn(host: DevHostProcess) -> None:
    assert host.keys is not None
    result = ask(MIXED_Q, "--url", host.base_url, "--key", host.keys.function, "--mode", "agent", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    view = json.loads(result.stdout)
    assert view["mode"] == "agent" and view["plan"]["status"] == "agent"
    calls = [(s["kind"], s["turn"]) for s in view["steps"] if s.get("turn") is not None]
    assert sorted(calls) == [("consult_rag", 1), ("execute_azure_sql", 1)]
    progress = result.stderr
    assert "agent mode" in progress and "input → output" in progress
    for number, step in enumerate(view["steps"], 1):
        turn = str(step.get("turn", "—"))  # the answer step belongs to no turn
        assert re.search(rf"│ {number}\s+│ {turn}\s+│ {step['kind']}", progress), progress
    assert "West" in progress  # the answer


def test_ask_agent_bounds_and_tools_reach_the_job(host: DevHostProcess) -> None:
    assert host.keys is not None
    base = [MIXED_Q, "--url", host.base_url, "--key", host.keys.function, "--mode", "agent", "--json"]
    # One tool call allowed: the Executor makes one lookup, then writes the answer.
    result = ask(
        *base,
        "--max-tool-calls",
        "1",
        "--tools",
        "function.growth_rate,function.percent_change",
        "--tools",
        "function.summary_statistics",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s["id"] for s in json.loads(result.stdout)["steps"]] == ["t1", "answer"]
    # One turn: no room for any tool call.
    result = ask(*base, "--max-turns", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s["id"] for s in json.loads(result.stdout)["steps"]] == ["answer"]
    # The server checks the tool names and says which one is wrong.
    result = ask(*base, "--tools", "function.growth_rate,Not A Tool")
    assert result.returncode == 2
    assert "the job was not accepted" in result.stderr and "tools.1" in result.stderr


def test_ask_answers_the_executors_question_in_the_terminal(host: DevHostProcess) -> None:
    assert host.keys is not None
    master, slave = pty.openpty()
    command = ["ask", "Tell me about blorps", "--url", host.base_url, "--key", host.keys.function, "--mode", "agent"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "devhost", *command],
        cwd=REPO_ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "COLUMNS": "160"},
    )
    os.close(slave)
    seen = b""
    answered = False
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
            if not answered and b"your answer" in seen:
                os.write(master, b"returns\n")
                answered = True
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode(errors="replace")
    assert answered, text
    assert proc.returncode == 0, text
    assert "Which topic do you mean?" in text and "request_user_feedback" in text
    assert re.search(r"│ 2\s+│ 2\s+│ consult_rag", text), text  # the search for the answer, in turn 2
