"""(g) A durabletask worker on devhost's gRPC endpoint against the same worker on the SDK's in-memory backend.

Method
- The job: the same 5 sequential no-op activities as (d) (``bench.devhost_vs_durabletask``), registered on a
  ``TaskHubGrpcWorker``; the client is a ``TaskHubGrpcClient`` on the same address.
- devhost: a real ``python -m devhost serve --grpc-port 0`` process with no function_app.py (SQLite WAL,
  default settings); every episode is a work item to the worker and back, every commit on disk.
- in-memory: ``durabletask.testing.create_test_backend`` in this process (nothing persisted).
- Latency: one job in flight, client-observed start to completed result; per step = median / 5.
- Throughput: ``BENCH_GRPC_JOBS`` (default 200) jobs started at once, first start to last completion
  (``last_updated_at``); jobs/s. The devhost process's CPU time over the throughput rounds is shown too
  (the worker and the client run in this process for both variants).
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from pathlib import Path

from bench._devhost import Figure, cpu_seconds, host_pid, machine, print_rows, print_table
from bench.devhost_vs_durabletask import STEPS, DurableTaskInMemory, DurableTaskJobs
from tests.devhost.hostproc import DevHostProcess

LATENCY_JOBS = 40
WARMUP_JOBS = 10
THROUGHPUT_ROUNDS = 2
_GRPC = re.compile(r"Durable Task gRPC \(sidecar protocol, no auth\): [^:\s]+:(\d+)")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def main(argv: list[str]) -> int:
    """Run both variants interleaved and print per-step times, jobs/s and the ratio."""
    jobs = int(os.environ.get("BENCH_GRPC_JOBS", "200"))
    print(f"(g) the same {STEPS}-step no-op durabletask job: devhost gRPC (SQLite) vs in-memory backend; {machine()}")
    with tempfile.TemporaryDirectory(prefix="devhost-bench-grpc-") as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        host = DevHostProcess(app, Path(tmp) / "data", no_auth=True, extra_args=["--grpc-port", "0"])
        host.start()
        try:
            match = _GRPC.search(host.output())
            assert match, host.output()
            on_devhost = DurableTaskJobs(f"127.0.0.1:{match.group(1)}")
            in_memory = DurableTaskInMemory()
            dh: list[float] = []
            mem: list[float] = []
            dh_tps: list[float] = []
            mem_tps: list[float] = []
            try:
                for _ in range(WARMUP_JOBS):
                    on_devhost.job()
                    in_memory.job()
                for _ in range(LATENCY_JOBS):
                    dh.append(on_devhost.job())
                    mem.append(in_memory.job())
                pid = host_pid(host)
                cpu_before = cpu_seconds(pid)
                for _ in range(THROUGHPUT_ROUNDS):
                    dh_tps.append(on_devhost.throughput(jobs))
                cpu_used = cpu_seconds(pid) - cpu_before
                for _ in range(THROUGHPUT_ROUNDS):
                    mem_tps.append(in_memory.throughput(jobs))
            finally:
                on_devhost.close()
                in_memory.close()
        finally:
            host.stop()
    dh_lat, mem_lat = statistics.median(dh) / STEPS, statistics.median(mem) / STEPS
    dh_tp, mem_tp = min(dh_tps), min(mem_tps)  # best round: background load only slows a round down
    steps_run = THROUGHPUT_ROUNDS * jobs * STEPS
    print_rows(
        ["per step", "devhost gRPC (SQLite)", "durabletask in-memory", "devhost / in-memory"],
        [
            ["latency (1 job in flight)", _us(dh_lat), _us(mem_lat), f"{dh_lat / mem_lat:,.2f}x"],
            [f"throughput ({jobs} jobs at once)", _us(dh_tp), _us(mem_tp), f"{dh_tp / mem_tp:,.2f}x"],
        ],
    )
    print(
        f"  jobs/s: devhost gRPC {1 / (dh_tp * STEPS):.0f}, in-memory {1 / (mem_tp * STEPS):.0f}; "
        f"devhost process CPU {_us(cpu_used / steps_run)} per step over the throughput rounds"
    )
    print_table(
        "(g) results",
        [
            Figure(
                "(g) per step, 1 job in flight: devhost gRPC / in-memory", f"{dh_lat / mem_lat:,.2f}x", "info", None
            ),
            Figure(
                f"(g) per step, {jobs} jobs at once: devhost gRPC / in-memory", f"{dh_tp / mem_tp:,.2f}x", "info", None
            ),
        ],
    )
    return 0
