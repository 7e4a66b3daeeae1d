"""Durable test app for the devhost engine: one orchestrator per behaviour under test."""

import asyncio
import logging
import os
import threading
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from extra_functions import bp

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
app.register_functions(bp)

# Per-key attempt counters for the flaky activity (the engine runs activities in-process).
_attempts: dict[str, int] = {}
_attempts_lock = threading.Lock()
log = logging.getLogger("durable_basic")


@app.activity_trigger(input_name="city")
def say_hello(city: str) -> str:
    """Greet a city."""
    return f"Hello {city}!"


@app.activity_trigger(input_name="value")
async def double(value: int) -> int:
    """Double a number (async activity)."""
    await asyncio.sleep(0)
    return value * 2


@app.activity_trigger(input_name="payload")
def flaky(payload: dict[str, Any]) -> str:
    """Fail the first ``fail_times`` calls for ``key``, then succeed."""
    key = payload["key"]
    with _attempts_lock:
        _attempts[key] = _attempts.get(key, 0) + 1
        attempt = _attempts[key]
    if attempt <= payload["fail_times"]:
        raise ValueError(f"attempt {attempt} of {key} failed")
    return f"{key} ok after {attempt}"


@app.activity_trigger(input_name="message")
def boom(message: str) -> None:
    """Always fail."""
    raise RuntimeError(message)


@app.activity_trigger(input_name="seconds")
def sleepy(seconds: float) -> float:
    """Block a worker thread for a while."""
    threading.Event().wait(seconds)
    return seconds


@app.activity_trigger(input_name="text")
def who_am_i(text: str, context: func.Context) -> dict[str, str]:
    """Report the invocation context and log a line from inside the activity."""
    log.info("who_am_i says %s", text)
    return {"function": context.function_name, "invocation": context.invocation_id, "text": text}


@app.orchestration_trigger(context_name="context")
def chain(context: df.DurableOrchestrationContext):
    """Call say_hello three times by name."""
    results = []
    for city in ("Tokyo", "Seattle", "London"):
        results.append((yield context.call_activity("say_hello", city)))
    return results


@app.orchestration_trigger(context_name="context")
def chain_fn(context: df.DurableOrchestrationContext):
    """Call activities by function object and with the input of the instance."""
    name = context.get_input()
    first = yield context.call_activity(say_hello, name)
    second = yield context.call_activity(double, 21)
    return [first, second, context.instance_id]


@app.orchestration_trigger(context_name="context")
def fan_out(context: df.DurableOrchestrationContext):
    """Double 0..n-1 in parallel and sum the results."""
    n = context.get_input()
    results = yield context.task_all([context.call_activity("double", i) for i in range(n)])
    return sum(results)


@app.orchestration_trigger(context_name="context")
def retry_orch(context: df.DurableOrchestrationContext):
    """Call flaky with retries, then say hello."""
    args = context.get_input()
    options = df.RetryOptions(first_retry_interval_in_milliseconds=50, max_number_of_attempts=args["attempts"])
    try:
        result = yield context.call_activity_with_retry("flaky", options, args)
    except Exception as exc:
        if args.get("catch"):
            return f"caught: {exc}"
        raise
    tail = yield context.call_activity("say_hello", "retry")
    return [result, tail]


@app.orchestration_trigger(context_name="context")
def child_orch(context: df.DurableOrchestrationContext):
    """Sub-orchestration: greet the input and report the parent."""
    greeting = yield context.call_activity("say_hello", context.get_input())
    return {"greeting": greeting, "parent": context.parent_instance_id, "id": context.instance_id}


@app.orchestration_trigger(context_name="context")
def flaky_child(context: df.DurableOrchestrationContext):
    """Sub-orchestration that fails while flaky fails."""
    return (yield context.call_activity("flaky", context.get_input()))


@app.orchestration_trigger(context_name="context")
def parent_orch(context: df.DurableOrchestrationContext):
    """Call child_orch twice (default and explicit id) and flaky_child with retries."""
    args = context.get_input()
    first = yield context.call_sub_orchestrator("child_orch", "Paris")
    second = yield context.call_sub_orchestrator("child_orch", "Oslo", f"{context.instance_id}-kid")
    options = df.RetryOptions(first_retry_interval_in_milliseconds=50, max_number_of_attempts=args["attempts"])
    third = yield context.call_sub_orchestrator_with_retry("flaky_child", options, args)
    return [first, second, third]


