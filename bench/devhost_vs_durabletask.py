"""(d) The same 5-step no-op job four ways, side by side in one run: a plain Python loop, devhost
(persisting to SQLite), Microsoft's ``durabletask`` SDK on its in-memory test backend, and DBOS Transact
on SQLite.

Method
- The job: 5 sequential no-op activities; each activity times its own body and returns the
  duration; the orchestration returns the sum (tests/apps/bench_noop ``chain`` on devhost; the same
  functions registered on a ``durabletask`` worker).
- plain loop: the 5 calls in a Python ``for`` loop, timed over many jobs.
- devhost: a real ``python -m devhost serve`` process (SQLite WAL, default settings), async no-op
  activities; a sync-activity run (thread pool, like durabletask's activities) is shown too.
- durabletask: ``durabletask.testing.create_test_backend`` (in-memory gRPC sidecar in this
  process) with a ``TaskHubGrpcWorker`` and ``TaskHubGrpcClient`` on loopback.
- DBOS Transact (``dbos`` 3.4, in the bench's own environment ``.venv-bench``, which ``make bench`` builds):
  the same chain as a ``@DBOS.workflow`` of ``@DBOS.step`` calls, checkpointed to a fresh SQLite file with
  DBOS's defaults, in a child process driven over stdin (bench/_dbos_chain.py); 200 at once are
  ``DBOS.start_workflow`` calls (DBOS's own thread pool), timed from the first start to the last result.
- Host CPU: user + system CPU seconds of the engine's process per job (devhost: the host process, the client
  is another process; durabletask: this process, which holds its backend, worker and client; DBOS: its
  process), printed beside the wall figures because they move less with other load on the machine.
- Latency mode: one job in flight; per job, client-observed time from the start call to the
  completed result (devhost: Durable HTTP API start in wait mode; durabletask:
  ``schedule_new_orchestration`` + ``wait_for_orchestration_completion``); per step = median / 5.
- Throughput mode: ``BENCH_VS_JOBS`` (default 200) jobs started at once; time from the first start
  call to the last recorded completion (devhost: ExecutionCompleted in the history; durabletask:
  ``last_updated_at``); per step = elapsed / (jobs x 5).

Targets: devhost at least 3x faster per step than durabletask in-memory and at least 5x faster than DBOS on
SQLite, with one job in flight and with 200 at once, while persisting every step to SQLite.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, cast

from bench._devhost import (
    Figure,
    bench_host,
    cpu_seconds,
    host_pid,
    machine,
    print_rows,
    print_table,
    run_chain,
    start_many,
    timing_from_history,
    wait_until_none,
)
from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import DevHostProcess

STEPS = 5
TARGET_VS_DURABLETASK = 3.0
TARGET_VS_DBOS = 5.0
BENCH_PYTHON = Path(__file__).resolve().parent.parent / ".venv-bench" / "bin" / "python"
LATENCY_JOBS = 60
THROUGHPUT_ROUNDS = 2
WARMUP_JOBS = 10


def noop_body(value: int) -> float:
    """The no-op activity body: returns its own duration in seconds."""
    started = time.perf_counter()
    return time.perf_counter() - started


def plain_loop_per_step(jobs: int = 20000) -> float:
    """Seconds per step of the job as a plain Python loop."""

    def job() -> dict[str, Any]:
        body = 0.0
        for i in range(STEPS):
            body += noop_body(i)
        return {"steps": STEPS, "body_s": body}

    started = time.perf_counter()
    for _ in range(jobs):
        job()
    return (time.perf_counter() - started) / (jobs * STEPS)


# ----- devhost -----------------------------------------------------------------------------------


def devhost_job(host: DevHostProcess, *, sync: bool) -> float:
    """Client-observed seconds of one job."""
    return run_chain(host, STEPS, sync=sync).client_s


def devhost_throughput(host: DevHostProcess, jobs: int) -> float:
    """Seconds per step with ``jobs`` jobs started at once (first start to last completion)."""
    prefix = f"vs-{uuid.uuid4().hex[:8]}-"
    ids = [f"{prefix}{i:05d}" for i in range(jobs)]
    first = time.time()
    start_many(host, "chain", ids, {"steps": STEPS})
    wait_until_none(host, "Pending,Running", prefix, timeout_s=300)
    latest = 0.0
    for instance_id in ids:
        resp = host.client.get(
            host.webhook(f"instances/{instance_id}"), params={**host.system_code, "showHistory": "true"}
        )
        resp.raise_for_status()
        events = resp.json()["historyEvents"]
        timing_from_history(events, STEPS, 0.0, 0.0)  # checks all steps completed
        ended = next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"]
        latest = max(latest, parse_history_time(ended))
    return (latest - first) / (jobs * STEPS)


# ----- durabletask -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DurableTaskJobs:
    """A durabletask worker with the chain job and a client, both on one sidecar address."""

    def __init__(self, host_address: str) -> None:
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        from durabletask.client import OrchestrationStatus, TaskHubGrpcClient  # noqa: PLC0415
        from durabletask.worker import TaskHubGrpcWorker  # noqa: PLC0415

        quiet = logging.getLogger("bench.durabletask")
        quiet.setLevel(logging.ERROR)

        def noop(ctx: Any, value: int) -> float:
            return noop_body(value)

        def chain(ctx: Any, job: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
            body = 0.0
            for i in range(job["steps"]):
                body += yield ctx.call_activity(noop, input=i)
            return {"steps": job["steps"], "body_s": body}

        self._completed = OrchestrationStatus.COMPLETED
        self._chain: Any = cast(Any, chain)  # the SDK's Orchestrator type wants its own context types
        self.worker = TaskHubGrpcWorker(host_address=host_address, logger=quiet)
        self.client = TaskHubGrpcClient(host_address=host_address, logger=quiet)
        self.worker.add_orchestrator(self._chain)
        self.worker.add_activity(noop)
        self.worker.start()

    def close(self) -> None:
        """Stop the worker and the client."""
        self.worker.stop()
        self.client.close()

    def _check(self, state: Any) -> None:
        if state is None or state.runtime_status != self._completed:
            raise RuntimeError(f"durabletask job did not complete: {state}")

    def job(self) -> float:
        """Client-observed seconds of one job."""
        started = time.perf_counter()
        instance_id = self.client.schedule_new_orchestration(self._chain, input={"steps": STEPS})
        state = self.client.wait_for_orchestration_completion(instance_id, timeout=60)
        elapsed = time.perf_counter() - started
        self._check(state)
        return elapsed

    def throughput(self, jobs: int) -> float:
        """Seconds per step with ``jobs`` jobs started at once (first start to last completion)."""
        first = time.time()
        ids = [self.client.schedule_new_orchestration(self._chain, input={"steps": STEPS}) for _ in range(jobs)]
        latest = 0.0
        for instance_id in ids:
            state = self.client.wait_for_orchestration_completion(instance_id, timeout=300)
            self._check(state)
            assert state is not None
            latest = max(latest, state.last_updated_at.timestamp())
        return (latest - first) / (jobs * STEPS)


class DurableTaskInMemory:
    """durabletask's in-memory backend with ``DurableTaskJobs`` on it, all in this process."""

    def __init__(self) -> None:
        from durabletask.testing import create_test_backend  # noqa: PLC0415

        port = _free_port()
        self.backend = create_test_backend(port=port)
        self.jobs = DurableTaskJobs(f"localhost:{port}")

    def close(self) -> None:
        """Stop the worker, the client and the backend."""
        self.jobs.close()
        self.backend.stop()

    def job(self) -> float:
        """Client-observed seconds of one job."""
        return self.jobs.job()

    def throughput(self, jobs: int) -> float:
        """Seconds per step with ``jobs`` jobs started at once."""
        return self.jobs.throughput(jobs)


