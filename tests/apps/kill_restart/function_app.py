"""Crash-test app: activities leave a trace on disk for every execution and can block on a file latch.

Every orchestration takes ``{"dir": "<folder>", ...}`` as input. Activities append one line
``<key> <pid>`` to ``<dir>/runs.log`` each time they execute (so a test can count executions per
process across a ``kill -9``), and a latched activity then waits until ``<dir>/release`` exists.
"""

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

LATCH_LIMIT_S = 120.0


def _record(folder: str, key: str) -> None:
    # One O_APPEND write per execution: lines from concurrent threads never interleave.
    fd = os.open(Path(folder) / "runs.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


@app.activity_trigger(input_name="step")
def step(step: dict[str, Any]) -> str:
    """Record the execution; with ``latch``, block until the release file exists; return ``<key>:done``."""
    _record(step["dir"], step["key"])
    if step.get("latch"):
        release = Path(step["dir"]) / "release"
        deadline = time.monotonic() + LATCH_LIMIT_S
        while not release.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"latch for {step['key']} was never released")
            time.sleep(0.01)
    return f"{step['key']}:done"


@app.activity_trigger(input_name="item")
async def square(item: dict[str, Any]) -> int:
    """Record the execution, then square ``n`` after ``delay_s`` (or after the latch, if ``latch``)."""
    _record(item["dir"], f"{item.get('tag', '')}sq{item['n']}")
    if item.get("latch"):
        release = Path(item["dir"]) / "release"
        deadline = time.monotonic() + LATCH_LIMIT_S
        while not release.exists():  # noqa: ASYNC110 - the latch is a file the test process creates
            if time.monotonic() > deadline:
                raise TimeoutError(f"latch for sq{item['n']} was never released")
            await asyncio.sleep(0.01)
    else:
        await asyncio.sleep(item.get("delay_s", 0.0))
    return int(item["n"]) ** 2


@app.orchestration_trigger(context_name="context")
def three_steps(context: df.DurableOrchestrationContext):
    """a, then b (latched: the test kills the host while it blocks), then c."""
    job = context.get_input()
    folder = job["dir"]
    results = [(yield context.call_activity("step", {"dir": folder, "key": "a"}))]
    results.append((yield context.call_activity("step", {"dir": folder, "key": "b", "latch": True})))
    results.append((yield context.call_activity("step", {"dir": folder, "key": "c"})))
    return results


@app.orchestration_trigger(context_name="context")
def timer_wait(context: df.DurableOrchestrationContext):
    """before, a durable timer of ``delay_s``, after; returns the timer's due time and the results."""
    job = context.get_input()
    folder = job["dir"]
    before = yield context.call_activity("step", {"dir": folder, "key": "before"})
    due = context.current_utc_datetime + timedelta(seconds=job["delay_s"])
    yield context.create_timer(due)
    after = yield context.call_activity("step", {"dir": folder, "key": "after"})
    return {"due": due.isoformat(), "results": [before, after]}


@app.orchestration_trigger(context_name="context")
def fan_out(context: df.DurableOrchestrationContext):
    """Square 0..count-1 in parallel; items from ``latch_from`` on block on the latch."""
    job = context.get_input()
    tasks = [
        context.call_activity(
            "square",
            {
                "dir": job["dir"],
                "tag": job.get("tag", ""),
                "n": n,
                "delay_s": job["delay_s"],
                "latch": n >= job["latch_from"],
            },
        )
        for n in range(job["count"])
    ]
    squares = yield context.task_all(tasks)
    return squares


@app.orchestration_trigger(context_name="context")
def square_chain(context: df.DurableOrchestrationContext):
    """Square 0..count-1 one after the other."""
    job = context.get_input()
    squares = []
    for n in range(job["count"]):
        item = {"dir": job["dir"], "tag": job["tag"], "n": n, "delay_s": job["delay_s"]}
        squares.append((yield context.call_activity("square", item)))
    return squares


@app.orchestration_trigger(context_name="context")
def approval(context: df.DurableOrchestrationContext):
    """before (latched when ``latch``), wait for the 'Approval' event, then after; returns the event data."""
    job = context.get_input()
    folder = job["dir"]
    before = yield context.call_activity("step", {"dir": folder, "key": "before", "latch": job.get("latch", False)})
    context.set_custom_status("waiting")
    decision = yield context.wait_for_external_event("Approval")
    after = yield context.call_activity("step", {"dir": folder, "key": "after"})
    return {"decision": decision, "results": [before, after]}
