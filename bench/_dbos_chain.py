"""The 5-step no-op chain on DBOS Transact with SQLite, driven over stdin by bench.devhost_vs_durabletask.

Runs under the bench's own environment (``.venv-bench``, requirements-bench.txt: DBOS pins its own
SQLAlchemy and friends, which the app's venv need not share). One request a line on stdin, one JSON answer
a line on stdout:

- ``job``: one job in flight; ``{"s": <client-observed seconds>}``.
- ``many N``: N jobs started at once; ``{"s": <first start to last result>, "jobs": N}``.
- ``cpu``: ``{"s": <this process's user + system CPU seconds>}``.

DBOS runs in this process (it is a library): its workflow and steps checkpoint to a fresh SQLite file with
DBOS's default settings, and ``DBOS.start_workflow`` runs each started job on DBOS's own thread pool.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from typing import Any


def main() -> int:
    """Serve ``job``/``many N``/``cpu`` requests until stdin closes."""
    from dbos import DBOS, DBOSConfig  # noqa: PLC0415 - only in the bench's own venv

    logging.getLogger("dbos").setLevel(logging.WARNING)
    folder = tempfile.mkdtemp(prefix="bench-dbos-")
    config: DBOSConfig = {"name": "bench-chain", "system_database_url": f"sqlite:///{folder}/dbos.sqlite"}
    DBOS(config=config)

    @DBOS.step()
    def noop(value: int) -> float:
        started = time.perf_counter()
        return time.perf_counter() - started

    @DBOS.workflow()
    def chain(steps: int) -> dict[str, Any]:
        body = 0.0
        for i in range(steps):
            body += noop(i)
        return {"steps": steps, "body_s": body}

    DBOS.launch()
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "job":
                started = time.perf_counter()
                result = chain(5)
                answer: dict[str, Any] = {"s": time.perf_counter() - started, "steps": result["steps"]}
            elif words[0] == "many":
                jobs = int(words[1])
                started = time.perf_counter()
                handles = [DBOS.start_workflow(chain, 5) for _ in range(jobs)]
                results = [h.get_result() for h in handles]
                if any(r["steps"] != 5 for r in results):
                    raise RuntimeError("a DBOS job did not run its 5 steps")
                answer = {"s": time.perf_counter() - started, "jobs": jobs}
            elif words[0] == "cpu":
                times = os.times()
                answer = {"s": times.user + times.system}
            else:
                answer = {"error": f"unknown request {words[0]!r}"}
            print(json.dumps(answer), flush=True)
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