@app.orchestration_trigger(context_name="context")
def timer_orch(context: df.DurableOrchestrationContext):
    """Wait on a short durable timer."""
    start = context.current_utc_datetime
    yield context.create_timer(start + timedelta(seconds=context.get_input()))
    return (context.current_utc_datetime - start).total_seconds()


@app.orchestration_trigger(context_name="context")
def race_orch(context: df.DurableOrchestrationContext):
    """Race an Approval event against a timer; cancel the timer when the event wins."""
    deadline = context.current_utc_datetime + timedelta(seconds=context.get_input())
    timer = context.create_timer(deadline)
    approval = context.wait_for_external_event("Approval")
    winner = yield context.task_any([approval, timer])
    if winner == approval:
        timer.cancel()
        return {"approved": approval.result}
    return "timed out"


@app.orchestration_trigger(context_name="context")
def event_orch(context: df.DurableOrchestrationContext):
    """Wait for two different events in order."""
    first = yield context.wait_for_external_event("first")
    second = yield context.wait_for_external_event("second")
    return [first, second]


@app.orchestration_trigger(context_name="context")
def any_orch(context: df.DurableOrchestrationContext):
    """First of a fast and a slow activity wins."""
    slow = context.call_activity("sleepy", 0.3)
    fast = context.call_activity("say_hello", "fast")
    winner = yield context.task_any([slow, fast])
    return winner.result


@app.orchestration_trigger(context_name="context")
def counter_orch(context: df.DurableOrchestrationContext):
    """Continue as new until the counter reaches the limit, keeping events for the next generation."""
    state = context.get_input()
    n = state["n"]
    if n == 0:
        context.set_custom_status({"generation": n})
    if state.get("wait"):
        bump = yield context.wait_for_external_event("bump")
        state["got"] = state.get("got", []) + [bump]
    else:
        yield context.call_activity("double", n)
    if n < state["limit"]:
        state["n"] = n + 1
        context.continue_as_new(state)
        return None
    return state


@app.orchestration_trigger(context_name="context")
def status_orch(context: df.DurableOrchestrationContext):
    """Set a custom status, wait for an event, finish."""
    context.set_custom_status({"stage": "waiting", "size": len(context.get_input() or "")})
    value = yield context.wait_for_external_event("go")
    context.set_custom_status({"stage": "done"})
    return value


@app.orchestration_trigger(context_name="context")
def big_status_orch(context: df.DurableOrchestrationContext):
    """Set a custom status over the 16 KB UTF-16 limit."""
    context.set_custom_status("x" * context.get_input())
    yield context.call_activity("say_hello", "big")
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def raise_orch(context: df.DurableOrchestrationContext):
    """Fail from orchestrator code after one activity."""
    yield context.call_activity("say_hello", "before")
    raise ValueError("kaboom in orchestrator")


@app.orchestration_trigger(context_name="context")
def activity_fail_orch(context: df.DurableOrchestrationContext):
    """Let an activity failure escape."""
    yield context.call_activity("boom", "bad thing happened")
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def activity_catch_orch(context: df.DurableOrchestrationContext):
    """Catch an activity failure and return its message."""
    try:
        yield context.call_activity("boom", "caught me")
    except Exception as exc:
        return str(exc)
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def nondet_orch(context: df.DurableOrchestrationContext):
    """Schedules a different activity when DEVHOST_NONDET=1 (to test non-determinism detection)."""
    if os.environ.get("DEVHOST_NONDET") == "1":
        yield context.call_activity("say_hello", "changed")
    else:
        yield context.call_activity("double", 1)
    value = yield context.wait_for_external_event("go")
    return value


@app.orchestration_trigger(context_name="context")
def unknown_activity_orch(context: df.DurableOrchestrationContext):
    """Call an activity that does not exist."""
    return (yield context.call_activity("does_not_exist", 1))


