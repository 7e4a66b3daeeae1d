"""What does Durable orchestration add to a real job? The same job, the same executors, the same latencies.

Runs the mixed documents + SQL question two ways:
- inline: the old design, one in-process loop calling the executors (devhost.durable.inline drives the very
  same orchestrator body, with no state kept);
- durable: the app on a devhost process (SQLite state, replay, HTTP), timed from the history's
  ExecutionStarted to ExecutionCompleted.
Simulated latencies default to LLM 1 s, search 100 ms, SQL 50 ms (``BENCH_LATENCY_MS`` overrides).
Target: orchestration adds under 2 %.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.latency import latencies_from_env, latency_clients
from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors.runner import run_executor
from shared.jobs.models import JobInput, JobRequest
from tests.devhost.hostproc import DevHostProcess

QUESTION = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
APP_DIR = Path(__file__).resolve().parent / "apps" / "latency_job"
TARGET_PCT = 2.0


def _parse(ts: str) -> datetime:
    # .NET-style 7-digit fractions: keep microseconds for fromisoformat.
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", ts.replace("Z", "+00:00")))


def run_inline_jobs(count: int) -> list[float]:
    """Wall seconds of ``count`` inline jobs."""
    clients = latency_clients()
    times = []
    for i in range(count):
        job = JobInput(job_id=f"inline-{i}", request=JobRequest(question=QUESTION)).model_dump(mode="json")
        ctx = InlineContext(job, lambda name, payload: run_executor(payload, expected_type=name, clients=clients))
        start = time.perf_counter()
        result = run_inline(job_orchestrator_body, ctx)
        times.append(time.perf_counter() - start)
        assert result["status"] == "completed", result
    return times


def run_durable_jobs(count: int) -> list[float]:
    """Seconds from ExecutionStarted to ExecutionCompleted of ``count`` jobs on devhost, run one at a time."""
    with tempfile.TemporaryDirectory() as tmp:
        host = DevHostProcess(
            APP_DIR, Path(tmp) / "data", env={"BENCH_LATENCY_MS": os.environ.get("BENCH_LATENCY_MS", "")}
        )
        host.start()
        try:
            key = {"x-functions-key": host.keys.function} if host.keys else {}
            times = []
            for _ in range(count):
                resp = host.client.post("/api/jobs", json={"question": QUESTION}, headers=key)
                resp.raise_for_status()
                status = host.wait_status(resp.json()["id"], showHistory="true", timeout_s=120)
                assert status["runtimeStatus"] == "Completed", status
                events: list[dict[str, Any]] = status["historyEvents"]
                started = next(e for e in events if e["EventType"] == "ExecutionStarted")["Timestamp"]
                ended = next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"]
                times.append((_parse(ended) - _parse(started)).total_seconds())
            return times
        finally:
            host.stop()


def main(argv: list[str]) -> int:
    """Run both designs and print the overhead ratio."""
    count = int(os.environ.get("BENCH_JOBS", "5"))
    ms = latencies_from_env()
    print(
        f"job: mixed documents + SQL question, {count} runs each; simulated latency "
        f"LLM {ms['llm']} ms, search {ms['search']} ms, SQL {ms['sql']} ms"
    )
    inline = run_inline_jobs(count)
    durable = run_durable_jobs(count)
    inline_med, durable_med = statistics.median(inline), statistics.median(durable)
    overhead = (durable_med - inline_med) / inline_med * 100
    print(
        f"inline loop      median {inline_med * 1000:8.1f} ms  (min {min(inline) * 1000:.1f}, "
        f"max {max(inline) * 1000:.1f})"
    )
    print(
        f"durable devhost  median {durable_med * 1000:8.1f} ms  (min {min(durable) * 1000:.1f}, max "
        f"{max(durable) * 1000:.1f})"
    )
    print(
        f"orchestration overhead: {durable_med - inline_med:+.3f} s per job = {overhead:+.2f} % "
        f"(target < {TARGET_PCT} %: {'met' if overhead < TARGET_PCT else 'NOT met'})"
    )
    return 0
