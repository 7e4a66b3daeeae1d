"""What does a workflow run add per node? Workflows of cheap tool nodes on a devhost process (the real app).

Method
- A real ``python -m devhost serve`` process serves the app (embedded defaults, SQLite state) with its
  definitions table in Azurite (started here on loopback). Two workflows are saved through the API:
  ``chain3``, three ``function.percent_change`` tool nodes one after another, and ``fan8``, a parallel node
  whose 8 branches are such tool nodes (each branch a sub-orchestration), joined.
- Each run is started through ``POST /api/workflows/{id}/runs`` and waited for, one at a time. Its wall time is
  the root's history ExecutionStarted to ExecutionCompleted (server clock). The tool's own work is a few
  microseconds of arithmetic, so the wall time is nearly all orchestration: the node walker, the steps'
  custom status, each activity's dispatch, and for fan8 the sub-orchestrations.
- The same work as a job: an agent job making 3, then 8 calls of the same tool (bench/apps/agent_job, a
  scripted Executor asking for up to 8 calls a turn, so 8 run side by side as the fan-out's branches do; its
  turns and answer step are charged to the calls), timed the same way on its own devhost process.
- Printed: p50 and p90 wall ms per tool node / call for each shape. ``BENCH_WORKFLOW_RUNS`` sets the runs per
  shape (default 10).
"""

from __future__ import annotations

import os
from typing import Any

from bench._devhost import app_host_with_definitions, history, machine, percentile
from bench.agent_overhead import agent_job_host, run_job
from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import DevHostProcess

TOOL = "function.percent_change"
WARMUP = 2


def tool_node(node_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "kind": "tool",
        "tool": TOOL,
        "input": {"old": {"value": 80}, "new": {"value": 100}},
        **extra,
    }


def shapes() -> dict[str, tuple[dict[str, Any], int]]:
    """The workflows, with how many tool nodes each runs."""
    chain = [tool_node("a"), tool_node("b", after=["a"]), tool_node("c", after=["b"])]
    branches = [f"t{i}" for i in range(8)]
    fan = [
        {"id": "split", "kind": "parallel", "branches": branches},
        *[tool_node(b) for b in branches],
        {"id": "merged", "kind": "join", "after": branches},
    ]
    return {
        "chain3": ({"id": "chain3", "name": "Chain of 3", "nodes": chain}, 3),
        "fan8": ({"id": "fan8", "name": "Fan-out of 8", "nodes": fan}, 8),
    }


def run_once(host: DevHostProcess, key: dict[str, str], wf_id: str) -> float:
    """Start one run, wait for it, and return its wall seconds from the history."""
    resp = host.client.post(f"/api/workflows/{wf_id}/runs", json={"inputs": {}}, headers=key)
    resp.raise_for_status()
    run_id = str(resp.json()["id"])
    status = host.wait_status(run_id, timeout_s=300)
    if (status.get("output") or {}).get("status") != "completed":
        raise RuntimeError(f"run {run_id} of {wf_id} did not complete: {status}")
    events = history(host, run_id)
    started = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionStarted")["Timestamp"])
    ended = parse_history_time(next(e for e in events if e["EventType"] == "ExecutionCompleted")["Timestamp"])
    return ended - started


def main(argv: list[str]) -> int:
    """Run each workflow shape on a devhost process and print the orchestration time per node."""
    runs = int(os.environ.get("BENCH_WORKFLOW_RUNS", "10"))
    print(f"workflow runs: wall ms per tool node (cheap tool, one run in flight); {machine()}")
    results: dict[str, list[float]] = {}
    with app_host_with_definitions("workflow-bench-") as (host, key):
        for name, (body, nodes) in shapes().items():
            host.client.post("/api/workflows", json=body, headers=key).raise_for_status()
            for _ in range(WARMUP):
                run_once(host, key, name)
            results[name] = [run_once(host, key, name) * 1000 / nodes for _ in range(runs)]
    results.update(job_results(runs))
    print(f"{'shape':<12} {'nodes':>5} {'runs':>5} {'p50 ms/node':>12} {'p90 ms/node':>12}")
    for name, per_node in results.items():
        nodes = int(name.rsplit("_", 1)[-1]) if name.startswith("job_") else shapes()[name][1]
        p50, p90 = percentile(per_node, 50), percentile(per_node, 90)
        print(f"{name:<12} {nodes:>5} {len(per_node):>5} {p50:>12.1f} {p90:>12.1f}")
    return 0


def job_results(runs: int) -> dict[str, list[float]]:
    """Wall ms per call of agent jobs making 3 and 8 tool calls (the same work as chain3 and fan8)."""
    out: dict[str, list[float]] = {}
    with agent_job_host("workflow-bench-job-") as (host, times):
        for calls in (3, 8):
            for _ in range(WARMUP):
                run_job(host, times, calls)
            out[f"job_{calls}"] = [run_job(host, times, calls).wall_s * 1000 / calls for _ in range(runs)]
    return out
