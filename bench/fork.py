"""What does a fork save? A 6-step job run again from scratch, against a fork of it at its last step (issue 30).

Runs on the benchmark app (the product's blueprints with simulated provider latency: LLM 1 s, search 100 ms,
SQL 50 ms; ``BENCH_LATENCY_MS`` overrides) on a devhost process. The job: three SQL steps, two document
lookups, the answer. For each of ``BENCH_JOBS`` rounds (default 3): run the job, run it again (a new job), and
fork the first at its answer step with a changed token limit. Prints each one's wall time (ExecutionStarted to
ExecutionCompleted in its history), its tokens and its activities, and the fork's share of a re-run.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.devhost.hostproc import DevHostProcess

QUESTION = (
    "Which region had the most returns in Q3? What were the top 5 products by revenue in 2025? How many orders "
    "were placed in Q2 2025? What does the returns policy say about refunds after 30 days? What does the warranty "
    "policy say about defective items?"
)
APP_DIR = Path(__file__).resolve().parent / "apps" / "latency_job"


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", ts.replace("Z", "+00:00")))


def _finished(host: DevHostProcess, job_id: str) -> dict[str, Any]:
    """Wall seconds, the job's own tokens and the activities it ran, from its history and view."""
    status = host.wait_status(job_id, showHistory="true", showHistoryOutput="true", timeout_s=300)
    assert status["runtimeStatus"] == "Completed", status
    events: list[dict[str, Any]] = status["historyEvents"]
    started = next(e for e in events if e["EventType"] == "ExecutionStarted")["Timestamp"]
    ended = next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"]
    output = status["output"] if isinstance(status["output"], dict) else {}
    assert output.get("status") == "completed", output
    return {
        "seconds": (_parse(ended) - _parse(started)).total_seconds(),
        "tokens": int((output.get("usage") or {}).get("total_tokens", 0)),
        "activities": sum(1 for e in events if e["EventType"] == "TaskCompleted"),
    }


def main(argv: list[str]) -> int:
    """Run the rounds and print the figures."""
    rounds = int(os.environ.get("BENCH_JOBS", "3"))
    figures: dict[str, list[dict[str, Any]]] = {"run": [], "re-run": [], "fork at s6": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"BENCH_LATENCY_MS": os.environ.get("BENCH_LATENCY_MS", "")}
        host = DevHostProcess(APP_DIR, Path(tmp) / "data", env=env).start(timeout_s=120)
        try:
            key = {"x-functions-key": host.keys.function} if host.keys else {}
            for _ in range(rounds):
                ids = []
                for _ in range(2):
                    resp = host.client.post("/api/jobs", json={"question": QUESTION}, headers=key)
                    resp.raise_for_status()
                    ids.append(resp.json()["id"])
                    figures["run" if len(ids) == 1 else "re-run"].append(_finished(host, ids[-1]))
                body = {"from_step": "s6", "changes": {"constraints": {"max_tokens": 800}}}
                resp = host.client.post(f"/api/jobs/{ids[0]}/fork", json=body, headers=key)
                resp.raise_for_status()
                assert resp.json()["carried_over"] == ["s1", "s2", "s3", "s4", "s5"], resp.json()
                figures["fork at s6"].append(_finished(host, resp.json()["id"]))
        finally:
            host.stop()
    print(f"6-step job (3 SQL, 2 lookups, answer); {rounds} rounds; median of each")
    print(f"{'':12} {'wall s':>8} {'tokens':>8} {'activities':>11}")
    medians = {}
    for name, rows in figures.items():
        medians[name] = {k: statistics.median(r[k] for r in rows) for k in ("seconds", "tokens", "activities")}
        m = medians[name]
        print(f"{name:12} {m['seconds']:8.2f} {m['tokens']:8.0f} {m['activities']:11.0f}")
    fork, again = medians["fork at s6"], medians["re-run"]
    print(
        f"the fork costs {100 * fork['seconds'] / again['seconds']:.0f}% of a re-run's wall time and "
        f"{100 * fork['tokens'] / max(1, again['tokens']):.0f}% of its tokens"
    )
    return 0
