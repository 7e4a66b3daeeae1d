"""The Executor's turn time on the local llama.cpp server, per agent_turn prompt version: what the cache saves.

``python -m bench agent_turn_cache`` needs the real-model tier (``make realmodel``); without it, it says so and
exits 0. For each prompt version (v2: the counters in the system message; v3: they come last), two turns of
one job through the agent_turn executor: the first reads the whole prompt, the second differs by one transcript
record and the counters. llama.cpp re-reads a prompt from its first changed token, so the second turn's time to
first token shows how much of the prompt it could keep (the rest of a turn is grammar-constrained generation,
which the cache does not change). Figures are wall times on a shared machine, plus the server's CPU seconds
(user + system), which load moves less.
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
# Enough output to show the model works; the cache shows in the time to first token.
MAX_TOKENS = 48


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _turn(server: LlamaServer, clients: Any, transcript: list[dict[str, Any]], left: tuple[int, int]) -> dict[str, Any]:
    """One Executor turn through the provider: wall and server CPU seconds to the first token, and in all."""
    from shared.executors.agent_turn import tool_catalog, turn_output_model
    from shared.providers.interfaces import LLMRequest, LLMTask

    assert server.proc is not None
    pid = server.proc.pid
    catalog = tool_catalog([], clients)
    inputs = {"question": QUESTION, "tools": catalog, "transcript": transcript, "turns_left": left[0]}
    inputs["calls_left"] = left[1]
    first: list[tuple[float, float]] = []

    def on_delta(_text: str) -> None:
        if not first:
            first.append((time.perf_counter(), _cpu_s(pid)))

    request = LLMRequest(
        task=LLMTask.AGENT_TURN,
        inputs=inputs,
        output_type=turn_output_model(tuple(sorted(t["name"] for t in catalog))),
        max_tokens=MAX_TOKENS,
        timeout_s=600,
        on_delta=on_delta,
    )
    cpu0, start = _cpu_s(pid), time.perf_counter()
    try:
        response = clients.llm.generate(request)
        status, tokens_in = "ok", response.tokens_input
    except Exception as exc:  # a tiny model's reply may not validate; the timing still counts
        status, tokens_in = type(exc).__name__, getattr(getattr(exc, "usage", None), "tokens_input", 0)
    end, cpu1 = time.perf_counter(), _cpu_s(pid)
    at, cpu_at = first[0] if first else (end, cpu1)
    return {
        "ttft_s": at - start,
        "ttft_cpu_s": cpu_at - cpu0,
        "wall_s": end - start,
        "cpu_s": cpu1 - cpu0,
        "status": status,
        "tokens_in": tokens_in,
    }


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
                try:
                    first = _turn(server, clients, [], (8, 12))
                    second = _turn(server, clients, [RECORD], (7, 11))
                finally:
                    prompts.PROMPT_VERSIONS[LLMTask.AGENT_TURN] = kept
                for label, turn in (("turn 1", first), ("turn 2", second)):
                    print(
                        f"agent_turn.{version} {label}: first token after {turn['ttft_s']:6.1f} s wall, "
                        f"{turn['ttft_cpu_s']:5.1f} s server CPU; whole turn {turn['wall_s']:6.1f} s wall, "
                        f"{turn['cpu_s']:5.1f} s server CPU (~{turn['tokens_in']} prompt tokens, {turn['status']})",
                        flush=True,
                    )
        finally:
            server.stop()
    return 0
