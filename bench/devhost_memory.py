"""(c) Extra memory of the devhost process with 1,000 instances parked on an external event.

Method
- A real ``python -m devhost serve`` process serves tests/apps/bench_noop (fresh SQLite data dir).
- Warm-up: one ``parked`` instance runs to completion (start, wait, event, complete), so the code
  paths are imported and exercised before the baseline is taken.
- Baseline: RSS (``VmRSS`` in ``/proc/<pid>/status``) of the idle host.
- ``BENCH_PARKED`` (default 1,000) ``parked`` instances are started through the Durable HTTP API;
  each runs one no-op activity, sets its custom status to "waiting" and waits for the 'Go' event.
  Once every instance reports "waiting", RSS is read again; extra memory = parked RSS - baseline.
  The host's CPU use while everything is parked is measured over 2 s.
- Then the event is raised on every instance; the drain time until none is Running is printed and
  every instance must be Completed with the event's data as its output.

Target (issue 2): extra memory <= 100 MB; and every parked instance completes after its event.
"""

from __future__ import annotations

import os
import time
import uuid

from bench._devhost import (
    Figure,
    bench_host,
    cpu_seconds,
    host_pid,
    list_instances,
    machine,
    print_table,
    raise_many,
    rss_bytes,
    start_many,
    wait_until_none,
)
from tests.devhost.hostproc import DevHostProcess

TARGET_EXTRA_MB = 100.0
MB = 1024 * 1024


def wait_all_waiting(host: DevHostProcess, prefix: str, count: int, timeout_s: float = 300) -> None:
    """Wait until ``count`` instances with ``prefix`` exist and all report custom status 'waiting'."""
    wait_until_none(host, "Pending", prefix, timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        items = list_instances(host, prefix)
        if len(items) == count and all(i.get("customStatus") == "waiting" for i in items):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {sum(i.get('customStatus') == 'waiting' for i in items)} of {count} parked")
        time.sleep(0.2)


def park(host: DevHostProcess, prefix: str, count: int) -> float:
    """Start ``count`` parked instances and wait until all wait; returns the seconds it took."""
    ids = [f"{prefix}{i:06d}" for i in range(count)]
    started = time.monotonic()
    start_many(host, "parked", ids, None)
    wait_all_waiting(host, prefix, count)
    return time.monotonic() - started


def release(host: DevHostProcess, prefix: str, count: int) -> float:
    """Raise 'Go' on every parked instance and wait until all complete; returns the drain time in seconds."""
    ids = [f"{prefix}{i:06d}" for i in range(count)]
    started = time.monotonic()
    raise_many(host, ids, "Go", {"go": True})
    wait_until_none(host, "Pending,Running", prefix, timeout_s=300)
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    """Measure RSS idle vs with many parked instances, then release them all."""
    count = int(os.environ.get("BENCH_PARKED", "1000"))
    print(f"(c) memory: {count} instances waiting on an external event; {machine()}")
    with bench_host() as host:
        pid = host_pid(host)
        warm = f"warm-{uuid.uuid4().hex[:6]}-"
        park(host, warm, 1)
        release(host, warm, 1)
        time.sleep(0.5)
        idle = rss_bytes(pid)

        prefix = f"park-{uuid.uuid4().hex[:6]}-"
        park_s = park(host, prefix, count)
        time.sleep(1.0)
        parked = rss_bytes(pid)
        cpu0 = cpu_seconds(pid)
        time.sleep(2.0)
        idle_cpu_pct = (cpu_seconds(pid) - cpu0) / 2.0 * 100

        drain_s = release(host, prefix, count)
        items = list_instances(host, prefix)
        done = sum(1 for i in items if i["runtimeStatus"] == "Completed" and i.get("output") == {"go": True})
        after = rss_bytes(pid)

    extra_mb = (parked - idle) / MB
    print(
        f"  RSS idle {idle / MB:.1f} MB; with {count} parked {parked / MB:.1f} MB "
        f"({(parked - idle) / max(count, 1) / 1024:.1f} KB per instance); after all completed {after / MB:.1f} MB"
    )
    print(
        f"  parking {count} took {park_s:.2f} s; host CPU while parked {idle_cpu_pct:.1f} % of a core; "
        f"releasing all took {drain_s:.2f} s ({count / drain_s:.0f} events/s end to end)"
    )
    print_table(
        "(c) results",
        [
            Figure(
                f"(c) extra RSS, {count} parked instances",
                f"{extra_mb:.1f} MB",
                f"<= {TARGET_EXTRA_MB:g} MB",
                extra_mb <= TARGET_EXTRA_MB,
            ),
            Figure(
                "(c) parked instances completed after the event",
                f"{done} / {count}",
                f"{count} / {count}",
                done == count,
            ),
        ],
    )
    return 0 if done == count else 1
