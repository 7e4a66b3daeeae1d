"""(b) Throughput of the devhost engine: jobs/s for many concurrent 5-step no-op jobs.

Method
- A real ``python -m devhost serve`` process serves tests/apps/bench_noop (fresh SQLite data dir).
- After a warm-up, the benchmark starts ``BENCH_THROUGHPUT_JOBS`` (default 1,000) ``chain`` jobs of 5
  async no-op activities through the Durable HTTP API (``POST .../orchestrators/chain/<id>``, 16
  requests in flight from an asyncio httpx client in this process), then polls the list API (one
  ``top=1`` query every 100 ms) until none is Pending or Running.
- jobs/s = jobs / (last ExecutionCompleted in any job's history - moment the first start request
  was sent). Starts and completions overlap, as they would under real load; the client runs on
  the same 2 cores.
- Afterwards every job's status and history are read back: all must be Completed with the right
  output; their start-to-completion latency under load (history timestamps) is printed.
- The host's CPU time (``/proc/<pid>/stat``) over the run gives CPU per job, a figure less
  sensitive to other load on the machine.

Target (issue 2): >= 150 jobs/s.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

from bench._devhost import (
    Figure,
    bench_host,
    cpu_seconds,
    host_pid,
    machine,
    percentile,
    print_table,
    run_chain,
    start_many,
    timing_from_history,
    wait_until_none,
)
from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import DevHostProcess

TARGET_JOBS_PER_S = 150.0
STEPS = 5
CONCURRENCY = 16


def check_jobs(host: DevHostProcess, ids: list[str]) -> tuple[float, list[float]]:
    """Verify every job completed correctly; returns (latest completion epoch, per-job latencies in s)."""
    latest = 0.0
    latencies = []
    for instance_id in ids:
        resp = host.client.get(
            host.webhook(f"instances/{instance_id}"), params={**host.system_code, "showHistory": "true"}
        )
        resp.raise_for_status()
        status = resp.json()
        if status["runtimeStatus"] != "Completed" or status["output"]["steps"] != STEPS:
            raise RuntimeError(f"job {instance_id} ended wrongly: {status['runtimeStatus']} {status.get('output')}")
        events = status["historyEvents"]
        timing = timing_from_history(events, STEPS, 0.0, 0.0)
        ended = next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"]
        latest = max(latest, parse_history_time(ended))
        latencies.append(timing.wall_s)
    return latest, latencies


def main(argv: list[str]) -> int:
    """Start many concurrent jobs on a devhost process and print jobs/s."""
    count = int(os.environ.get("BENCH_THROUGHPUT_JOBS", "1000"))
    print(f"(b) throughput: {count} concurrent {STEPS}-step no-op jobs via the Durable HTTP API; {machine()}")
    with bench_host() as host:
        for _ in range(20):
            run_chain(host, STEPS)
        pid = host_pid(host)
        prefix = f"tp-{uuid.uuid4().hex[:8]}-"
        ids = [f"{prefix}{i:06d}" for i in range(count)]
        cpu_before, client_before = cpu_seconds(pid), time.process_time()
        first_sent = time.time()
        start_many(host, "chain", ids, {"steps": STEPS}, concurrency=CONCURRENCY)
        all_started = time.time()
        client_cpu = time.process_time() - client_before
        wait_until_none(host, "Pending,Running", prefix, timeout_s=600)
        cpu_used = cpu_seconds(pid) - cpu_before
        latest, latencies = check_jobs(host, ids)
    elapsed = latest - first_sent
    jobs_per_s = count / elapsed
    print(
        f"  {count} jobs completed in {elapsed:.2f} s (all start requests answered after "
        f"{all_started - first_sent:.2f} s); {count * STEPS / elapsed:.0f} activities/s"
    )
    print(
        f"  host CPU {cpu_used:.2f} s = {cpu_used / count * 1000:.2f} ms per job; load generator CPU "
        f"{client_cpu:.2f} s; job latency under load p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.0f} ms"
    )
    cpu_bound = count / cpu_used if cpu_used > 0 else float("inf")
    print_table(
        "(b) results",
        [
            Figure(
                "(b) jobs/s, 5-step no-op jobs",
                f"{jobs_per_s:.0f} jobs/s",
                f">= {TARGET_JOBS_PER_S:g}",
                jobs_per_s >= TARGET_JOBS_PER_S,
            ),
            Figure("(b) host-CPU-bound ceiling (jobs / host CPU s)", f"{cpu_bound:.0f} jobs/s", "", None),
        ],
    )
    return 0