@app.orchestration_trigger(context_name="context")
def unknown_sub_orch(context: df.DurableOrchestrationContext):
    """Call a sub-orchestrator that does not exist."""
    return (yield context.call_sub_orchestrator("no_such_orchestrator", 1))


@app.orchestration_trigger(context_name="context")
def entity_orch(context: df.DurableOrchestrationContext):
    """Call an entity this app has no function for."""
    return (yield context.call_entity(df.EntityId("counter", "k"), "add", 1))


@app.orchestration_trigger(context_name="context")
def wait_orch(context: df.DurableOrchestrationContext):
    """Activity, event, activity: the shape used by restart and management tests."""
    first = yield context.call_activity("say_hello", "one")
    value = yield context.wait_for_external_event("go")
    second = yield context.call_activity("say_hello", str(value))
    return [first, second]


@app.orchestration_trigger(context_name="context")
def rewind_orch(context: df.DurableOrchestrationContext):
    """Fails while flaky fails; succeeds after a rewind once flaky recovers."""
    args = context.get_input()
    first = yield context.call_activity("say_hello", "pre")
    second = yield context.call_activity("flaky", args)
    return [first, second]


@app.orchestration_trigger(context_name="context")
def context_orch(context: df.DurableOrchestrationContext):
    """Run who_am_i and a renamed activity."""
    info = yield context.call_activity("who_am_i", "hi")
    renamed = yield context.call_activity("Renamed", "x")
    return [info, renamed]


@app.orchestration_trigger(context_name="context")
def forever_orch(context: df.DurableOrchestrationContext):
    """Wait for an event that may never come."""
    return (yield context.wait_for_external_event("never"))


@app.orchestration_trigger(context_name="context")
def noop_chain(context: df.DurableOrchestrationContext):
    """Run ``n`` sequential no-op activities (benchmark shape)."""
    n = context.get_input()
    for i in range(n):
        yield context.call_activity("noop", i)
    return n


@app.activity_trigger(input_name="value")
def noop(value: Any) -> Any:
    """Return the input unchanged."""
    return value


@app.orchestration_trigger(context_name="context")
def rewind_parent(context: df.DurableOrchestrationContext):
    """Call flaky_child without retries (a failed child fails the parent; rewind re-runs it)."""
    greeting = yield context.call_activity("say_hello", "parent")
    child = yield context.call_sub_orchestrator("flaky_child", context.get_input(), f"{context.instance_id}-child")
    return [greeting, child]


# (episode marker, is_replaying) pairs recorded by replay_probe, per instance id.
replay_log: dict[str, list[tuple[str, bool]]] = {}


@app.orchestration_trigger(context_name="context")
def replay_probe(context: df.DurableOrchestrationContext):
    """Record is_replaying at each step to check the IsPlayed boundary."""
    seen = replay_log.setdefault(context.instance_id, [])
    seen.append(("start", context.is_replaying))
    yield context.call_activity("say_hello", "1")
    seen.append(("after1", context.is_replaying))
    yield context.call_activity("say_hello", "2")
    seen.append(("after2", context.is_replaying))
    return len(seen)


@app.orchestration_trigger(context_name="context")
def retry_fan(context: df.DurableOrchestrationContext):
    """Fan out with-retry calls that each fail a few times, mixed with plain calls and a timer."""
    args = context.get_input()
    options = df.RetryOptions(first_retry_interval_in_milliseconds=30, max_number_of_attempts=4)
    tasks = []
    for i in range(args["width"]):
        payload = {"key": f"{args['key']}-{i}", "fail_times": i % 3}
        tasks.append(context.call_activity_with_retry("flaky", options, payload))
        tasks.append(context.call_activity("say_hello", str(i)))
    tasks.append(context.create_timer(context.current_utc_datetime + timedelta(milliseconds=50)))
    results = yield context.task_all(tasks)
    return [r for r in results if r is not None]


@app.orchestration_trigger(context_name="context")
def sleepy_then_wait(context: df.DurableOrchestrationContext):
    """A slow activity, then an event (used to check results are persisted on a graceful stop)."""
    slept = yield context.call_activity("sleepy", context.get_input())
    value = yield context.wait_for_external_event("go")
    return [slept, value]
