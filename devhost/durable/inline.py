"""Run an orchestrator generator inline, in this process, without Durable state.

This is the "old design": one loop in one process that calls the executors directly. It drives the
very same orchestrator body as Durable does, so the benchmark compares like with like, and tests can
exercise the job policy quickly. Timers sleep for real; a question to the user is answered by the
``answer`` callback (or expires).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

ActivityFn = Callable[[str, Any], Any]
AnswerFn = Callable[[str], Any]
BodyFn = Callable[[Any], Generator[Any, Any, Any]]


@dataclass(eq=False)
class InlineTask:
    """A task of the inline context: an activity result, a timer, an event or a race."""

    kind: str
    result: Any = None
    fire_at: datetime | None = None
    name: str | None = None
    children: list[InlineTask] = field(default_factory=list)
    cancelled: bool = False
    done: bool = False

    @property
    def is_completed(self) -> bool:
        """Whether the task finished."""
        return self.done

    def cancel(self) -> None:
        """Cancel a timer."""
        self.cancelled = True


class InlineContext:
    """The subset of DurableOrchestrationContext an orchestrator body uses, run eagerly."""

    def __init__(
        self,
        orchestration_input: Any,
        run_activity: ActivityFn,
        answer: AnswerFn | None = None,
        instance_id: str = "inline",
        sub_orchestrators: dict[str, BodyFn] | None = None,
    ) -> None:
        self._input = orchestration_input
        self._run_activity = run_activity
        self._answer = answer
        self.instance_id = instance_id
        # Orchestrator bodies by name, run inline (eagerly, to their end) when a body calls one.
        self.sub_orchestrators = dict(sub_orchestrators or {})
        self.children: dict[str, InlineContext] = {}
        self.is_replaying = False
        self.custom_status: Any = None
        self.activity_calls = 0

    @property
    def current_utc_datetime(self) -> datetime:
        """The wall clock (inline runs are not replayed)."""
        return datetime.now(UTC)

    def get_input(self) -> Any:
        """The orchestration input."""
        return self._input

    def set_custom_status(self, status: Any) -> None:
        """Keep the latest custom status."""
        self.custom_status = status

    def call_activity(self, name: str, input_: Any = None) -> InlineTask:
        """Run the activity now."""
        self.activity_calls += 1
        return InlineTask("activity", result=self._run_activity(name, input_), done=True)

    def call_sub_orchestrator(self, name: str, input_: Any = None, instance_id: str | None = None) -> InlineTask:
        """Run a sub-orchestration now, to its end (its own context; the same activities and answers)."""
        child_id = instance_id or f"{self.instance_id}:{len(self.children)}"
        child = InlineContext(input_, self._run_activity, self._answer, child_id, self.sub_orchestrators)
        self.children[child_id] = child
        return InlineTask("activity", result=run_inline(self.sub_orchestrators[name], child), done=True)

    def create_timer(self, fire_at: datetime) -> InlineTask:
        """A timer that fires when awaited."""
        return InlineTask("timer", fire_at=fire_at)

    def wait_for_external_event(self, name: str) -> InlineTask:
        """An event answered by the ``answer`` callback."""
        return InlineTask("event", name=name)

    def task_any(self, tasks: list[InlineTask]) -> InlineTask:
        """A race of the given tasks."""
        return InlineTask("any", children=list(tasks))

    def task_all(self, tasks: list[InlineTask]) -> InlineTask:
        """All of the given tasks (activities run eagerly, so they are already done)."""
        return InlineTask("all", children=list(tasks))


def _resolve(ctx: InlineContext, task: InlineTask) -> Any:
    if task.kind == "activity":
        return task.result
    if task.kind == "timer":
        assert task.fire_at is not None
        time.sleep(max(0.0, (task.fire_at - ctx.current_utc_datetime).total_seconds()))
        task.done = True
        return None
    if task.kind == "all":
        return [_resolve(ctx, child) for child in task.children]
    if task.kind == "any":
        # Activities and sub-orchestrations ran eagerly: one of them wins the race before any event or timer.
        finished = next((t for t in task.children if t.kind == "activity" and t.done), None)
        if finished is not None:
            return finished
        events = [t for t in task.children if t.kind == "event"]
        for event in events:
            if ctx._answer is not None:
                reply = ctx._answer(str(event.name))
                if reply is not None:
                    event.result, event.done = reply, True
                    return event
        timers = sorted((t for t in task.children if t.kind == "timer"), key=lambda t: t.fire_at or datetime.max)
        if timers:
            _resolve(ctx, timers[0])
            return timers[0]
        raise RuntimeError("inline run is waiting for an event nobody will raise")
    raise RuntimeError(f"cannot resolve a bare {task.kind} task inline")


def run_inline(body: Callable[[Any], Generator[Any, Any, Any]], ctx: InlineContext) -> Any:
    """Drive an orchestrator body to its return value."""
    gen = body(ctx)
    value: Any = None
    try:
        while True:
            task = gen.send(value)
            value = _resolve(ctx, task)
    except StopIteration as stop:
        return stop.value
