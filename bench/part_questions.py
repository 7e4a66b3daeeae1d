"""What does asking inside a part cost? A branch's question relayed to the root run, on a devhost process.

Method
- A real ``python -m devhost serve`` process serves the app (embedded defaults, SQLite state) with its
  definitions table in Azurite (started here on loopback). Two workflows are saved through the API:
  ``root-ask``, one human node in the root run, and ``branch-ask``, a parallel node whose branch is that human
  node (a ``workflow_part`` sub-orchestration) beside a cheap tool node, joined.
- Each run is started, the job view polled (every 10 ms) until it shows the question, the question answered
  through the job API, and the run waited for; one run at a time.
- Client side: ms from the start request to the view showing the question (``to_question``), and from the
  answer request to the run's end (``answer_to_end``), for both shapes.
- Server side, for ``branch-ask`` only, from the histories (server clock): ``relay`` = the part's
  ``report_part`` scheduled → the root's ``part-news`` event (asked), ``clear`` = the part's ``answer:`` event →
  the root's ``part-news`` event (answered). ``BENCH_PART_QUESTION_RUNS`` sets the runs per shape (default 10).
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench._devhost import app_host_with_definitions, history, machine, percentile
from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import DevHostProcess

WARMUP = 2
ASK = {"id": "ask", "kind": "human", "question": {"value": "Go on?"}, "options": ["yes", "no"]}
TOOL = {
    "id": "calc",
    "kind": "tool",
    "tool": "function.percent_change",
    "input": {"old": {"value": 80}, "new": {"value": 100}},
}


def shapes() -> dict[str, dict[str, Any]]:
    """The two workflows: the question in the root run, and in a parallel branch."""
    branch = [
        {"id": "split", "kind": "parallel", "branches": ["ask", "calc"]},
        ASK,
        TOOL,
        {"id": "merged", "kind": "join", "after": ["ask", "calc"]},
    ]
    return {
        "root-ask": {"id": "root-ask", "name": "Root asks", "nodes": [ASK]},
        "branch-ask": {"id": "branch-ask", "name": "A branch asks", "nodes": branch},
    }


def run_once(host: DevHostProcess, key: dict[str, str], wf_id: str) -> dict[str, float]:
    """One run: client-side ms to the question and from the answer to the end (and, for a branch, the relay)."""
    started = time.perf_counter()
    resp = host.client.post(f"/api/workflows/{wf_id}/runs", json={"inputs": {}}, headers=key)
    resp.raise_for_status()
    run_id = str(resp.json()["id"])
    waiting = _poll(host, key, run_id, lambda view: view["status"] == "waiting_for_user")["waiting"]
    shown = time.perf_counter()
    answered = time.perf_counter()
    body = {"answer": "yes", "question_id": waiting["question_id"]}
    host.client.post(f"/api/jobs/{run_id}/feedback", json=body, headers=key).raise_for_status()
    view = _poll(host, key, run_id, lambda v: v["status"] in ("completed", "failed", "cancelled"))
    if view["status"] != "completed":
        raise RuntimeError(f"run {run_id} of {wf_id} ended {view['status']}: {view.get('error')}")
    out = {"to_question": (shown - started) * 1000, "answer_to_end": (time.perf_counter() - answered) * 1000}
    if waiting.get("instance"):
        out |= relay_ms(history(host, run_id), history(host, waiting["instance"]))
    return out


def relay_ms(root: list[dict[str, Any]], part: list[dict[str, Any]]) -> dict[str, float]:
    """Server ms from the part asking to the root having its news, and from the answer to the root's news of it."""
    news = [parse_history_time(e["Timestamp"]) for e in root if str(e.get("Name", "")).startswith("part-news:")]
    reports = [e for e in part if e.get("FunctionName") == "report_part"]
    asked = parse_history_time(reports[0]["ScheduledTime"])
    answer = next(e for e in part if str(e.get("Name", "")).startswith("answer:"))
    return {"relay": (news[0] - asked) * 1000, "clear": (news[1] - parse_history_time(answer["Timestamp"])) * 1000}


def _poll(host: DevHostProcess, key: dict[str, str], run_id: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        view = host.client.get(f"/api/jobs/{run_id}", headers=key).json()
        if done(view):
            return dict(view)
        time.sleep(0.01)
    raise RuntimeError(f"run {run_id} did not get there in time")


def main(argv: list[str]) -> int:
    """Run both shapes on a devhost process and print the figures."""
    runs = int(os.environ.get("BENCH_PART_QUESTION_RUNS", "10"))
    print(f"part questions: a question in a branch vs in the root run (one run in flight); {machine()}")
    results: dict[str, list[dict[str, float]]] = {}
    with app_host_with_definitions("part-question-bench-") as (host, key):
        for name, body in shapes().items():
            host.client.post("/api/workflows", json=body, headers=key).raise_for_status()
            for _ in range(WARMUP):
                run_once(host, key, name)
            results[name] = [run_once(host, key, name) for _ in range(runs)]
    print(f"{'shape':<12} {'measure':<14} {'runs':>5} {'p50 ms':>9} {'p90 ms':>9}")
    for name, rows in results.items():
        for measure in rows[0]:
            values = [row[measure] for row in rows]
            p50, p90 = percentile(values, 50), percentile(values, 90)
            print(f"{name:<12} {measure:<14} {len(values):>5} {p50:>9.1f} {p90:>9.1f}")
    return 0
