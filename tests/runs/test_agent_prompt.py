"""A workflow's agent reaches a real model: its instructions are in the Executor's prompt, below its rules."""

from __future__ import annotations

from shared.providers.interfaces import LLMTask
from shared.providers.llm.prompts import render_prompt

INPUTS = {"question": "Refund time?", "tools": [], "transcript": [], "turns_left": 2, "calls_left": 2}


def test_the_agents_instructions_follow_the_rules_in_the_system_prompt() -> None:
    played = render_prompt(LLMTask.AGENT_TURN, {**INPUTS, "instructions": "You are a terse auditor."})
    assert played.system.rstrip().endswith("You are a terse auditor.")
    assert played.system.index("Untrusted data") < played.system.index("You play this agent")
    plain = render_prompt(LLMTask.AGENT_TURN, INPUTS)
    assert "You play this agent" not in plain.system and plain.user == played.user
