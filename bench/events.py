"""The job event stream (api/events.py): events from commit to client, and host memory per idle subscriber.

Method
- A real ``python -m devhost serve`` process runs the app itself (embedded model, local partial-output store).
- Latency: ``BENCH_EVENTS_JOBS`` (default 20) jobs, each followed by one SSE client connected right after the
  submit. For every committed event whose time is the moment its history event was recorded (a step's end,
  its usage, a log line, the end) and later than the connection, latency = the client's receive time minus the
  event's ``at``. Same machine, same clock. p50 and p99 over all of them.
- Memory: one job waits for an approval; its RSS (``VmRSS``) is read, ``BENCH_EVENTS_SUBSCRIBERS`` (default
  200) clients open its stream and never read, and once the host has opened every stream RSS is read again.
  Per subscriber = the difference / subscribers.
- Idle cost: ``BENCH_EVENTS_IDLE`` (default 20) jobs wait for an approval, one stream open on each (a client
  that sends its request and reads nothing: the streams carry only keep-alives); once the host has opened
  them all and 2 s have passed, the host process's CPU time (user + system, ``/proc``) over 10 s is read,
  and the same with no stream open.

Targets (issue 15): p50 < 50 ms on devhost; < 50 KB per idle subscriber. Issue 24: 20 idle streams cost the
host under 5 % of a core (0.5 s of CPU per 10 s).
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench._devhost import Figure, cpu_seconds, machine, percentile, print_table, rss_bytes
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e.sse import messages
from tests.jobs.jobclient import JobClient

DOCS_Q = "What does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"
TARGET_P50_MS = 50.0
TARGET_KB = 50.0
TARGET_IDLE_CPU_S = 0.5  # per 10 s: 5 % of a core
IDLE_WINDOW_S = 10.0
# Committed events stamped with the time their history event was recorded.
_TIMED = {"usage", "log", "end", "status"}


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def latencies(jobs: JobClient, count: int) -> list[float]:
    """Milliseconds from commit to this client, over ``count`` jobs."""
    found: list[float] = []
    for _ in range(count):
        job_id = jobs.submit(DOCS_Q)
        connected = time.time()
        with jobs.http.stream("GET", f"/api/jobs/{job_id}/events", timeout=60) as resp:
            for message in messages(resp.iter_lines()):
                received = time.time()
                data = message.data or {}
                timed = data.get("type") in _TIMED or data.get("state") in ("succeeded", "failed")
                if data.get("committed") and timed and _at(data["at"]) >= connected:
                    found.append((received - _at(data["at"])) * 1000)
    return found


def _idle(port: int, path: str, key: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-functions-key: {key}\r\n\r\n".encode())
    return sock


def memory_per_subscriber(host: DevHostProcess, jobs: JobClient, count: int) -> float:
    """KB of host RSS per subscriber that never reads (streams of one waiting job)."""
    assert host.proc is not None and host.port is not None and host.keys is not None
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    marker = "Executing 'Functions.job_events'"
    opened = host.output().count(marker)
    before = rss_bytes(host.proc.pid)
    socks = [_idle(host.port, f"/api/jobs/{job_id}/events", host.keys.function) for _ in range(count)]
    try:
        deadline = time.monotonic() + 120
        while host.output().count(marker) < opened + count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the last streams' first writes
        after = rss_bytes(host.proc.pid)
    finally:
        for sock in socks:
            sock.close()
    return (after - before) / 1024 / count


def _opened(host: DevHostProcess) -> int:
    return host.output().count("Executing 'Functions.job_events'")


def idle_cpu(host: DevHostProcess, jobs: JobClient, count: int) -> tuple[float, float]:
    """Host CPU seconds per 10 s with ``count`` streams open on as many waiting jobs, and with none."""
    assert host.proc is not None and host.port is not None and host.keys is not None
    waiting = [jobs.submit(SQL_Q, approval={"sql": "always"}) for _ in range(count)]
    for job_id in waiting:
        jobs.wait(job_id, {"waiting_for_user"})
    time.sleep(2)
    quiet_before = cpu_seconds(host.proc.pid)
    time.sleep(IDLE_WINDOW_S)
    quiet = cpu_seconds(host.proc.pid) - quiet_before
    opened = _opened(host)
    socks = [_idle(host.port, f"/api/jobs/{job_id}/events", host.keys.function) for job_id in waiting]
    try:
        deadline = time.monotonic() + 120
        while _opened(host) < opened + count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)  # the streams' first reads; then the steady state is measured
        before = cpu_seconds(host.proc.pid)
        time.sleep(IDLE_WINDOW_S)
        busy = cpu_seconds(host.proc.pid) - before
    finally:
        for sock in socks:
            sock.close()
    for job_id in waiting:
        jobs.cancel(job_id)
    return busy, quiet


def main(argv: list[str]) -> int:
    """Run the event stream benchmark and print its figures."""
    count = int(os.environ.get("BENCH_EVENTS_JOBS", "20"))
    subscribers = int(os.environ.get("BENCH_EVENTS_SUBSCRIBERS", "200"))
    idle = int(os.environ.get("BENCH_EVENTS_IDLE", "20"))
    print(f"event stream: {count} jobs followed live, {subscribers} idle subscribers; {machine()}")
    with tempfile.TemporaryDirectory(prefix="events-bench-") as tmp:
        env = {"PARTIAL_OUTPUT_STORE": "local", "PARTIAL_OUTPUT_PATH": str(Path(tmp) / "p.sqlite3")}
        host = DevHostProcess(REPO_ROOT, Path(tmp) / "data", log_path=Path(tmp) / "host.log", env=env)
        host.start()
        try:
            jobs = JobClient(host)
            latencies(jobs, 2)  # warm-up
            found = latencies(jobs, count)
            per_kb = memory_per_subscriber(host, jobs, subscribers)
            idle_s, quiet_s = idle_cpu(host, jobs, idle)
        except httpx.HTTPError as exc:
            print(f"event stream benchmark failed: {exc}")
            return 1
        finally:
            host.stop()
    p50, p99 = percentile(found, 50), percentile(found, 99)
    latency = f"commit to client p50 ({len(found)} events)"
    memory = f"host RSS per idle subscriber ({subscribers})"
    print_table(
        "event stream results",
        [
            Figure(latency, f"{p50:.1f} ms", f"< {TARGET_P50_MS:g} ms", p50 < TARGET_P50_MS),
            Figure("commit to client p99", f"{p99:.1f} ms", "", None),
            Figure(memory, f"{per_kb:.1f} KB", f"< {TARGET_KB:g} KB", per_kb < TARGET_KB),
            Figure(
                f"host CPU per 10 s, {idle} idle streams on waiting jobs",
                f"{idle_s:.2f} s",
                f"< {TARGET_IDLE_CPU_S:g} s (5 % of a core)",
                idle_s < TARGET_IDLE_CPU_S,
            ),
            Figure("host CPU per 10 s, no stream open", f"{quiet_s:.2f} s", "", None),
        ],
    )
    return 0
