"""``python -m devhost ask`` without a host: the request it sends and the agent-mode progress table it draws."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from devhost.cli import build_parser
from devhost.jobs.ask import build_request
from devhost.jobs.render import render_progress


def request(*argv: str) -> dict[str, Any]:
    return build_request(build_parser().parse_args(["ask", "What about refunds?", *argv]))


def test_agent_mode_sends_its_bounds_and_each_tool_once() -> None:
    body = request(
        "--mode", "agent", "--tools", "function.growth_rate, http.weather", "--tools", "function.growth_rate",
        "--max-turns", "3", "--max-tool-calls", "5",
    )  # fmt: skip
    assert body["mode"] == "agent"
    assert body["tools"] == ["function.growth_rate", "http.weather"]
    assert body["agent"] == {"max_turns": 3, "max_tool_calls": 5}
    assert "agent" not in request("--mode", "agent") and "tools" not in request("--mode", "agent")
    assert request("--mode", "agent", "--max-turns", "2")["agent"] == {"max_turns": 2}


def test_other_modes_send_their_tools_but_no_agent_fields() -> None:
    # A planned job allows tools too (python.run for its run_python steps); the agent bounds are agent mode's.
    body = request("--mode", "hybrid", "--tools", "python.run", "--max-turns", "3")
    assert body["mode"] == "hybrid" and body["tools"] == ["python.run"] and "agent" not in body


def test_approval_python_reaches_the_request() -> None:
    body = request("--tools", "python.run", "--approval-python", "writes_files")
    assert body["approval"] == {"sql": "never", "python": "writes_files"} and body["tools"] == ["python.run"]
    assert request()["approval"] == {"sql": "never"}  # the server's default applies


def shown(view: dict[str, Any]) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_progress(view))
    return console.export_text()


def test_agent_progress_shows_each_tool_call_with_its_turn_as_plain_text() -> None:
    view = {
        "id": "0123456789abcdef",
        "status": "running",
        "mode": "agent",
        "current_step_index": 1,
        "steps": [
            {
                "id": "t1",
                "kind": "consult_rag",
                "turn": 1,
                "state": "succeeded",
                "attempts": 1,
                "tool_input": '{"query": "[bold]refunds[/bold]"}',
                "tool_output": "2 passages: Refunds; Returns",
            },
            {"id": "t2", "kind": "request_user_feedback", "turn": 2, "state": "waiting", "attempts": 0},
        ],
    }
    text = shown(view)
    assert "agent mode" in text
    lines = [line for line in text.splitlines() if "consult_rag" in line or "request_user_feedback" in line]
    assert "│ 1  │ 1    │ consult_rag" in lines[0]
    # Model-written text is shown as written, not read as markup.
    assert '{"query": "[bold]refunds[/bold]"} → 2 passages: Refunds; Returns' in lines[0]
    assert "▶2 │ 2    │ request_user_feedback" in lines[1] and "waiting for your answer" in lines[1]


def test_an_agent_job_before_its_first_tool_call_shows_the_executor_at_work() -> None:
    text = shown({"id": "0123456789abcdef", "status": "running", "mode": "agent", "steps": []})
    assert "the Executor…" in text and "planning" not in text
