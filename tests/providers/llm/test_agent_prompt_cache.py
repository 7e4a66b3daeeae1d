"""The Executor's prompt keeps what changes between turns at its end, so a server can reuse its cache of the rest."""

from __future__ import annotations

import os

from shared.providers.interfaces import LLMTask
from shared.providers.llm.prompts import render_prompt

TOOLS = [{"name": "consult_rag", "description": "Search the documents.", "parameters": {"type": "object"}}]
FIRST = {"id": "c1", "tool": "consult_rag", "success": True, "data": {"chunks": [{"source_id": "p#1"}]}}
SECOND = {"id": "c2", "tool": "execute_azure_sql", "success": False, "error": {"code": "SQL_ERROR", "message": "x"}}


def _turn(transcript: list[dict[str, object]], turns_left: int, calls_left: int) -> str:
    rendered = render_prompt(
        LLMTask.AGENT_TURN,
        {
            "question": "Refund time?",
            "tools": TOOLS,
            "transcript": transcript,
            "turns_left": turns_left,
            "calls_left": calls_left,
            "instructions": "Be brief.",
        },
    )
    return rendered.system + "\n" + rendered.user


def test_consecutive_turns_share_the_prompt_up_to_the_transcripts_new_calls() -> None:
    one, two = _turn([FIRST], 7, 9), _turn([FIRST, SECOND], 6, 8)
    common = os.path.commonprefix([one, two])
    # Everything before the transcript, and the first call's record, is the same text on both turns.
    assert one.index('"source_id": "p#1"') < len(common)
    # The counters come last, after the transcript, and nowhere else.
    assert one.rstrip().endswith("Bounds: you have 7 turns and 9 tool calls left.")
    assert one.count("7 turns") == 1 and one.index("The tool calls so far") < one.index("7 turns")
