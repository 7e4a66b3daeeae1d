"""The Executor's turn time on the local llama.cpp server, per agent_turn prompt version: what the cache saves.

``python -m bench agent_turn_cache`` needs the real-model tier (``make realmodel``); without it, it says so and
exits 0. For each prompt version (v2: the counters in the system message; v3: they come last), two turns of
one job through the agent_turn executor: the first reads the whole prompt, the second differs by one transcript
record and the counters. llama.cpp re-reads a prompt from its first changed token, so the second turn's time
shows how much of the prompt it could keep. Each turn asks for one output token, so its time is the prompt's
reading. Figures are wall times on a shared machine, plus the server's CPU seconds (user + system), which load
moves less.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.realmodel.server import MODEL_NAME, LlamaServer, installed

QUESTION = "What does the returns policy say about refunds after 30 days?"
RECORD = {
    "id": "c1",
    "tool": "consult_rag",
    "arguments": {"query": "refunds after 30 days"},
    "success": True,
    "step": "t1",
    "data": {
        "chunks": [
            {
                "source_id": "returns-policy#2",
                "title": "Returns policy",
                "content": "Refunds after 30 days are given as store credit only, except for faulty goods.",
            }
        ]
    },
}
# One output token: the turn is then the server reading its prompt, which is what the cache saves (the rest of a
# turn is grammar-constrained generation, the same either way; the reply is cut, which is expected here).
MAX_TOKENS = 1


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _turn(server: LlamaServer, clients: Any, transcript: list[dict[str, Any]], left: tuple[int, int]) -> dict[str, Any]:
    """One Executor turn through the provider: its wall and server CPU seconds."""
    from shared.executors.agent_turn import tool_catalog, turn_output_model
    from shared.providers.interfaces import LLMRequest, LLMTask

    assert server.proc is not None
    pid = server.proc.pid
    catalog = tool_catalog([], clients)
    inputs = {"question": QUESTION, "tools": catalog, "transcript": transcript, "turns_left": left[0]}
    inputs["calls_left"] = left[1]
    request = LLMRequest(
        task=LLMTask.AGENT_TURN,
        inputs=inputs,
        output_type=turn_output_model(tuple(sorted(t["name"] for t in catalog))),
        max_tokens=MAX_TOKENS,
        timeout_s=600,
    )
    cpu0, start = _cpu_s(pid), time.perf_counter()
    try:
        tokens_in = clients.llm.generate(request).tokens_input
    except Exception as exc:  # one token is no valid reply: the error still carries the prompt's count
        tokens_in = getattr(getattr(exc, "usage", None), "tokens_input", 0)
    return {"wall_s": time.perf_counter() - start, "cpu_s": _cpu_s(pid) - cpu0, "tokens_in": tokens_in}


def main(argv: list[str]) -> int:
    """Print each prompt version's first and second turn times (skips when the tier is not installed)."""
    missing = installed()
    if missing is not None:
        print(f"skipped: {missing}")
        return 0
    from shared.providers.clients import Clients
    from shared.providers.interfaces import LLMTask
    from shared.providers.llm import prompts
    from shared.runtime.settings import Settings

    versions = argv or ["v2", "v3"]
    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaServer(Path(tmp) / "server.log").start()
        try:
            settings = Settings(llm_provider="openai", openai_base_url=server.base_url, openai_model=MODEL_NAME)
            clients = Clients(settings)
            kept = prompts.PROMPT_VERSIONS[LLMTask.AGENT_TURN]
            for version in versions:
                prompts.PROMPT_VERSIONS[LLMTask.AGENT_TURN] = version
                prompts.load_prompt.cache_clear()  # the loaded template is cached per task
                try:
                    first = _turn(server, clients, [], (8, 12))
                    second = _turn(server, clients, [RECORD], (7, 11))
                finally:
                    prompts.PROMPT_VERSIONS[LLMTask.AGENT_TURN] = kept
                    prompts.load_prompt.cache_clear()
                for label, turn in (("turn 1", first), ("turn 2", second)):
                    print(
                        f"agent_turn.{version} {label}: prompt read in {turn['wall_s']:6.1f} s wall, "
                        f"{turn['cpu_s']:5.1f} s server CPU (~{turn['tokens_in']} prompt tokens)",
                        flush=True,
                    )
        finally:
            server.stop()
    return 0
