"""The job's events derived from what the job view reads: committed ones from the history, provisional ones
from the custom status (docs/events.md).

Committed events are a pure function of the history, which only grows, so every instance derives the same
list in the same order and an event's position (its id ``c<seq>``) never changes. The custom status says
what is going on now (a step running, a retry wait, a question); it is re-read on every poll and sent as
provisional state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from api.contract.view import TERMINAL_STATUSES
from api.view import decode, event_line, job_status, ms_between, part_news, task_ref
from api.view_log import line_facts
from shared.executors import AGENT_TURN, CALL_TOOL, PLAN, kinds_where
from shared.jobs.contracts import Usage
from shared.jobs.events import (
    AnyEvent,
    EndEvent,
    EventError,
    LogEvent,
    QuestionEvent,
    StatusEvent,
    StepEvent,
    StepEventState,
    SupersededEvent,
    ToolCallEvent,
    UsageEvent,
)
from shared.jobs.models import TERMINAL_RUNTIME, JobState, StepState, Waiting
from shared.jobs.runs import PART_NEWS_EVENT

# History events whose log line says something went wrong.
_ERROR_LINES = ("failed", "activity error", "cancelled")


@dataclass
class _Fold:
    """What the derivation remembers while it walks the history."""

    streaming: set[str]
    usage: Usage = field(default_factory=Usage)
    events: list[AnyEvent] = field(default_factory=list)


def streaming_kinds() -> set[str]:
    """The step kinds whose answer streams (from the registry)."""
    return kinds_where(lambda spec: spec.streams)


def committed_events(
    history: list[dict[str, Any]],
    runtime: str | None,
    output: Any,
    custom: Any = None,
    streaming: set[str] | None = None,
) -> list[AnyEvent]:
    """Every committed event of the job, in order: one pass over the history.

    The end is derived only once the runtime status is terminal too (the history may show the last event a
    moment before the instance's status does); until then the history is read up to that event.
    """
    fold = _Fold(streaming if streaming is not None else streaming_kinds())
    for event in history:
        kind = event.get("EventType")
        if kind == "ExecutionCompleted" and runtime not in TERMINAL_RUNTIME:
            break
        derive = _DERIVE.get(str(kind))
        if derive is not None:
            fold.events.extend(derive(event, fold))
        line = event_line(event)
        if line is not None:
            fold.events.append(_log(event, line))
        if kind == "ExecutionCompleted":
            fold.events.extend(_skipped(event, custom))
            fold.events.extend(_ending(event, runtime, output))
            break
    return fold.events


def _log(event: dict[str, Any], line: str) -> LogEvent:
    """The log line of one history event (its step, when it is a step's)."""
    step_id, _, _ = task_ref(event) if event.get("EventType") in ("TaskCompleted", "TaskFailed") else (None, 0, {})
    facts = line_facts(event)
    about = {"topic": facts["topic"], "activity": facts.get("activity"), "failed": facts.get("failed")}
    if any(word in line for word in _ERROR_LINES):
        return LogEvent(at=_at(event), level="error", message=line, step_id=step_id, **about)
    return LogEvent(at=_at(event), message=line, step_id=step_id, **about)


def _at(event: dict[str, Any], key: str = "Timestamp") -> str:
    return _iso(str(event.get(key) or event.get("Timestamp") or ""))


def _iso(text: str | None) -> str:
    """Timestamps as the stream writes them: UTC with a Z."""
    return (text or "").replace("+00:00", "Z")


def _started(event: dict[str, Any], fold: _Fold) -> Iterator[AnyEvent]:
    """The job was accepted: it runs."""
    yield StatusEvent(at=_at(event), status="running")


def _task(event: dict[str, Any], fold: _Fold) -> Iterator[AnyEvent]:
    """One finished step attempt: started (at its scheduled time), then how it ended, its tool call, its usage."""
    step_id, attempt, inp = task_ref(event)
    if step_id is None:
        return
    kind = str(inp.get("executor_type") or event.get("FunctionName") or "activity")
    result = decode(event.get("Result"))
    body: dict[str, Any] = result if isinstance(result, dict) else {}
    failed = event.get("EventType") == "TaskFailed" or body.get("status") == "failed"
    error = _error_of(event, body) if failed else None
    tool = _tool_of(step_id, kind, inp)
    yield StepEvent(at=_at(event, "ScheduledTime"), step_id=step_id, kind=kind, state="started", attempt=attempt or 0)
    if tool is not None:
        yield ToolCallEvent(at=_at(event, "ScheduledTime"), step_id=step_id, tool=tool, state="started")
    yield StepEvent(
        at=_at(event),
        step_id=step_id,
        kind=kind,
        state="failed" if failed else "succeeded",
        attempt=attempt or 0,
        error=error,
        duration_ms=ms_between(event.get("ScheduledTime"), event.get("Timestamp")),
    )
    if tool is not None:
        summary = error.message[:200] if error else None
        ended: Literal["failed", "succeeded"] = "failed" if failed else "succeeded"
        yield ToolCallEvent(at=_at(event), step_id=step_id, tool=tool, state=ended, summary=summary)
    if failed and kind in fold.streaming:
        yield SupersededEvent(at=_at(event), step_id=step_id, attempt=attempt or 0)
    if isinstance(body.get("usage"), dict):
        used = Usage.model_validate(body["usage"])
        if used.total_tokens or used.estimated_cost:
            fold.usage = fold.usage + used
            yield UsageEvent(at=_at(event), **fold.usage.model_dump(exclude={"estimated"}))


def _error_of(event: dict[str, Any], body: dict[str, Any]) -> EventError:
    """The error of a failed attempt: its output's, or the activity's own failure."""
    if event.get("EventType") == "TaskFailed":
        return EventError(code="ACTIVITY_ERROR", message=str(event.get("Reason") or "")[:600])
    given = body.get("error")
    err: dict[str, Any] = given if isinstance(given, dict) else {}
    return EventError(code=str(err.get("code") or "FAILED"), message=str(err.get("message") or "")[:600])


def _tool_of(step_id: str, kind: str, inp: dict[str, Any]) -> str | None:
    """The tool a step attempt called in agent mode (``<step>-t<n>`` or a family tool), else None."""
    given = inp.get("task")
    task: dict[str, Any] = given if isinstance(given, dict) else {}
    if kind == CALL_TOOL:
        return str(task.get("tool") or CALL_TOOL)[:100]
    # Agent mode names its calls t<n> (a job in agent mode) or <step>-t<n> (an agent step of a plan).
    number = step_id.rpartition("-t")[2] if "-t" in step_id else step_id.removeprefix("t")
    if kind not in (PLAN, AGENT_TURN) and step_id != number and number.isdigit():
        return kind
    return None


def _skipped(event: dict[str, Any], custom: Any) -> Iterator[AnyEvent]:
    """Steps that never ran: only the final custom status tells (final once the job has ended)."""
    state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    for step in state.steps if state else []:
        if step.state == "skipped":
            yield StepEvent(at=_at(event), step_id=step.id, kind=step.kind, state="skipped", attempt=step.attempts)


def _ending(event: dict[str, Any], runtime: str | None, output: Any) -> Iterator[AnyEvent]:
    """The job's final status and the end."""
    status = job_status(runtime, None, output)
    answer = isinstance(output, dict) and output.get("answer") is not None
    yield StatusEvent(at=_at(event), status=status, finished=status in TERMINAL_STATUSES)
    yield EndEvent(at=_at(event), status=status, answer_available=answer)


_DERIVE: dict[str, Callable[[dict[str, Any], _Fold], Iterator[AnyEvent]]] = {
    "ExecutionStarted": _started,
    "TaskCompleted": _task,
    "TaskFailed": _task,
}


# Step states of the custom status that the stream shows as current state, and how it names them.
_NOW_STATES: dict[str, StepEventState] = {
    "running": "started",
    "retrying": "retrying",
    "waiting": "waiting",
    "skipped": "skipped",
}


@dataclass
class _StepMarks:
    """What the history tells of one step's changes: its attempts' ends, their scheduled times, answers to it."""

    ends: list[tuple[int, str, bool]] = field(default_factory=list)  # (position, time, failed)
    scheduled: dict[int, str] = field(default_factory=dict)  # attempt -> its scheduled time
    answered: list[str] = field(default_factory=list)


@dataclass
class _Marks:
    """The history read once for the times of the current state's changes."""

    steps: dict[str, _StepMarks] = field(default_factory=dict)
    timers: list[tuple[int, str]] = field(default_factory=list)  # (position, time fired)

    def of(self, step_id: str) -> _StepMarks:
        """The marks of one step (empty when the history has none)."""
        return self.steps.setdefault(step_id, _StepMarks())


def _marks(history: list[dict[str, Any]]) -> _Marks:
    """Each step's attempt ends, scheduled times and answers, and the timers fired, with their positions."""
    marks = _Marks()
    taken: set[str] = set()  # answer events already seen: a repeated delivery is ignored by the job, so here too
    for position, event in enumerate(history):
        kind = event.get("EventType")
        if kind in ("TaskCompleted", "TaskFailed"):
            step_id, attempt, _ = task_ref(event)
            if step_id is not None:
                step = marks.of(step_id)
                step.ends.append((position, _at(event), _failed(event)))
                step.scheduled[attempt or 0] = _at(event, "ScheduledTime")
        elif kind == "TimerFired":
            marks.timers.append((position, _at(event)))
        elif kind == "EventRaised":
            # The orchestrator names a question <step>-q<n> and waits for the event answer:<question id>.
            name = str(event.get("Name") or "")
            step_id, asked, number = name.removeprefix("answer:").rpartition("-q")
            if name.startswith("answer:") and asked and number.isdigit():
                if name not in taken:
                    taken.add(name)
                    marks.of(step_id).answered.append(_at(event))
            elif name.startswith(f"{PART_NEWS_EVENT}:") and (news := part_news(event)) is not None and news.ended:
                # A part's question answered (or expired): its step in the job runs on from then.
                shown = news.anchor or (news.step or {}).get("id")
                if isinstance(shown, str):
                    marks.of(shown).answered.append(_at(event))
    return marks


def _failed(event: dict[str, Any]) -> bool:
    """Whether a finished attempt failed (the activity itself, or its output says so)."""
    body = decode(event.get("Result"))
    return event.get("EventType") == "TaskFailed" or (isinstance(body, dict) and body.get("status") == "failed")


def _when(text: str | None) -> datetime | None:
    try:
        when = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


def _latest(times: list[str], default: str) -> str:
    """The latest of ISO timestamps written in different precisions (compared as times, not as text)."""
    known = [(when, text) for text in times if (when := _when(text)) is not None]
    return max(known)[1] if known else default


def _attempt_started(step: StepState, marks: _StepMarks, timers: list[tuple[int, str]], now: str) -> str:
    """When the step's current attempt started: its scheduled time once it ended, else what set it off last.

    That is the step's start, the end of its previous attempt (a fall-back to the next model), an answer to a
    question about it, or the first timer fired after its last failure (its retry backoff).
    """
    if step.attempts in marks.scheduled:
        return marks.scheduled[step.attempts]
    times = [_iso(step.started_at), *(at for _, at, _ in marks.ends), *marks.answered]
    if marks.ends and marks.ends[-1][2]:
        failed_at = marks.ends[-1][0]
        fired = next((at for position, at in timers if position > failed_at), None)
        times.extend([fired] if fired else [])
    return _latest(times, now)


def _changed_at(step: StepState, shown: StepEventState, marks: _Marks, waiting: Waiting | None, now: str) -> str:
    """When the step entered the state the custom status shows (not when the step first started)."""
    mine = marks.of(step.id)
    if shown == "started":
        return _attempt_started(step, mine, marks.timers, now)
    if shown == "retrying":
        # The backoff begins when the failed attempt ended (the orchestrator starts it in that episode).
        return mine.ends[-1][1] if mine.ends else _iso(step.started_at) or now
    if shown == "waiting":
        asked = waiting.asked_at if waiting is not None and waiting.step_id == step.id else step.waiting_since
        return _iso(asked) or now
    return _iso(step.ended_at) or _iso(step.started_at) or now


def current_state(
    runtime: str | None, custom: Any, output: Any, now: str, history: list[dict[str, Any]] | None = None
) -> list[AnyEvent]:
    """The provisional state of a running job from its custom status: its status, running steps, the question.

    Each step event is stamped with the time of its change, read from the custom status and the history.
    """
    if runtime in TERMINAL_RUNTIME:
        return []
    state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    now_status = job_status(runtime, state, output)
    finished = now_status in TERMINAL_STATUSES
    events: list[AnyEvent] = [StatusEvent(at=now, committed=False, status=now_status, finished=finished)]
    if state is None:
        return events
    marks = _marks(history or [])
    for step in state.steps:
        shown = _NOW_STATES.get(step.state)
        if shown is None:
            continue
        # A retry names the attempt that comes next, counted over the step's attempts on every model (the
        # custom status's next_attempt counts on the current model only).
        attempt = step.attempts + 1 if shown == "retrying" else step.attempts
        events.append(
            StepEvent(
                at=_changed_at(step, shown, marks, state.waiting, now),
                committed=False,
                step_id=step.id,
                kind=step.kind,
                state=shown,
                attempt=attempt,
                retry_at=_iso(step.retry_at) if shown == "retrying" and step.retry_at else None,
            )
        )
    if state.waiting is not None:
        ask = state.waiting
        events.append(
            QuestionEvent(
                at=_iso(ask.asked_at),
                committed=False,
                question_id=ask.question_id,
                text=ask.question,
                step_id=ask.step_id,
                options=ask.options,
            )
        )
    return events


def streaming_step(custom: Any, runtime: str | None, streaming: set[str]) -> tuple[str, int] | None:
    """The step whose answer is being written now (id, attempt), from the custom status; None when there is none."""
    if runtime in TERMINAL_RUNTIME or not isinstance(custom, dict):
        return None
    state = JobState.model_validate(custom)
    for step in state.steps:
        if step.state == "running" and step.kind in streaming:
            return step.id, step.attempts
    return None
