"""What does the local code sandbox cost? Start-to-result time of a trivial script under bubblewrap.

Method
- ``LocalSandbox.run`` of ``result = 1`` with the default limits, one run at a time, timed by the caller from
  the call to the returned result: probe excluded (done once, before), everything else included (bwrap and
  its namespaces and mounts, the interpreter's start, the bootstrap reading the request, dropping to the
  run's uid and setting its limits, the envelope, the reaping). ``BENCH_SANDBOX_RUNS`` sets the count (20).
- For scale: the same interpreter started bare (``python -I -S -c pass``, no sandbox), and a run that gets a
  200-row SQL table as a pandas DataFrame (pandas' import dominates it; informational).

Target: p50 under 300 ms for the trivial script.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable

from bench._devhost import Figure, machine, percentile, print_table
from shared.sandbox.base import SandboxLimits, SandboxRequest
from shared.sandbox.local import LocalSandbox, _runtime

TARGET_MS = 300.0
WARMUP = 2


def timed(runs: int, once: Callable[[], object]) -> list[float]:
    """Milliseconds of ``runs`` calls of ``once``."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        once()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str]) -> int:
    """Time trivial sandbox runs and print p50/p95 against the target."""
    runs = int(os.environ.get("BENCH_SANDBOX_RUNS", "20"))
    sandbox = LocalSandbox()
    if not sandbox.available():
        print("local sandbox unavailable here (bubblewrap, user namespaces or `make sandbox` missing): skipped")
        return 0
    print(f"local sandbox: start-to-result of a trivial script, {runs} runs one at a time; {machine()}")
    limits = SandboxLimits()
    trivial = SandboxRequest(code="result = 1")
    table = SandboxRequest(
        code="result = float(t['v'].sum())",
        inputs={"t": {"columns": ["k", "v"], "rows": [[f"k{i}", i] for i in range(200)]}},
    )

    def run_trivial() -> None:
        result = sandbox.run(trivial, limits)
        if result.status != "ok":
            raise RuntimeError(f"trivial run failed: {result.error}")

    timed(WARMUP, run_trivial)
    sandboxed = timed(runs, run_trivial)
    interpreter = str(_runtime(sandbox.venv).executable)
    bare = timed(runs, lambda: subprocess.run([interpreter, "-I", "-S", "-c", "pass"], check=True))  # noqa: S603
    with_pandas = timed(max(3, runs // 4), lambda: sandbox.run(table, limits))
    p50, p95 = statistics.median(sandboxed), percentile(sandboxed, 95)
    figures = [
        Figure(
            "sandbox start-to-result, trivial script (p50)", f"{p50:.0f} ms", f"< {TARGET_MS:g} ms", p50 < TARGET_MS
        ),
        Figure("sandbox start-to-result, trivial script (p95)", f"{p95:.0f} ms", "", None),
        Figure("bare interpreter start, no sandbox (p50)", f"{statistics.median(bare):.0f} ms", "", None),
        Figure(
            "sandbox run with a 200-row DataFrame input (p50)", f"{statistics.median(with_pandas):.0f} ms", "", None
        ),
    ]
    print_table("local sandbox overhead", figures)
    return 0