# ----- DBOS Transact ------------------------------------------------------------------------------


class DbosOnSqlite:
    """DBOS Transact with the chain job in a child process of the bench's own venv (bench/_dbos_chain.py)."""

    def __init__(self) -> None:
        script = Path(__file__).with_name("_dbos_chain.py")
        self.proc = subprocess.Popen(
            [str(BENCH_PYTHON), str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _ask(self, request: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the DBOS bench process ended (exit {self.proc.poll()})")
        answer = dict(json.loads(line))
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def job(self) -> float:
        """Client-observed seconds of one job."""
        return float(self._ask("job")["s"])

    def throughput(self, jobs: int) -> float:
        """Seconds per step with ``jobs`` jobs started at once (first start to last result)."""
        return float(self._ask(f"many {jobs}")["s"]) / (jobs * STEPS)

    def cpu(self) -> float:
        """CPU seconds the DBOS process has used."""
        return float(self._ask("cpu")["s"])

    def close(self) -> None:
        """Close its stdin and wait for it to shut DBOS down."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _timed_cpu(job: Callable[[], float], cpu: Callable[[], float], cpu_s: list[float]) -> float:
    """Run one job; append the engine's CPU seconds for it to ``cpu_s``; return its wall seconds."""
    before = cpu()
    wall = job()
    cpu_s.append(cpu() - before)
    return wall


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def main(argv: list[str]) -> int:
    """Run the four variants and print per-step times, host CPU and ratios."""
    jobs = int(os.environ.get("BENCH_VS_JOBS", "200"))
    with_dbos = BENCH_PYTHON.exists()
    print(
        f"(d) the same {STEPS}-step no-op job: plain loop vs devhost (SQLite) vs durabletask in-memory vs DBOS "
        f"(SQLite); {machine()}"
    )
    if not with_dbos:
        print("  DBOS: not measured, .venv-bench is missing (make bench builds it from requirements-bench.txt)")
    loop_step = plain_loop_per_step()
    # Interleaved rounds, so every engine sees the same background load on the machine.
    dh: list[float] = []
    dh_sync: list[float] = []
    dt: list[float] = []
    db: list[float] = []
    dh_cpu: list[float] = []
    dt_cpu: list[float] = []
    db_cpu: list[float] = []
    dh_tps: list[float] = []
    dt_tps: list[float] = []
    db_tps: list[float] = []
    this_cpu: Callable[[], float] = time.process_time
    with bench_host() as host:
        tasks = DurableTaskInMemory()
        dbos = DbosOnSqlite() if with_dbos else None
        host_cpu: Callable[[], float] = lambda: cpu_seconds(host_pid(host))  # noqa: E731
        try:
            for _ in range(WARMUP_JOBS):
                devhost_job(host, sync=False)
                devhost_job(host, sync=True)
                tasks.job()
                if dbos is not None:
                    dbos.job()
            for _ in range(LATENCY_JOBS):
                dh.append(_timed_cpu(lambda: devhost_job(host, sync=False), host_cpu, dh_cpu))
                dh_sync.append(devhost_job(host, sync=True))
                dt.append(_timed_cpu(tasks.job, this_cpu, dt_cpu))
                if dbos is not None:
                    db.append(_timed_cpu(dbos.job, dbos.cpu, db_cpu))
            for _ in range(THROUGHPUT_ROUNDS):
                dh_tps.append(devhost_throughput(host, jobs))
                dt_tps.append(tasks.throughput(jobs))
                if dbos is not None:
                    db_tps.append(dbos.throughput(jobs))
        finally:
            tasks.close()
            if dbos is not None:
                dbos.close()
    dh_lat, dh_lat_sync, dt_lat = (statistics.median(v) / STEPS for v in (dh, dh_sync, dt))
    db_lat = statistics.median(db) / STEPS if db else None
    # Best of the rounds: background load only ever slows a round down.
    dh_tp, dt_tp = min(dh_tps), min(dt_tps)
    db_tp = min(db_tps) if db_tps else None

    ratio: Callable[[float, float], str] = lambda a, b: f"{a / b:,.1f}x"  # noqa: E731
    # The mean: /proc counts CPU in clock ticks (10 ms), too coarse for one job's median.
    cpu_job: Callable[[list[float]], str] = lambda v: f"{sum(v) / len(v) * 1e3:,.2f} ms" if v else "-"  # noqa: E731
    print_rows(
        [
            "per step",
            "plain loop",
            "devhost async",
            "devhost sync",
            "durabletask",
            "DBOS",
            "dt / devhost",
            "DBOS / devhost",
        ],
        [
            [
                "latency (1 job in flight)",
                _us(loop_step),
                _us(dh_lat),
                _us(dh_lat_sync),
                _us(dt_lat),
                _us(db_lat) if db_lat else "-",
                ratio(dt_lat, dh_lat),
                ratio(db_lat, dh_lat) if db_lat else "-",
            ],
            [
                "engine CPU per job (1 in flight)",
                "-",
                cpu_job(dh_cpu),
                "-",
                cpu_job(dt_cpu),
                cpu_job(db_cpu),
                "-",
                "-",
            ],
            [
                f"throughput ({jobs} jobs at once)",
                _us(loop_step),
                _us(dh_tp),
                "-",
                _us(dt_tp),
                _us(db_tp) if db_tp else "-",
                ratio(dt_tp, dh_tp),
                ratio(db_tp, dh_tp) if db_tp else "-",
            ],
        ],
    )
    jobs_per_s = f"devhost {1 / (dh_tp * STEPS):.0f} jobs/s vs durabletask {1 / (dt_tp * STEPS):.0f} jobs/s"
    if db_tp:
        jobs_per_s += f" vs DBOS {1 / (db_tp * STEPS):.0f} jobs/s"
    vs_loop = f"{ratio(dh_lat, loop_step)} (latency), {ratio(dh_tp, loop_step)} (throughput)"
    print(f"  devhost / plain loop: {vs_loop}; {jobs_per_s}")
    figures = [
        Figure(
            "(d) per step, 1 job in flight: durabletask / devhost",
            ratio(dt_lat, dh_lat),
            f">= {TARGET_VS_DURABLETASK:g}x",
            dt_lat >= TARGET_VS_DURABLETASK * dh_lat,
        ),
        Figure(
            "(d) per step, sync activities: durabletask / devhost",
            ratio(dt_lat, dh_lat_sync),
            "> 1x",
            dh_lat_sync < dt_lat,
        ),
        Figure(
            f"(d) per step, {jobs} jobs at once: durabletask / devhost",
            ratio(dt_tp, dh_tp),
            f">= {TARGET_VS_DURABLETASK:g}x",
            dt_tp >= TARGET_VS_DURABLETASK * dh_tp,
        ),
    ]
    if db_lat and db_tp:
        figures += [
            Figure(
                "(d) per step, 1 job in flight: DBOS / devhost",
                ratio(db_lat, dh_lat),
                f">= {TARGET_VS_DBOS:g}x",
                db_lat >= TARGET_VS_DBOS * dh_lat,
            ),
            Figure(
                f"(d) per step, {jobs} jobs at once: DBOS / devhost",
                ratio(db_tp, dh_tp),
                f">= {TARGET_VS_DBOS:g}x",
                db_tp >= TARGET_VS_DBOS * dh_tp,
            ),
        ]
    print_table("(d) results", figures)
    return 0
