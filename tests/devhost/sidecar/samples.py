"""The durabletask SDK's examples (microsoft/durabletask-python ``examples/``), as their programs define them.

Each function is written as the example writes it (names, inputs, control flow), with the example's random
sleeps and counts made fixed so a test can check the result. The tests register them on a real
``TaskHubGrpcWorker`` pointed at devhost's gRPC endpoint and drive them with a real ``TaskHubGrpcClient``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from durabletask import task

# Where activities note each run (one line per execution), so tests can count executions across a crash.
RUNS_DIR_ENV = "SIDECAR_TEST_RUNS_DIR"


def _note_run(name: str, value: Any) -> None:
    runs = os.environ.get(RUNS_DIR_ENV)
    if runs:
        with open(Path(runs) / f"{name}.log", "a", encoding="utf-8") as f:
            f.write(f"{value}\n")


# --- examples/activity_sequence.py -------------------------------------------------------------


def hello(ctx: task.ActivityContext, name: str) -> str:
    """Activity function that returns a greeting."""
    _note_run("hello", name)
    return f"Hello {name}!"


def sequence(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Orchestrator function that calls the 'hello' activity function in a sequence."""
    result1 = yield ctx.call_activity(hello, input="Tokyo")
    result2 = yield ctx.call_activity(hello, input="Seattle")
    result3 = yield ctx.call_activity(hello, input="London")
    return [result1, result2, result3]


# --- examples/fanout_fanin.py ------------------------------------------------------------------


def get_work_items(ctx: task.ActivityContext, count: int) -> list[str]:
    """Activity function that returns a list of work items (the example picks a random count)."""
    return [f"work item {i}" for i in range(count)]


def process_work_item(ctx: task.ActivityContext, item: str) -> int:
    """Activity function that processes a work item (the example sleeps and returns a random number)."""
    _note_run("process_work_item", item)
    return int(item.rsplit(" ", 1)[1])


def fanout_orchestrator(ctx: task.OrchestrationContext, count: int) -> Any:
    """Orchestrator function that fans out to process_work_item and sums the results."""
    work_items = yield ctx.call_activity(get_work_items, input=count)
    tasks: list[task.Task[Any]] = [ctx.call_activity(process_work_item, input=item) for item in work_items]
    results = yield task.when_all(tasks)
    return sum(results)


# --- examples/human_interaction.py -------------------------------------------------------------


@dataclass
class Order:
    """Represents a purchase order."""

    Cost: float
    Product: str
    Quantity: int


@dataclass
class Approval:
    """The approval event's data (the example raises a namedtuple, which durabletask 1.12 sends as a JSON list;
    a typed wait is how 1.12 gives the orchestrator an object with an ``approver``)."""

    approver: str


def send_approval_request(_: task.ActivityContext, order: Order) -> None:
    """Activity function that sends an approval request to the manager."""
    _note_run("send_approval_request", order)


def place_order(_: task.ActivityContext, order: Order) -> None:
    """Activity function that places an order."""
    _note_run("place_order", order)


def purchase_order_workflow(ctx: task.OrchestrationContext, order: Order) -> Any:
    """Orchestrator function that represents a purchase order workflow."""
    if order.Cost < 1000:
        return "Auto-approved"
    yield ctx.call_activity(send_approval_request, input=order)
    approval_event = ctx.wait_for_external_event("approval_received", data_type=Approval)
    timeout_event = ctx.create_timer(timedelta(hours=24))
    winner = yield task.when_any([approval_event, timeout_event])
    if winner == timeout_event:
        return "Cancelled"
    yield ctx.call_activity(place_order, input=order)
    approval_details = approval_event.get_result()
    return f"Approved by '{approval_details.approver}'"


# --- sub-orchestrations with fan-out/fan-in (examples/sub-orchestrations-with-fan-out-fan-in) ---


def count_word(ctx: task.ActivityContext, word: str) -> int:
    """Activity: the length of a word."""
    return len(word)


def child_orchestrator(ctx: task.OrchestrationContext, words: list[str]) -> Any:
    """Sub-orchestration: fans out over its words."""
    counts = yield task.when_all([ctx.call_activity(count_word, input=w) for w in words])
    return sum(counts)


def parent_orchestrator(ctx: task.OrchestrationContext, groups: list[list[str]]) -> Any:
    """Starts one sub-orchestration per group and sums their results."""
    results = yield task.when_all([ctx.call_sub_orchestrator(child_orchestrator, input=g) for g in groups])
    return {"total": sum(results), "parts": results}


