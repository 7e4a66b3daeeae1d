"""Workflow pieces the inline run tests (tests/runs) and the end-to-end ones (tests/e2e) both build.

Plain definition dicts only (no app imports): each call returns a fresh dict, so a test may change its copy.
"""

from __future__ import annotations

from typing import Any

TOOL = "function.percent_change"
PROMPT = {"prompt": {"value": "How did sales grow?"}}
# An agent that may use the percent-change tool, with per-call limits its turns and answer must carry.
AGENT: dict[str, Any] = {
    "kind": "agent",
    "id": "analyst",
    "name": "Analyst",
    "instructions": "You are a careful analyst. Answer in one sentence.",
    "tools": [TOOL],
    "limits": {"max_turns": 2, "max_tool_calls": 2},
    "constraints": {"max_tokens": 800, "temperature": 0.3, "timeout_ms": 5000},
}


def change(node_id: str, old: Any, new: Any = 100, **extra: Any) -> dict[str, Any]:
    """A tool node: the percent change from ``old`` (a value source) to the value ``new`` (0 as old fails it)."""
    return {"id": node_id, "kind": "tool", "tool": TOOL, "input": {"old": old, "new": {"value": new}}, **extra}


def human(node_id: str, question: str, options: list[str], **extra: Any) -> dict[str, Any]:
    """A human node asking ``question`` with these options."""
    return {"id": node_id, "kind": "human", "question": {"value": question}, "options": options, **extra}


def report_nodes() -> list[dict[str, Any]]:
    """Look the topic up in the documents; found: the growth from ``input.old``, else a change that is skipped."""
    return [
        {"id": "docs", "kind": "step", "step": "consult_rag", "input": {"query": {"from": "input.topic"}}},
        {
            "id": "found",
            "kind": "condition",
            "after": ["docs"],
            "if": {"left": "docs.chunks", "op": "truthy"},
            "then": ["growth"],
            "else": ["nothing"],
        },
        change("growth", {"from": "input.old"}),
        change("nothing", {"value": 1}),
    ]


def thinking(wf_id: str = "ask", **extra: Any) -> dict[str, Any]:
    """A workflow of one agent node ``think`` running the analyst (v1) on PROMPT."""
    node = {"id": "think", "kind": "agent", "agent": AGENT["id"], "version": 1, "input": PROMPT}
    return {"id": wf_id, "name": "Ask", "nodes": [node], **extra}
