"""What does the agent loop add per tool call? Agent jobs of N cheap tool calls on a devhost process.

Method
- A real ``python -m devhost serve`` process serves bench/apps/agent_job: the product's blueprints, with a
  scripted Executor (each turn calls the built-in ``function.percent_change`` up to 8 times until the
  job's ``max_tool_calls`` = N are spent, then ``format_output``) and every activity timed from inside
  its body. One job is in flight at a time, on embedded defaults (SQLite state, offline answer writer).
- A job of N calls runs ceil(N/8) + 1 Executor turns, N ``call_tool`` activities and the answer step.
  Its wall time is the history's ExecutionStarted to ExecutionCompleted (server clock, no HTTP polling);
  the activities' own time is the time during which at least one body ran (the calls of one turn start
  together, so their bodies overlap and a sum would count shared time twice). Everything else is
  orchestration: the episodes and
  their replays, the state commits, the custom status the loop publishes after every call, dispatch.
- Overhead per tool call = (wall - time covered by activity bodies) / N, median over jobs; the whole job's overhead
  (the turns and the answer step included) is charged to its tool calls. The marginal cost of one more
  call (the slope between the smallest and largest sizes) and the host process's CPU time per call
  outside the activity bodies (which moves less with other load on the machine) are printed too.

Target: at most 5 ms per tool call on top of the tool's own time, read at a job's default bound
(``max_tool_calls`` = 12). Replay makes each episode cost more as the history grows, so the figure rises
with N; the other sizes show how. ``BENCH_AGENT_JOBS=4:10,12:10,32:5`` sets (calls, jobs) pairs.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench._devhost import Figure, cpu_seconds, history, host_pid, machine, percentile, print_rows, print_table
from devhost.durable.timeutil import parse_history_time
from shared.jobs.agent import AgentLimits
from tests.devhost.hostproc import DevHostProcess

APP_DIR = Path(__file__).resolve().parent / "apps" / "agent_job"
TOOL = "function.percent_change"
TARGET_MS = 5.0
DEFAULT_CALLS = AgentLimits().max_tool_calls
DEFAULT_SIZES = ((4, 10), (DEFAULT_CALLS, 10), (32, 5))
WARMUP_JOBS = 3


@dataclass(frozen=True)
class AgentJob:
    """One finished agent job: its tool calls, wall time and the time inside its activities."""

    calls: int
    activities: int
    wall_s: float
    body_s: float
    # The bodies' times added up: what they cost in CPU when they ran side by side on the host's threads.
    body_sum_s: float = 0.0

    @property
    def overhead_per_call_ms(self) -> float:
        """(wall - activity bodies) / tool calls, in ms."""
        return (self.wall_s - self.body_s) / self.calls * 1000


def sizes_from_env() -> list[tuple[int, int]]:
    """(tool calls, jobs) pairs from ``BENCH_AGENT_JOBS`` or the defaults."""
    text = os.environ.get("BENCH_AGENT_JOBS", "")
    if not text.strip():
        return list(DEFAULT_SIZES)
    return [(int(calls), int(jobs)) for calls, _, jobs in (item.partition(":") for item in text.split(","))]


def body_times(path: Path, job_id: str) -> list[tuple[float, float]]:
    """(start, seconds) of each activity body of one job, from the file the bench app appends to."""
    prefix = f"{job_id}:"
    rows = (line.split() for line in path.read_text(encoding="utf-8").splitlines())
    return [(float(start), float(seconds)) for task_id, seconds, start in rows if task_id.startswith(prefix)]


def covered(bodies: list[tuple[float, float]]) -> float:
    """Seconds during which at least one activity body ran (bodies of one turn's calls overlap)."""
    total, reach = 0.0, float("-inf")
    for start, seconds in sorted(bodies):
        end = start + seconds
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def run_job(host: DevHostProcess, times: Path, calls: int) -> AgentJob:
    """Submit one agent job of ``calls`` tool calls, wait for it, and time it from its history."""
    key = {"x-functions-key": host.keys.function} if host.keys else {}
    body = {
        "question": "How did the figures change?",
        "mode": "agent",
        "tools": [TOOL],
        "agent": {"max_turns": 32, "max_tool_calls": calls},
    }
    resp = host.client.post("/api/jobs", json=body, headers=key)
    resp.raise_for_status()
    job_id = str(resp.json()["id"])
    status = host.wait_status(job_id, timeout_s=300)
    if status["runtimeStatus"] != "Completed" or (status.get("output") or {}).get("status") != "completed":
        raise RuntimeError(f"agent job {job_id} did not complete: {status}")
    events = history(host, job_id)
    tools = sum(1 for e in events if e["EventType"] == "TaskCompleted" and e.get("FunctionName") == "call_tool")
    if tools != calls:
        raise RuntimeError(f"expected {calls} tool calls in the history of {job_id}, found {tools}")
    started = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionStarted")["Timestamp"])
    ended = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"])
    bodies = body_times(times, job_id)
    completed = sum(1 for e in events if e["EventType"] == "TaskCompleted")
    if len(bodies) != completed:
        raise RuntimeError(f"{len(bodies)} timed activity bodies for {completed} completed activities of {job_id}")
    return AgentJob(
        calls=calls,
        activities=completed,
        wall_s=ended - started,
        body_s=covered(bodies),
        body_sum_s=sum(s for _, s in bodies),
    )


@contextmanager
def agent_job_host(prefix: str) -> Iterator[tuple[DevHostProcess, Path]]:
    """A devhost process on the agent bench app, and the file its activities append their body times to."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        times = Path(tmp) / "bodies.txt"
        times.touch()
        host = DevHostProcess(APP_DIR, Path(tmp) / "data", env={"BENCH_BODY_TIMES": str(times)})
        host.start()
        try:
            yield host, times
        finally:
            host.stop()


def main(argv: list[str]) -> int:
    """Run agent jobs of each size on a devhost process and print the overhead per tool call."""
    sizes = sizes_from_env()
    print(f"agent loop: orchestration overhead per tool call, cheap function tool, one job in flight; {machine()}")
    results: dict[int, list[AgentJob]] = {}
    cpu_ms: dict[int, float] = {}
    with agent_job_host("agent-bench-") as (host, times):
        for _ in range(WARMUP_JOBS):
            run_job(host, times, sizes[0][0])
        pid = host_pid(host)
        for calls, jobs in sizes:
            cpu_before = cpu_seconds(pid)
            results[calls] = [run_job(host, times, calls) for _ in range(jobs)]
            # The activities run inside the host process: their bodies' time is taken off its CPU time.
            spent = cpu_seconds(pid) - cpu_before - sum(r.body_sum_s for r in results[calls])
            cpu_ms[calls] = spent * 1000 / (calls * jobs)

    rows = []
    for calls, runs in results.items():
        per_call = [r.overhead_per_call_ms for r in runs]
        rows.append(
            [
                f"{calls} calls",
                str(len(runs)),
                str(runs[0].activities),
                f"{statistics.median(r.wall_s for r in runs) * 1000:.1f}",
                f"{statistics.median(r.body_s for r in runs) * 1000:.1f}",
                f"{statistics.median(per_call):.2f}",
                f"{percentile(per_call, 90):.2f}",
                f"{cpu_ms[calls]:.2f}",
            ]
        )
    headers = ["job", "jobs", "activities", "wall ms", "bodies ms", "per call p50", "per call p90", "host CPU/call"]
    print_rows(headers, rows)
    print("  (ms; host CPU/call: the host process's CPU time outside the activity bodies, per tool call)")
    figures = []
    for calls, runs in results.items():
        median_ms = statistics.median(r.overhead_per_call_ms for r in runs)
        target = calls == DEFAULT_CALLS
        figures.append(
            Figure(
                f"agent overhead per tool call, {calls} calls (p50)",
                f"{median_ms:.2f} ms",
                f"<= {TARGET_MS:g} ms" if target else "",
                median_ms <= TARGET_MS if target else None,
            )
        )
    smallest, largest = min(results), max(results)
    if smallest != largest:
        total = {n: statistics.median((r.wall_s - r.body_s) * 1000 for r in results[n]) for n in (smallest, largest)}
        slope = (total[largest] - total[smallest]) / (largest - smallest)
        figures.append(
            Figure(f"marginal overhead of one more call ({smallest}..{largest})", f"{slope:.2f} ms", "", None)
        )
    print_table("agent loop overhead", figures)
    return 0