def two_worker_orchestrator(ctx: task.OrchestrationContext, word: str) -> Any:
    """Calls an activity of its own worker and one only another worker registers."""
    greeting = yield ctx.call_activity(hello, input=word)
    length = yield ctx.call_activity(count_word, input=word)
    return [greeting, length]


# --- timers, failures, continue-as-new, custom status, waits --------------------------------------


def timer_orchestrator(ctx: task.OrchestrationContext, seconds: float) -> Any:
    """Waits on a durable timer, then reports the replay-safe clock before and after."""
    before = ctx.current_utc_datetime
    yield ctx.create_timer(timedelta(seconds=seconds))
    after = ctx.current_utc_datetime
    return (after - before).total_seconds()


def fail_activity(ctx: task.ActivityContext, message: str) -> None:
    """Raises."""
    raise ValueError(message)


def failing_orchestrator(ctx: task.OrchestrationContext, message: str) -> Any:
    """Calls an activity that fails and does not catch it."""
    yield ctx.call_activity(fail_activity, input=message)
    return "unreachable"


def catching_orchestrator(ctx: task.OrchestrationContext, message: str) -> Any:
    """Calls an activity that fails and catches the TaskFailedError."""
    try:
        yield ctx.call_activity(fail_activity, input=message)
    except task.TaskFailedError as exc:
        return f"caught: {exc.details.message}"
    return "unreachable"


def retry_orchestrator(ctx: task.OrchestrationContext, message: str) -> Any:
    """Calls a failing activity with a retry policy (the worker retries on durable timers)."""
    policy = task.RetryPolicy(first_retry_interval=timedelta(milliseconds=100), max_number_of_attempts=3)
    try:
        yield ctx.call_activity(fail_activity, input=message, retry_policy=policy)
    except task.TaskFailedError:
        return "gave up"
    return "unreachable"


def counter_orchestrator(ctx: task.OrchestrationContext, n: int) -> Any:
    """Continues as new until n reaches 0."""
    if n <= 0:
        return "done"
    yield ctx.create_timer(timedelta(milliseconds=10))
    ctx.continue_as_new(n - 1)
    return None


def waiting_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Sets a custom status and waits for one external event, which it returns."""
    ctx.set_custom_status({"stage": "waiting"})
    value = yield ctx.wait_for_external_event("go")
    ctx.set_custom_status({"stage": "done"})
    return value


# --- for the crash tests: slow steps in a sequence and in a fan-out, and a timer between them ----------


def slow_step(ctx: task.ActivityContext, item: str) -> str:
    """Notes its run, then takes a while (so a kill -9 lands while some run)."""
    _note_run("slow_step", item)
    time.sleep(0.3)
    return item.upper()


def crash_orchestrator(ctx: task.OrchestrationContext, n: int) -> Any:
    """n steps in a sequence, a 1 s timer, then n steps fanned out."""
    first = []
    for i in range(n):
        first.append((yield ctx.call_activity(slow_step, input=f"s{i}")))
    yield ctx.create_timer(timedelta(seconds=1))
    second = yield task.when_all([ctx.call_activity(slow_step, input=f"f{i}") for i in range(n)])
    return first + second


# --- rewind: an activity that fails until a marker file exists ------------------------------------


def flaky(ctx: task.ActivityContext, marker: str) -> str:
    """Fails while ``marker`` does not exist."""
    if not Path(marker).exists():
        raise RuntimeError("not yet")
    return "fixed"


def flaky_orchestrator(ctx: task.OrchestrationContext, marker: str) -> Any:
    """One step that succeeds, then the flaky one."""
    first = yield ctx.call_activity(hello, input="before")
    second = yield ctx.call_activity(flaky, input=marker)
    return [first, second]


def sender_orchestrator(ctx: task.OrchestrationContext, target: str) -> Any:
    """Sends the 'go' event to another instance."""
    ctx.send_event(target, "go", data={"from": ctx.instance_id})
    yield ctx.create_timer(timedelta(milliseconds=1))
    return "sent"


ORCHESTRATORS: list[Any] = [
    sender_orchestrator,
    flaky_orchestrator,
    crash_orchestrator,
    sequence,
    fanout_orchestrator,
    purchase_order_workflow,
    child_orchestrator,
    parent_orchestrator,
    timer_orchestrator,
    failing_orchestrator,
    catching_orchestrator,
    retry_orchestrator,
    counter_orchestrator,
    waiting_orchestrator,
]
ACTIVITIES: list[Any] = [
    flaky,
    slow_step,
    hello,
    get_work_items,
    process_work_item,
    send_approval_request,
    place_order,
    count_word,
    fail_activity,
]
