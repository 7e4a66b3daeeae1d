"""Benchmark app: sequential chains of no-op activities and instances parked on an external event.

Activities time their own bodies (``perf_counter``) and return the duration, so a benchmark can
subtract the time spent inside activities from a job's wall time and keep only the orchestration
overhead (replay, history commit, dispatch).
"""

import time
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="value")
async def noop(value: int) -> float:
    """No-op async activity (runs on the event loop); returns its body's duration in seconds."""
    started = time.perf_counter()
    return time.perf_counter() - started


@app.activity_trigger(input_name="value")
def noop_sync(value: int) -> float:
    """No-op sync activity (runs on the host's thread pool); returns its body's duration in seconds."""
    started = time.perf_counter()
    return time.perf_counter() - started


@app.orchestration_trigger(context_name="context")
def chain(context: df.DurableOrchestrationContext):
    """``steps`` no-op activities one after the other; returns the step count and the summed body time."""
    job: dict[str, Any] = context.get_input()
    activity = "noop_sync" if job.get("sync") else "noop"
    body_s = 0.0
    for i in range(job["steps"]):
        body_s += yield context.call_activity(activity, i)
    return {"steps": job["steps"], "body_s": body_s}


@app.orchestration_trigger(context_name="context")
def parked(context: df.DurableOrchestrationContext):
    """One no-op activity, then wait for the 'Go' event (a job parked on a human answer); returns the event."""
    yield context.call_activity("noop", 0)
    context.set_custom_status("waiting")
    answer = yield context.wait_for_external_event("Go")
    return answer
