"""What each job's cost adds to ``GET /api/jobs``: the list of N ended jobs, before and after.

One devhost data directory with N ended jobs (the offline model, a documents question each), read by:
- ``before``: another app directory without the list's cost (``--before-app``, e.g. a checkout of main),
- ``cold``: this app the first time (each page sums at most MAX_RECORDS_PER_LIST jobs from their histories),
- ``warm``: this app once every job's summary is kept (one lookup per page).
Prints wall time per full listing (pages of 100) and the host's CPU seconds for it; no assert (bench/).

Usage: ``.venv/bin/python -m bench.list_costs --jobs 200 --before-app /work/main``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

QUESTION = "What does the returns policy say about refunds after 30 days?"
PAGE = 100


def host_cpu_s(host: DevHostProcess) -> float:
    """User + system CPU seconds of the host process and its waited-for children."""
    assert host.proc is not None
    fields = Path(f"/proc/{host.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / 100.0


def list_all(client: httpx.Client) -> tuple[int, int]:
    """Every job, page by page; (jobs listed, jobs with a cost)."""
    cursor: str | None = None
    listed = costed = 0
    while True:
        params = {"limit": str(PAGE), **({"cursor": cursor} if cursor else {})}
        body = client.get("/api/jobs", params=params).raise_for_status().json()
        listed += len(body["jobs"])
        costed += sum(1 for j in body["jobs"] if j.get("cost"))
        cursor = body.get("next_cursor")
        if not cursor:
            return listed, costed


def measure(host: DevHostProcess, label: str, rounds: int) -> None:
    assert host.keys is not None
    client = httpx.Client(base_url=host.base_url, headers={"x-functions-key": host.keys.function}, timeout=300)
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(rounds):
        cpu0, t0 = host_cpu_s(host), time.perf_counter()
        listed, costed = list_all(client)
        walls.append(time.perf_counter() - t0)
        cpus.append(host_cpu_s(host) - cpu0)
        print(f"  {label}: {listed} jobs, {costed} with a cost: {walls[-1] * 1000:.0f} ms wall, {cpus[-1]:.2f} s CPU")
    print(
        f"{label}: median {statistics.median(walls) * 1000:.0f} ms wall, {statistics.median(cpus):.2f} s host CPU "
        f"per listing of all jobs ({rounds} rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--before-app", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-list-costs-") as tmp:
        data = Path(tmp) / "data"
        env = {"ARTIFACT_PATH": str(Path(tmp) / "artifacts.sqlite3")}
        host = DevHostProcess(REPO_ROOT, data, log_path=Path(tmp) / "host.log", env=env).start()
        try:
            assert host.keys is not None
            client = httpx.Client(base_url=host.base_url, headers={"x-functions-key": host.keys.function}, timeout=60)
            ids = [client.post("/api/jobs", json={"question": QUESTION}).json()["id"] for _ in range(args.jobs)]
            for job_id in ids:  # the status API, not the job view: the view would keep the job's cost
                host.wait_status(job_id, timeout_s=600)
        finally:
            host.stop()
        if args.before_app:
            before = DevHostProcess(args.before_app, data, log_path=Path(tmp) / "before.log", env=env).start()
            try:
                measure(before, "before", args.rounds)
            finally:
                before.stop()
        host = DevHostProcess(REPO_ROOT, data, log_path=Path(tmp) / "host.log", env=env).start()
        try:
            measure(host, "cold", 1)
            # Fill every summary (each listing sums at most MAX_RECORDS_PER_LIST per page), then the steady state.
            assert host.keys is not None
            client = httpx.Client(base_url=host.base_url, headers={"x-functions-key": host.keys.function}, timeout=300)
            for _ in range(args.jobs):
                if list_all(client)[1] == args.jobs:
                    break
            measure(host, "warm", args.rounds)
        finally:
            host.stop()


if __name__ == "__main__":
    main()
