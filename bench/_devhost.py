"""Shared pieces of the devhost engine benchmarks: a devhost process on the no-op bench app, job
timing from the stored history, RSS, percentiles and the result table.

Not a benchmark itself (the leading underscore keeps ``python -m bench`` from running it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess

APP_DIR = APPS_DIR / "bench_noop"
TERMINAL = {"Completed", "Failed", "Terminated", "Canceled"}


def _app_dir(tmp: Path) -> Path:
    """The bench app; a copy whose host.json enables extended sessions when ``BENCH_EXTENDED_SESSIONS=1``."""
    if os.environ.get("BENCH_EXTENDED_SESSIONS", "") != "1":
        return APP_DIR
    app = tmp / "app"
    shutil.copytree(APP_DIR, app, ignore=shutil.ignore_patterns("__pycache__", ".devhost"))
    host_json = json.loads((app / "host.json").read_text(encoding="utf-8"))
    host_json["extensions"]["durableTask"]["extendedSessionsEnabled"] = True
    (app / "host.json").write_text(json.dumps(host_json, indent=2), encoding="utf-8")
    return app


@contextmanager
def bench_host() -> Iterator[DevHostProcess]:
    """A devhost process serving the bench app with a fresh data directory; stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="devhost-bench-") as tmp:
        app = _app_dir(Path(tmp))
        host = DevHostProcess(app, Path(tmp) / "data", log_path=Path(tmp) / "host.log")
        host.start()
        try:
            yield host
        finally:
            host.stop()


@dataclass(frozen=True)
class JobTiming:
    """One finished job: wall time from its history, time inside activity bodies, client round trip."""

    steps: int
    wall_s: float
    body_s: float
    client_s: float
    step_s: list[float]

    @property
    def overhead_per_step_s(self) -> float:
        """(wall time - time inside activity bodies) / number of activities."""
        return (self.wall_s - self.body_s) / self.steps


def start_url(host: DevHostProcess, orchestrator: str) -> str:
    """Durable HTTP API start URL of an orchestrator."""
    return host.webhook(f"orchestrators/{orchestrator}")


def run_chain(host: DevHostProcess, steps: int, *, sync: bool = False) -> JobTiming:
    """Run one ``chain`` job to completion (wait mode of the start API) and time it from its history."""
    return finish_timing(host, start_chain(host, steps, sync=sync))


@dataclass(frozen=True)
class ChainRun:
    """A completed chain job as the client saw it (history not read yet)."""

    instance_id: str
    steps: int
    client_s: float
    body_s: float


def start_chain(host: DevHostProcess, steps: int, *, sync: bool = False) -> ChainRun:
    """Run one ``chain`` job to completion through the start API in wait mode; client-side timing only."""
    instance_id = f"chain-{uuid.uuid4().hex}"
    params = {**host.system_code, "timeout": "120", "pollingInterval": "1"}
    url = f"{start_url(host, 'chain')}/{instance_id}"
    sent = time.perf_counter()
    resp = host.client.post(url, params=params, json={"steps": steps, "sync": sync})
    client_s = time.perf_counter() - sent
    if resp.status_code != 200:
        raise RuntimeError(f"chain job did not complete: {resp.status_code} {resp.text[:300]}")
    return ChainRun(instance_id, steps, client_s, float(resp.json()["body_s"]))


def finish_timing(host: DevHostProcess, run: ChainRun) -> JobTiming:
    """Complete a run's timing with its stored history."""
    return timing_from_history(history(host, run.instance_id), run.steps, run.body_s, run.client_s)


def history(host: DevHostProcess, instance_id: str) -> list[dict[str, Any]]:
    """The instance's history events (status API with showHistory)."""
    resp = host.client.get(host.webhook(f"instances/{instance_id}"), params={**host.system_code, "showHistory": "true"})
    resp.raise_for_status()
    return list(resp.json()["historyEvents"])


def timing_from_history(events: list[dict[str, Any]], steps: int, body_s: float, client_s: float) -> JobTiming:
    """Wall time = ExecutionStarted to ExecutionCompleted; per-step gaps between TaskCompleted events."""
    started = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionStarted")["Timestamp"])
    ended = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"])
    marks = [started] + [parse_history_time(e["Timestamp"]) for e in events if e["EventType"] == "TaskCompleted"]
    gaps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    if len(gaps) != steps:
        raise RuntimeError(f"expected {steps} completed activities in the history, found {len(gaps)}")
    return JobTiming(steps=steps, wall_s=ended - started, body_s=body_s, client_s=client_s, step_s=gaps)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_pid(host: DevHostProcess) -> int:
    """Process id of a started host."""
    if host.proc is None:
        raise RuntimeError("host not started")
    return host.proc.pid


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def any_with_status(host: DevHostProcess, statuses: str, prefix: str) -> bool:
    """Whether any instance whose id starts with ``prefix`` is in the given runtime statuses (one cheap query)."""
    params = {**host.system_code, "runtimeStatus": statuses, "instanceIdPrefix": prefix, "showInput": "false"}
    resp = host.client.get(host.webhook("instances"), params={**params, "top": "1"})
    resp.raise_for_status()
    return bool(resp.json())


