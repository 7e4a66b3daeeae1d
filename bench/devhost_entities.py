"""Durable Entities in the devhost engine: calls and signals per second on one entity.

Method
- An in-process ``devhost.durable.engine.Engine`` (real SQLite file in a fresh temp dir) runs tests/apps/entity_counter.
- Fan-in: one orchestration makes ``n`` parallel ``call_entity(counter, "add", 1)`` calls and then a ``get``
  (n = 500 and 2,000); calls/s = n / (start to completion). Every call is a reply delivered to the
  orchestration, so this includes its replays.
- Signals: 1,000 client ``signal_entity`` calls (one transaction each), then the time until the engine is
  idle; the final state must equal the number of signals.

Target: none set by an issue; the figures are printed to catch regressions (a 2,000-call fan-in took 7.4 s
with 100 operations per batch, 2.4 s with 1,000, on the 2-core dev machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from devhost.durable.engine import Engine
from devhost.functions.loader import load_app

APP = Path(__file__).resolve().parents[1] / "tests" / "apps" / "entity_counter"


async def _run(data: Path) -> int:
    engine = Engine(load_app(APP), data)
    await engine.start()
    failures = 0
    try:
        for n in (500, 2000):
            started = time.perf_counter()
            args = json.dumps(json.dumps({"key": f"fan{n}", "count": n}))
            instance_id = await engine.start_instance("fan_out_adds", None, args)
            status = await engine.wait_for_completion(instance_id, 300)
            took = time.perf_counter() - started
            ok = status is not None and status["output"] == n
            failures += not ok
            print(f"fan-in of {n} calls: {took:.2f} s, {n / took:.0f} calls/s, correct={ok}")
        started = time.perf_counter()
        for _ in range(1000):
            await engine.signal_entity("counter", "signals", "add", json.dumps("1"))
        await engine.wait_for_idle(300)
        took = time.perf_counter() - started
        exists, state = await engine.read_entity_state("counter", "signals")
        ok = exists and state == "1000"
        failures += not ok
        print(f"1000 client signals: {took:.2f} s, {1000 / took:.0f} signals/s, correct={ok}")
        print(f"entity batches run: {engine.entity_batches_run}")
    finally:
        await engine.stop()
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    """Run the entity benchmark; non-zero when a result was wrong."""
    del argv
    cwd = os.getcwd()
    os.chdir(APP)  # the SDK reads host.json from the working directory, as under the worker
    try:
        with tempfile.TemporaryDirectory(prefix="bench-entities-") as data:
            return asyncio.run(_run(Path(data)))
    finally:
        os.chdir(cwd)
