"""(d) The same 5-step no-op job three ways, side by side in one run: a plain Python loop, devhost
(persisting to SQLite) and Microsoft's ``durabletask`` SDK on its in-memory test backend.

Method
- The job: 5 sequential no-op activities; each activity times its own body and returns the
  duration; the orchestration returns the sum (tests/apps/bench_noop ``chain`` on devhost; the same
  functions registered on a ``durabletask`` worker).
- plain loop: the 5 calls in a Python ``for`` loop, timed over many jobs.
- devhost: a real ``python -m devhost serve`` process (SQLite WAL, default settings), async no-op
  activities; a sync-activity run (thread pool, like durabletask's activities) is shown too.
- durabletask: ``durabletask.testing.create_test_backend`` (in-memory gRPC sidecar in this
  process) with a ``TaskHubGrpcWorker`` and ``TaskHubGrpcClient`` on loopback.
- Latency mode: one job in flight; per job, client-observed time from the start call to the
  completed result (devhost: Durable HTTP API start in wait mode; durabletask:
  ``schedule_new_orchestration`` + ``wait_for_orchestration_completion``); per step = median / 5.
- Throughput mode: ``BENCH_VS_JOBS`` (default 200) jobs started at once; time from the first start
  call to the last recorded completion (devhost: ExecutionCompleted in the history; durabletask:
  ``last_updated_at``); per step = elapsed / (jobs x 5).

Target (issue 2): devhost faster per step than durabletask in-memory, while persisting to SQLite.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Generator
from typing import Any, cast

from bench._devhost import (
    Figure,
    bench_host,
    machine,
    print_rows,
    print_table,
    run_chain,
    start_many,
    timing_from_history,
    wait_until_none,
)
from devhost.timeutil import parse_history_time
from tests.devhost.hostproc import DevHostProcess

STEPS = 5
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


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def main(argv: list[str]) -> int:
    """Run the three variants and print per-step times and ratios."""
    jobs = int(os.environ.get("BENCH_VS_JOBS", "200"))
    print(f"(d) the same {STEPS}-step no-op job: plain loop vs devhost (SQLite) vs durabletask in-memory; {machine()}")
    loop_step = plain_loop_per_step()
    # Interleaved rounds, so both engines see the same background load on the machine.
    dh: list[float] = []
    dh_sync: list[float] = []
    dt: list[float] = []
    dh_tps: list[float] = []
    dt_tps: list[float] = []
    with bench_host() as host:
        tasks = DurableTaskInMemory()
        try:
            for _ in range(WARMUP_JOBS):
                devhost_job(host, sync=False)
                devhost_job(host, sync=True)
                tasks.job()
            for _ in range(LATENCY_JOBS):
                dh.append(devhost_job(host, sync=False))
                dh_sync.append(devhost_job(host, sync=True))
                dt.append(tasks.job())
            for _ in range(THROUGHPUT_ROUNDS):
                dh_tps.append(devhost_throughput(host, jobs))
                dt_tps.append(tasks.throughput(jobs))
        finally:
            tasks.close()
    dh_lat, dh_lat_sync, dt_lat = (statistics.median(v) / STEPS for v in (dh, dh_sync, dt))
    # Best of the rounds: background load only ever slows a round down.
    dh_tp, dt_tp = min(dh_tps), min(dt_tps)

    ratio: Callable[[float, float], str] = lambda a, b: f"{a / b:,.1f}x"  # noqa: E731
    print_rows(
        ["per step", "plain loop", "devhost async", "devhost sync", "durabletask", "durabletask / devhost"],
        [
            [
                "latency (1 job in flight)",
                _us(loop_step),
                _us(dh_lat),
                _us(dh_lat_sync),
                _us(dt_lat),
                ratio(dt_lat, dh_lat),
            ],
            [f"throughput ({jobs} jobs at once)", _us(loop_step), _us(dh_tp), "-", _us(dt_tp), ratio(dt_tp, dh_tp)],
        ],
    )
    print(
        f"  devhost / plain loop: {ratio(dh_lat, loop_step)} (latency), {ratio(dh_tp, loop_step)} (throughput); "
        f"devhost {1 / (dh_tp * STEPS):.0f} jobs/s vs durabletask {1 / (dt_tp * STEPS):.0f} jobs/s"
    )
    print_table(
        "(d) results",
        [
            Figure(
                "(d) per step, 1 job in flight: durabletask / devhost", ratio(dt_lat, dh_lat), "> 1x", dh_lat < dt_lat
            ),
            Figure(
                "(d) per step, sync activities: durabletask / devhost",
                ratio(dt_lat, dh_lat_sync),
                "> 1x",
                dh_lat_sync < dt_lat,
            ),
            Figure(
                f"(d) per step, {jobs} jobs at once: durabletask / devhost", ratio(dt_tp, dh_tp), "> 1x", dh_tp < dt_tp
            ),
        ],
    )
    return 0
