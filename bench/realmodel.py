"""The local llama.cpp server (Gemma 3 270M on CPU): time to first token, tokens/s, and a job's overhead.

``python -m bench realmodel`` needs the real-model tier (``make realmodel``); without it, it says so
and exits 0. Figures: median time to first token and output tokens/s over a few streamed calls (free
text and grammar-constrained JSON), then one job on a devhost over the same server: its wall time, the
chat calls the server served, and the orchestration share = 1 - (model time / wall time), where the
model time is the served calls times the in-process duration of the same planning call (warm prompt cache).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from tests.realmodel.server import MODEL_NAME, LlamaServer, installed

PROMPT = "Summarise in one paragraph why durable orchestrations suit long-running AI jobs. " * 12
RUNS = 3
# A chat call the server answered (refused output modes are answered at once with a 500, not counted).
SERVED = '"POST /v1/chat/completions HTTP/1.1" 200'


def _streamed(
    client: openai.OpenAI, run: int, max_tokens: int, response_format: dict[str, Any] | None
) -> tuple[float, float]:
    """(time to first token s, output tokens/s) of one streamed call; one SSE chunk is one token here.

    Each run's prompt starts differently, so the server reads it whole (no prompt cache).
    """
    start = time.perf_counter()
    first: float | None = None
    chunks = 0
    if response_format is None:
        # Free text: the completions endpoint (no chat template), so the base model just continues.
        text_stream = client.completions.create(
            model=MODEL_NAME, prompt=f"Run {run}. {PROMPT}", max_tokens=max_tokens, stream=True, temperature=0.0
        )
        for piece in text_stream:
            if piece.choices and piece.choices[0].text:
                chunks += 1
                first = first or time.perf_counter()
    else:
        body: dict[str, Any] = {
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": f"Run {run}. {PROMPT}"}],
            "max_tokens": max_tokens,
            "stream": True,
            "temperature": 0.0,
            "response_format": response_format,
        }
        for chunk in client.chat.completions.create(**body):
            if chunk.choices and chunk.choices[0].delta.content:
                chunks += 1
                first = first or time.perf_counter()
    end = time.perf_counter()
    ttft = (first or end) - start
    return ttft, (chunks - 1) / max(end - (first or end), 1e-9) if chunks > 1 else 0.0


def _job(server: LlamaServer, work: Path) -> dict[str, Any]:
    from shared.executors.runner import run_executor
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings
    from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
    from tests.jobs.jobclient import JobClient

    question = "Which region had the most returns in Q3?"
    constraints = {"max_tokens": 320, "timeout_ms": 180_000}
    settings = Settings(llm_provider="openai", openai_base_url=server.base_url, openai_model=MODEL_NAME)
    payload = {
        "task_id": "bench-plan",
        "executor_type": "plan",
        "task": {"question": question},
        "execution_context": {"job_id": "bench", "step_id": "plan"},
        "constraints": constraints,
    }
    clients = Clients(settings)
    run_executor(payload, clients=clients)  # fills the server's prompt cache, as the job's call will find it
    start = time.perf_counter()
    run_executor(payload, clients=clients)
    call_s = time.perf_counter() - start
    served_before = server.output().count(SERVED)
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_MODEL": MODEL_NAME,
        "MODEL_PRICES": json.dumps({MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}}),
        "PARTIAL_OUTPUT_PATH": str(work / "partial.sqlite3"),
    }
    host = DevHostProcess(REPO_ROOT, work / "host", env=env).start()
    try:
        jobs = JobClient(host)
        start = time.perf_counter()
        job_id = jobs.submit(question, constraints=constraints)
        view = jobs.wait(job_id, timeout_s=600, allow_waiting=True, until={"completed", "failed", "waiting_for_user"})
        wall_s = time.perf_counter() - start
    finally:
        host.stop()
    requests = server.output().count(SERVED) - served_before
    model_s = requests * call_s
    return {
        "status": view["status"],
        "wall_s": wall_s,
        "requests": requests,
        "call_s": call_s,
        "share": max(0.0, 1 - model_s / wall_s),
        "tokens": view["usage"]["total"]["total_tokens"],
    }


def main(argv: list[str]) -> int:
    """Print the local server's figures (skips with a note when the tier is not installed)."""
    missing = installed()
    if missing is not None:
        print(f"skipped: {missing}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = LlamaServer(work / "server.log").start()
        try:
            client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=300)
            _streamed(client, 0, 8, None)  # warm up: load the model's pages
            schema = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
            for label, fmt in (("free text", None), ("grammar JSON", {"type": "json_object", "schema": schema})):
                runs = [_streamed(client, run, 64, fmt) for run in range(1, RUNS + 1)]
                ttft = statistics.median(r[0] for r in runs)
                tps = statistics.median(r[1] for r in runs)
                print(
                    f"{label:>12}: time to first token {ttft * 1000:6.0f} ms (~230-token prompt), {tps:5.1f} tokens/s"
                )
            job = _job(server, work)
        finally:
            server.stop()
    print(
        f"job: {job['status']} in {job['wall_s']:.1f} s, {job['requests']} served chat calls "
        f"of ~{job['call_s']:.1f} s, "
        f"{job['tokens']} tokens counted; orchestration share ~{job['share'] * 100:.0f} %"
    )
    return 0
