"""Soak: memory and store size per job over a steady stream of real jobs, retention, and list-page time.

Method
- Soak: a real ``python -m devhost serve`` process runs the app itself (function_app.py: offline model,
  local document index, SQLite sample database) in a fresh data directory. After a warm-up of
  ``--warmup`` jobs, jobs are submitted through ``POST /api/jobs`` at ``--rate`` jobs/s for
  ``--seconds`` seconds (a mix of document and SQL questions, open loop, keep-alive connections), then
  drained. Host RSS (``VmRSS``) is sampled every 2 s with the number of jobs submitted; the growth per
  1,000 jobs is the least-squares slope over the run; "flat" compares the RSS at the end with the RSS a
  third of the way in (the target: within 10 %).
- Store: the Durable SQLite file per 1,000 jobs after the drain (read once the host stopped); then it restarts
  with JOB_HISTORY_RETENTION_DAYS of about a tenth of a second and JOB_HISTORY_PURGE_SCHEDULE every 2 s, so
  the app's own timer purges every finished job; the file size is read again once none is left.
- Listing: tests/apps/list_seed serves the real job API over instances that complete at once; job
  instances are seeded through the Durable HTTP API (as fast as the host takes them), and one page of
  ``GET /api/jobs?limit=20`` is timed (median of 7) at 1,000 and at ``--jobs`` (20,000) instances. For
  comparison the old approach (read every instance, then sort) is timed once.

Targets (issue 11): RSS flat within 10 % per 1,000 jobs; a page at 20,000 jobs within 2x of a page at 1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from api.job_list import durable_instances, new_job_id
from bench._devhost import (
    Figure,
    LeanHttp,
    host_pid,
    machine,
    print_table,
    rss_bytes,
    start_many,
    wait_until_none,
)
from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess

MB = 1024 * 1024
QUESTIONS = [
    "What does the returns policy say about refunds after 30 days?",
    "Which region had the most returns in Q3?",
]
SEED_APP = APPS_DIR / "list_seed"


def store_bytes(data_dir: Path) -> int:
    """Bytes of the Durable SQLite store (database and WAL) in a data directory."""
    return sum(p.stat().st_size for p in data_dir.glob("durable-*.sqlite3*") if not p.name.endswith(".lock"))


def count(host: DevHostProcess, statuses: str) -> int:
    """Instances in the given runtime statuses (read through the Durable HTTP API)."""
    params = {**host.system_code, "runtimeStatus": statuses, "showInput": "false", "top": "1000"}
    total, token = 0, None
    while True:
        headers: dict[str, str] = {"x-ms-continuation-token": token} if token else {}
        resp = host.client.get(host.webhook("instances"), params=params, headers=headers, timeout=120)
        resp.raise_for_status()
        total += len(resp.json())
        token = resp.headers.get("x-ms-continuation-token")
        if not token:
            return total


async def submit_at_rate(host: DevHostProcess, rate: float, seconds: float, samples: list[tuple[int, int]]) -> int:
    """Submit jobs at ``rate``/s for ``seconds``; RSS is sampled every 2 s as (jobs submitted, bytes)."""
    key = host.keys.function if host.keys else ""
    path = f"/api/jobs?code={key}"
    conns = [LeanHttp(host.port or 0) for _ in range(8)]
    free: asyncio.Queue[LeanHttp] = asyncio.Queue()
    for conn in conns:
        free.put_nowait(conn)
    submitted = 0
    failures: list[str] = []
    pid = host_pid(host)

    async def one(n: int) -> None:
        nonlocal submitted
        conn = await free.get()
        try:
            body = json.dumps({"question": QUESTIONS[n % len(QUESTIONS)]}).encode()
            status, payload = await conn.post(path, body)
            if status != 202:
                failures.append(f"{status}: {payload[:200]!r}")
            submitted += 1
        finally:
            free.put_nowait(conn)

    started = time.monotonic()
    next_sample = started
    tasks: list[asyncio.Task[None]] = []
    n = 0
    while (now := time.monotonic()) - started < seconds:
        due = started + n / rate
        if now >= next_sample:
            samples.append((submitted, rss_bytes(pid)))
            next_sample += 2.0
        if now < due:
            await asyncio.sleep(min(due - now, 0.05))
            continue
        tasks.append(asyncio.create_task(one(n)))
        n += 1
    await asyncio.gather(*tasks)
    samples.append((submitted, rss_bytes(pid)))
    for conn in conns:
        await conn.close()
    if failures:
        raise RuntimeError(f"{len(failures)} submits failed, e.g. {failures[0]}")
    return submitted


def drain(host: DevHostProcess, timeout_s: float) -> None:
    """Wait until no instance is Pending or Running."""
    wait_until_none(host, "Pending,Running", "", timeout_s)


def slope_per_1000(samples: list[tuple[int, int]]) -> float:
    """Least-squares RSS growth (bytes) per 1,000 jobs submitted."""
    xs = [float(x) for x, _ in samples]
    ys = [float(y) for _, y in samples]
    if len(samples) < 2 or max(xs) == min(xs):
        return 0.0
    return statistics.linear_regression(xs, ys).slope * 1000


def soak(args: argparse.Namespace, tmp: Path, figures: list[Figure]) -> None:
    data = tmp / "soak-data"
    env = {
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "PARTIAL_OUTPUT_PATH": str(tmp / "partial.sqlite3"),
        "JOB_HISTORY_PURGE_SCHEDULE": "0 0 0 1 1 *",  # not during the soak
    }
    host = DevHostProcess(REPO_ROOT, data, log_path=tmp / "soak.log", env=env).start()
    try:
        pid = host_pid(host)
        started_rss = rss_bytes(pid)
        samples: list[tuple[int, int]] = []
        asyncio.run(submit_at_rate(host, args.rate, max(1.0, args.warmup / args.rate), []))
        drain(host, 300)
        warm_rss = rss_bytes(pid)
        t0 = time.monotonic()
        jobs = asyncio.run(submit_at_rate(host, args.rate, args.seconds, samples))
        drain(host, 600)
        elapsed = time.monotonic() - t0
        end_rss = rss_bytes(pid)
        finished = count(host, "Completed,Failed,Terminated")
        failed = count(host, "Failed")
        total = finished
    finally:
        host.stop()
    size = store_bytes(data)  # after the stop: the WAL is checkpointed into the file and removed
    third = samples[len(samples) // 3][1]
    growth = slope_per_1000(samples)
    flat = abs(end_rss - third) / third
    figures += [
        Figure("jobs completed in the soak (incl. warm-up)", f"{total} ({failed} failed)", "", None),
        Figure(
            "jobs/s (submitted at a fixed rate, incl. drain)", f"{jobs / elapsed:.1f} (asked {args.rate:g})", "", None
        ),
        Figure(
            "host RSS: start / after warm-up / end",
            f"{started_rss / MB:.0f} / {warm_rss / MB:.0f} / {end_rss / MB:.0f} MiB",
            "",
            None,
        ),
        Figure("RSS growth per 1,000 jobs (slope over the run)", f"{growth / MB:+.1f} MiB", "", None),
        Figure("RSS at the end vs a third of the way in", f"{flat * 100:+.1f} %", "within 10 %", flat <= 0.10),
        Figure("SQLite store per 1,000 jobs, before retention", f"{size / total * 1000 / MB:.1f} MiB", "", None),
    ]
    # Retention: the app's own timer, every 2 s, with a retention of ~0.1 s.
    purge_env = dict(env, JOB_HISTORY_RETENTION_DAYS=str(0.1 / 86_400), JOB_HISTORY_PURGE_SCHEDULE="*/2 * * * * *")
    host = DevHostProcess(REPO_ROOT, data, log_path=tmp / "soak.log", env=purge_env).start()
    try:
        deadline = time.monotonic() + 300
        while count(host, "Completed,Failed,Terminated"):
            if time.monotonic() > deadline:
                raise RuntimeError("retention did not purge every finished job within 300 s")
            time.sleep(0.5)
        time.sleep(2.5)  # the run that purged the last ones also hands the pages back; let it end
    finally:
        host.stop()
    after = store_bytes(data)
    durations = [line for line in host.output().splitlines() if "Executed 'Functions.purge_job_history'" in line]
    longest = max((int(line.rsplit("Duration=", 1)[1].rstrip("ms)")) for line in durations), default=0)
    figures += [
        Figure(
            "SQLite store after retention purged them all",
            f"{after / MB:.1f} MiB ({size / MB:.0f} MiB before)",
            "",
            None,
        ),
        Figure("longest retention run (purge + space handed back)", f"{longest} ms", "", None),
    ]


def page_time(host: DevHostProcess, repeats: int = 7) -> float:
    """Median seconds for ``GET /api/jobs?limit=20`` (the first page)."""
    key = host.keys.function if host.keys else ""
    times = []
    with httpx.Client(base_url=host.base_url, headers={"x-functions-key": key}, timeout=120) as http:
        for _ in range(repeats):
            started = time.perf_counter()
            resp = http.get("/api/jobs", params={"limit": 20})
            times.append(time.perf_counter() - started)
            resp.raise_for_status()
            assert len(resp.json()["jobs"]) == 20
    return statistics.median(times)


def seed(host: DevHostProcess, n: int) -> None:
    """Start ``n`` job instances that complete at once (through the Durable HTTP API) and wait for them."""
    ids = [new_job_id() for _ in range(n)]
    for i in range(0, n, 2000):
        start_many(host, "job_orchestrator", ids[i : i + 2000], {"request": {"question": "seeded"}})
    drain(host, 600)


def listing(args: argparse.Namespace, tmp: Path, figures: list[Figure]) -> None:
    host = DevHostProcess(
        SEED_APP, tmp / "list-data", log_path=tmp / "list.log", env={"TASKHUB_NAME": "ListSeed"}
    ).start()
    try:
        t0 = time.monotonic()
        seed(host, 1000)
        small = page_time(host)
        seed(host, args.jobs - 1000)
        seeded_s = time.monotonic() - t0
        large = page_time(host)
        binding = json.dumps({"rpcBaseUrl": host.rpc_base_url()})
        started = time.perf_counter()
        everything: list[dict[str, Any]] = asyncio.run(durable_instances(binding, None))
        everything.sort(key=lambda d: (str(d.get("createdTime")), str(d.get("instanceId"))), reverse=True)
        full_scan = time.perf_counter() - started
    finally:
        host.stop()
    figures += [
        Figure(
            f"seeding {args.jobs:,} job instances (Durable HTTP API)",
            f"{args.jobs / seeded_s:.0f} instances/s",
            "",
            None,
        ),
        Figure("GET /api/jobs?limit=20 at 1,000 jobs (median)", f"{small * 1000:.0f} ms", "", None),
        Figure(
            f"GET /api/jobs?limit=20 at {args.jobs:,} jobs (median)",
            f"{large * 1000:.0f} ms",
            "<= 2x the 1,000 figure",
            large <= 2 * small,
        ),
        Figure(
            f"old approach at {args.jobs:,}: read all, then sort",
            f"{full_scan * 1000:.0f} ms ({len(everything):,} read)",
            "",
            None,
        ),
    ]


def main(argv: list[str]) -> int:
    """Run the soak and the listing benchmark; print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench soak")
    parser.add_argument("--rate", type=float, default=10.0, help="jobs submitted per second (default 10)")
    parser.add_argument("--seconds", type=float, default=120.0, help="soak duration (default 120 s)")
    parser.add_argument("--warmup", type=int, default=40, help="warm-up jobs before the baseline (default 40)")
    parser.add_argument("--jobs", type=int, default=20_000, help="instances for the listing figure (default 20,000)")
    parser.add_argument("--skip-soak", action="store_true")
    parser.add_argument("--skip-listing", action="store_true")
    args = parser.parse_args(argv)
    print(f"soak: {args.rate:g} jobs/s for {args.seconds:g} s; listing at 1,000 and {args.jobs:,} jobs; {machine()}")
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp_text:
        tmp = Path(tmp_text)
        if not args.skip_soak:
            soak(args, tmp, figures)
        if not args.skip_listing:
            listing(args, tmp, figures)
    print_table("Soak, retention and listing", figures)
    return 0 if all(f.met is not False for f in figures) else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
