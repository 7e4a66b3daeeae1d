"""(a) Per-activity orchestration overhead of the devhost engine, p50 and p99, for sequential no-op jobs.

Method
- A real ``python -m devhost serve`` process serves tests/apps/bench_noop (fresh SQLite data dir,
  the host's default WAL settings). One job is in flight at a time.
- A job is the ``chain`` orchestrator: N async no-op activities one after the other. Each activity
  measures its own body with ``perf_counter`` and returns that duration; the orchestrator returns
  the sum, so the time inside activity bodies is known exactly.
- Job wall time is client-observed: from sending the start request (Durable HTTP API in wait mode,
  ``?timeout=``) to receiving the response that carries the output. It therefore includes the HTTP
  start, every replay, every SQLite commit, activity dispatch and the final completion commit.
- Overhead per activity = (job wall time - time inside activity bodies) / N. p50 and p99 are taken
  over jobs (nearest rank). Also printed: the same figure from the stored history (ExecutionStarted
  to ExecutionCompleted, server clock, no HTTP) and the distribution of single steps (gap between
  consecutive TaskCompleted events), which shows tail stalls that averaging over a job hides.
- A 20-step run with sync activities (thread pool) is printed for information.

Target (issue 2): p50 <= 3 ms at 20 steps. Anchor goals G-a1 (p99 <= 25 ms up to 20 steps) and G-a2
(p50 <= 10 ms at 100 steps) are shown too. ``BENCH_OVERHEAD_JOBS=5:200,20:100,100:30`` overrides sizes.
"""

from __future__ import annotations

import os
import statistics

from bench._devhost import (
    Figure,
    JobTiming,
    bench_host,
    cpu_seconds,
    finish_timing,
    host_pid,
    machine,
    percentile,
    print_rows,
    print_table,
    run_chain,
    start_chain,
)

DEFAULT_SIZES = ((5, 200), (20, 100), (100, 30))
TARGET_P50_MS_AT_20 = 3.0
ANCHOR_P99_MS_UP_TO_20 = 25.0
ANCHOR_P50_MS_AT_100 = 10.0
WARMUP_JOBS = 20


def sizes_from_env() -> list[tuple[int, int]]:
    """(steps, jobs) pairs from ``BENCH_OVERHEAD_JOBS`` or the defaults."""
    text = os.environ.get("BENCH_OVERHEAD_JOBS", "")
    if not text.strip():
        return list(DEFAULT_SIZES)
    pairs = []
    for item in text.split(","):
        steps, _, jobs = item.partition(":")
        pairs.append((int(steps), int(jobs)))
    return pairs


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1000.0


def summarise(steps: int, runs: list[JobTiming]) -> dict[str, float]:
    """p50/p99 of the client-observed and history-based overhead per activity, and of single steps (ms)."""
    client = [ms((r.client_s - r.body_s) / steps) for r in runs]
    server = [ms(r.overhead_per_step_s) for r in runs]
    gaps = [ms(g) for r in runs for g in r.step_s]
    return {
        "p50": percentile(client, 50),
        "p99": percentile(client, 99),
        "server_p50": percentile(server, 50),
        "server_p99": percentile(server, 99),
        "step_p50": percentile(gaps, 50),
        "step_p99": percentile(gaps, 99),
        "job_ms": statistics.median(ms(r.client_s) for r in runs),
        "body_us": statistics.median(r.body_s / steps * 1e6 for r in runs),
    }


def main(argv: list[str]) -> int:
    """Run the sequential jobs on a devhost process and print the overhead table."""
    sizes = sizes_from_env()
    print(f"(a) per-activity orchestration overhead, sequential no-op jobs, one in flight; {machine()}")
    results: dict[tuple[int, bool], dict[str, float]] = {}
    jobs_of: dict[tuple[int, bool], int] = {}
    with bench_host() as host:
        for _ in range(WARMUP_JOBS):
            run_chain(host, 5)
        plan = [(steps, jobs, False) for steps, jobs in sizes] + [(20, min(50, dict(sizes).get(20, 50)), True)]
        pid = host_pid(host)
        for steps, jobs, sync in plan:
            cpu_before = cpu_seconds(pid)
            raw = [start_chain(host, steps, sync=sync) for _ in range(jobs)]
            cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / (steps * jobs)
            results[(steps, sync)] = summarise(steps, [finish_timing(host, r) for r in raw])
            results[(steps, sync)]["cpu_ms"] = cpu_ms
            jobs_of[(steps, sync)] = jobs

    rows = [
        [
            f"{steps} x {'sync' if sync else 'async'}",
            str(jobs_of[(steps, sync)]),
            f"{r['job_ms']:.1f}",
            f"{r['p50']:.2f}",
            f"{r['p99']:.2f}",
            f"{r['server_p50']:.2f}",
            f"{r['server_p99']:.2f}",
            f"{r['step_p50']:.2f}",
            f"{r['step_p99']:.2f}",
            f"{r['cpu_ms']:.2f}",
        ]
        for (steps, sync), r in results.items()
    ]
    headers = ["activities", "jobs", "job ms p50", "ovh p50", "ovh p99", "hist p50", "hist p99", "step p50", "step p99"]
    headers.append("host CPU")
    print(
        "  ms per activity. ovh = (client wall - activity bodies) / activities; hist = the same from the stored\n"
        "  history; step = gap between consecutive TaskCompleted; host CPU = devhost process CPU / activities\n"
        "  (wall figures well above host CPU mean the host waited for a core: other load on the machine)"
    )
    print_rows(headers, rows)
    body_us = results[(sizes[0][0], False)]["body_us"]
    print(f"  (time inside the no-op activity bodies: ~{body_us:.1f} µs per activity)")

    figures: list[Figure] = []
    for steps, _ in sizes:
        r = results[(steps, False)]
        if steps == 20:
            figures.append(
                Figure(
                    "(a) overhead/activity p50, 20 steps",
                    f"{r['p50']:.2f} ms",
                    f"<= {TARGET_P50_MS_AT_20:g} ms",
                    r["p50"] <= TARGET_P50_MS_AT_20,
                )
            )
        else:
            target = ANCHOR_P50_MS_AT_100 if steps == 100 else None
            figures.append(
                Figure(
                    f"(a) overhead/activity p50, {steps} steps",
                    f"{r['p50']:.2f} ms",
                    f"<= {target:g} ms (anchor G-a2)" if target else "",
                    r["p50"] <= target if target else None,
                )
            )
        anchor = steps <= 20
        figures.append(
            Figure(
                f"(a) overhead/activity p99, {steps} steps",
                f"{r['p99']:.2f} ms",
                f"<= {ANCHOR_P99_MS_UP_TO_20:g} ms (anchor G-a1)" if anchor else "",
                r["p99"] <= ANCHOR_P99_MS_UP_TO_20 if anchor else None,
            )
        )
    sync20 = results[(20, True)]
    figures.append(Figure("(a) overhead/activity p50, 20 sync steps", f"{sync20['p50']:.2f} ms", "", None))
    if 20 in dict(sizes):
        cpu20 = results[(20, False)]["cpu_ms"]
        figures.append(Figure("(a) host CPU per activity, 20 steps", f"{cpu20:.2f} ms", "", None))
    print_table("(a) results", figures)
    return 0