def list_instances(host: DevHostProcess, prefix: str) -> list[dict[str, Any]]:
    """All instances whose id starts with ``prefix`` (status JSON, no input)."""
    params = {**host.system_code, "instanceIdPrefix": prefix, "showInput": "false", "top": "1000"}
    items: list[dict[str, Any]] = []
    token = None
    while True:
        headers: dict[str, str] = {"x-ms-continuation-token": token} if token else {}
        resp = host.client.get(host.webhook("instances"), params=params, headers=headers)
        resp.raise_for_status()
        items.extend(resp.json())
        token = resp.headers.get("x-ms-continuation-token")
        if not token:
            return items


def wait_until_none(host: DevHostProcess, statuses: str, prefix: str, timeout_s: float) -> None:
    """Poll until no instance with ``prefix`` is in ``statuses``."""
    deadline = time.monotonic() + timeout_s
    while any_with_status(host, statuses, prefix):
        if time.monotonic() > deadline:
            raise RuntimeError(f"instances {prefix}* still {statuses} after {timeout_s}s")
        time.sleep(0.1)


class LeanHttp:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams, used as the load generator.

    httpx costs about 2 ms of CPU per request here, which on a 2-core machine would take CPU from
    the host under test; this client costs a small fraction of that. It sends JSON POSTs and reads
    responses framed by Content-Length (what the devhost's server always sends).
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` (JSON) to ``path``; returns (status code, response body)."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self._reader is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self._writer.write(head.encode("ascii") + body)
        raw = await self._reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        payload = await self._reader.readexactly(length) if length else b""
        return status, payload

    async def close(self) -> None:
        """Close the connection."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._writer = None


async def post_many(
    host: DevHostProcess, requests: Sequence[tuple[str, Any]], *, concurrency: int = 16, expect: int = 202
) -> None:
    """POST every (path, JSON body) with ``concurrency`` keep-alive connections; any other status raises."""
    query = urlencode(host.system_code)
    pending = deque(requests)
    conns = [LeanHttp(host.port or 0) for _ in range(concurrency)]

    async def worker(conn: LeanHttp) -> None:
        while pending:
            path, body = pending.popleft()
            status, payload = await conn.post(f"{path}?{query}" if query else path, json.dumps(body).encode())
            if status != expect:
                raise RuntimeError(f"POST {path} answered {status}: {payload[:200]!r}")

    try:
        await asyncio.gather(*(worker(c) for c in conns))
    finally:
        for conn in conns:
            await conn.close()


def start_many(host: DevHostProcess, orchestrator: str, ids: Sequence[str], body: Any, concurrency: int = 16) -> None:
    """Start one instance per id through the Durable HTTP API."""
    base = f"/runtime/webhooks/durabletask/orchestrators/{orchestrator}"
    asyncio.run(post_many(host, [(f"{base}/{i}", body) for i in ids], concurrency=concurrency))


def raise_many(host: DevHostProcess, ids: Sequence[str], event: str, data: Any, concurrency: int = 16) -> None:
    """Raise ``event`` with ``data`` on every instance through the Durable HTTP API."""
    base = "/runtime/webhooks/durabletask/instances"
    asyncio.run(post_many(host, [(f"{base}/{i}/raiseEvent/{event}", data) for i in ids], concurrency=concurrency))


@dataclass(frozen=True)
class Figure:
    """One row of the results table."""

    name: str
    value: str
    target: str
    met: bool | None  # None: informational, no target


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    """Print an aligned text table (first column left-aligned, the others right-aligned)."""
    table = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return indent + "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells))

    print(line(table[0]))
    print(indent + "  ".join("-" * w for w in widths))
    for row in table[1:]:
        print(line(row))


def print_table(title: str, figures: Sequence[Figure]) -> None:
    """Print figures as an aligned table: figure | measured | target | met."""
    rows = [
        [f.name, f.value, f.target or "-", "-" if f.met is None else ("met" if f.met else "NOT met")] for f in figures
    ]
    print(f"\n{title}")
    table = [["figure", "measured", "target", "met?"]] + rows
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for i, row in enumerate(table):
        print("  " + "  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))
    print(flush=True)


def machine() -> str:
    """One line describing where the figures were measured."""
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} CPUs, load average {load:.2f} at start"


@contextmanager
def app_host_with_definitions(prefix: str) -> Iterator[tuple[DevHostProcess, dict[str, str]]]:
    """The real app on a devhost process, its definitions table in Azurite (started here), and its key header."""
    from devhost.storage.azurite import Azurite

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, Azurite(Path(tmp) / "azurite") as azurite:
        env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "bench" + uuid.uuid4().hex[:8]}
        host = DevHostProcess(REPO_ROOT, Path(tmp) / "data", env=env)
        host.start()
        try:
            yield host, ({"x-functions-key": host.keys.function} if host.keys else {})
        finally:
            host.stop()
