"""The job's log, read from its Durable history: one line per event a person cares about, and the log page.

Also the history decoding the view and the event stream share (``decode``, ``task_ref``). The log is the history
rendered as lines, so its cursor is a position in the history and never moves backwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from api.contract.view import LogEntry, LogPage
from shared.executors import AGENT_TURN, CALL_TOOL
from shared.jobs.fork import LOAD_FORK_BASE
from shared.jobs.models import PartNews
from shared.jobs.runs import LOAD_DEFINITION, PART_NEWS_EVENT

# How much of an Executor turn's reasoning one log line shows (the model may write 2000 characters).
MAX_REASONING_CHARS = 500


def decode(value: Any) -> Any:
    """Undo the JSON-in-JSON encodings Durable history uses for inputs and results."""
    for _ in range(4):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
        elif isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]
        else:
            return value
    return value


def task_ref(event: dict[str, Any]) -> tuple[str | None, int | None, dict[str, Any]]:
    """The step id, attempt and input of an activity event (from its task id ``job:step:attempt``)."""
    inp = decode(event.get("Input"))
    if not isinstance(inp, dict):
        return None, None, {}
    parts = str(inp.get("task_id", "")).rsplit(":", 2)
    if len(parts) != 3:
        return None, None, inp
    try:
        return parts[1], int(parts[2]), inp
    except ValueError:
        return parts[1], None, inp


def event_line(event: dict[str, Any]) -> str | None:
    """The log line of one history event, or None for an event the log does not show."""
    kind = event.get("EventType")
    if not isinstance(kind, str):
        return None
    if kind in _FIXED_LINES:
        return _FIXED_LINES[kind]
    line_of = _LINE_OF.get(kind)
    return line_of(event) if line_of is not None else None


def line_facts(event: dict[str, Any]) -> dict[str, Any]:
    """What the line of a history event is about, as fields: a client reads these, never the line's English.

    ``topic``: job, task, answer, question or timer; a task's ``activity`` (the activity that ran), whether the
    attempt ``failed``, and its ``step_id`` when the line names a step besides the activity.
    """
    kind = event.get("EventType")
    if kind in ("TaskCompleted", "TaskFailed"):
        step_id, _, _ = task_ref(event)
        name = str(event.get("FunctionName", "activity"))
        result = decode(event.get("Result"))
        failed = kind == "TaskFailed" or (isinstance(result, dict) and result.get("status") == "failed")
        facts: dict[str, Any] = {"topic": "task", "activity": name, "failed": failed}
        return facts | ({"step_id": step_id} if step_id not in (None, name) else {})
    if kind == "EventRaised":
        if str(event.get("Name", "")).startswith(f"{PART_NEWS_EVENT}:"):
            news = part_news(event)
            # A part's question asked, or expired, or news that is not valid: not a person's answer.
            return {
                "topic": "answer" if news is not None and news.asked is None and news.ended != "expired" else "question"
            }
        return {"topic": "answer"}
    return {"topic": "timer" if kind == "TimerFired" else "job"}


def _task_line(event: dict[str, Any]) -> str:
    """The line of a finished activity: which step and attempt, and how it went."""
    step_id, attempt, inp = task_ref(event)
    name = event.get("FunctionName", "activity")
    tool = inp.get("task", {}).get("tool") if isinstance(inp.get("task"), dict) else None
    if name == CALL_TOOL and tool:
        # One executor runs every family tool: the line names the tool that ran.
        name = f"{name} {str(tool)[:100]}"
    label = str(name) if step_id in (None, name) else f"{step_id} {name}"
    where = f"{label} (attempt {attempt})" if attempt else label
    if event.get("EventType") == "TaskFailed":
        return f"{where}: activity error: {str(event.get('Reason', ''))[:300]}"
    result = decode(event.get("Result"))
    if name == LOAD_DEFINITION:
        # The result is the definition itself (no status, no usage): the line says which one was loaded.
        what = " ".join(str(inp.get(k))[:64] for k in ("kind", "id") if inp.get(k))
        return f"{where}: loaded {what} v{inp.get('version')}" if what else f"{where}: loaded"
    if name == LOAD_FORK_BASE and isinstance(result, dict):
        return _fork_base_line(inp, result)
    if not isinstance(result, dict):
        return f"{where}: done"
    if result.get("status") == "failed":
        err = result.get("error") or {}
        return f"{where}: failed {err.get('code')}: {str(err.get('message', ''))[:300]}"
    usage = result.get("usage") or {}
    body = result.get("result") or {}
    line = f"{where}: {result.get('status')}{_result_detail(body)} ({usage.get('total_tokens', 0)} tokens)"
    return line + _turn_detail(body) if name == AGENT_TURN else line


def _fork_base_line(inp: dict[str, Any], result: dict[str, Any]) -> str:
    """A fork's first line: what it carried over from its origin, or why it could not."""
    base = result.get("base")
    origin, step = inp.get("origin"), inp.get("from_step")
    if not isinstance(base, dict):
        return f"fork of {origin} at {step} refused: {result.get('error_code')}: {result.get('error_message')}"
    carried = [str(c.get("step", {}).get("id")) for c in base.get("carried") or [] if isinstance(c, dict)]
    return f"forked from job {origin} at {step}; carried over: {', '.join(carried) or 'nothing'} (0 tokens)"


def _turn_detail(body: Any) -> str:
    """An Executor turn in the log: the tools it called and its reasoning, bounded."""
    if not isinstance(body, dict):
        return ""
    calls = body.get("tool_calls")
    tools = [str(c.get("tool"))[:64] for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    called = f", calls {', '.join(tools)}" if tools else ", calls no tool"
    reasoning = " ".join(str(body.get("reasoning") or "").split())
    cut = reasoning if len(reasoning) <= MAX_REASONING_CHARS else reasoning[: MAX_REASONING_CHARS - 1] + "…"
    return f"{called} — {cut}" if cut else called


def _result_detail(body: Any) -> str:
    """A few words on what a step produced (rows, chunks, a plan, a draft, an answer), or nothing."""
    if "rows" in body:
        return f", {body.get('row_count', len(body['rows']))} rows"
    if "chunks" in body:
        return f", {len(body['chunks'])} chunks"
    if "steps" in body:
        return f", plan of {len(body['steps'])} steps"
    if body.get("draft"):
        return ", SQL drafted"
    if "answer" in body:
        return f", answer with {len(body.get('citations', []))} citations"
    return ""


def _answered_line(event: dict[str, Any]) -> str:
    """The line of a user's answer to a question the job asked, or of a part's question (asked, answered)."""
    name = str(event.get("Name", ""))
    if name.startswith(f"{PART_NEWS_EVENT}:"):
        return _part_news_line(event)
    return f"user answered {name.removeprefix('answer:')}"


def _part_news_line(event: dict[str, Any]) -> str:
    """A branch or sub-workflow asks through the job: the question it shows, then how the question ended."""
    news = part_news(event)
    if news is None:
        return "a part of the run sent news that is not valid"
    if news.asked is not None:
        return f"waiting for the user ({news.question_id}): {news.asked.question[:80]}"
    if news.ended == "expired":
        return f"question {news.question_id} expired"
    return f"user answered {news.question_id}"


def part_news(event: dict[str, Any]) -> PartNews | None:
    """The news an EventRaised ``part-news:<n>`` carries, or None."""
    try:  # raised through the SDK client: JSON text inside the history's JSON, which decode undoes
        return PartNews.model_validate(decode(event.get("Input")))
    except ValueError:
        return None


def _terminated_line(event: dict[str, Any]) -> str:
    """The line of a job cancelled through the Durable API, with the reason given."""
    return f"job cancelled: {decode(event.get('Input')) or ''}"


def _ended_line(event: dict[str, Any]) -> str:
    """The last line: says how the job ended, never "Completed" for a job that failed or was cancelled."""
    runtime = event.get("OrchestrationStatus")
    result = decode(event.get("Result"))
    if runtime in ("Terminated", "Canceled"):
        return "job cancelled"
    if runtime == "Failed" or (isinstance(result, dict) and result.get("status") == "failed"):
        err = (result.get("error") if isinstance(result, dict) else None) or {}
        where = f" at {err['step_id']}" if err.get("step_id") else ""
        reason = f": {err.get('code')}: {str(err.get('message', ''))[:300]}" if err.get("code") else ""
        return f"job failed{where}{reason}"
    return "job completed"


# History events whose line is always the same.
_FIXED_LINES: dict[str, str] = {
    "ExecutionStarted": "job accepted",
    "TimerFired": "timer fired (retry backoff or wait deadline)",
    "ExecutionSuspended": "job suspended",
    "ExecutionResumed": "job resumed",
}
# History events whose line depends on what they carry.
_LINE_OF: dict[str, Callable[[dict[str, Any]], str]] = {
    "TaskCompleted": _task_line,
    "TaskFailed": _task_line,
    "EventRaised": _answered_line,
    "ExecutionCompleted": _ended_line,
    "ExecutionTerminated": _terminated_line,
}


def ms_between(start: str | None, end: str | None) -> int | None:
    """Milliseconds between two history timestamps (None when either is missing or unreadable)."""
    from datetime import datetime

    if not start or not end:
        return None
    try:
        delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(
            start.replace("Z", "+00:00")
        )
    except (ValueError, TypeError):
        return None
    return max(0, int(delta.total_seconds() * 1000))


def retry_message(retry_at: str | None, next_attempt: int | None, max_attempts: int | None) -> str:
    """'retrying at HH:MM:SS (attempt 2 of 3)' for a step waiting out a backoff."""
    from datetime import datetime

    when = retry_at or ""
    try:
        when = datetime.fromisoformat(when.replace("Z", "+00:00")).strftime("%H:%M:%S")
    except ValueError:
        pass
    attempt = f" (attempt {next_attempt} of {max_attempts})" if next_attempt and max_attempts else ""
    return f"retrying at {when}{attempt}" if when else f"retrying{attempt}"


def answers_received(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The people's answers the job took, as it received them: the first ``answer:<question id>`` event of
    each question (a later one, an answer delivered again after a crash, is ignored by the job and here)."""
    seen: dict[str, dict[str, Any]] = {}
    for event in history:
        name = str(event.get("Name", ""))
        if event.get("EventType") != "EventRaised" or not name.startswith("answer:"):
            continue
        question_id = name.removeprefix("answer:")
        if question_id in seen:
            seen[question_id]["deliveries"] += 1
            continue
        payload = decode(event.get("Input"))
        given = payload.get("answer") if isinstance(payload, dict) else None
        seen[question_id] = {
            "question_id": question_id,
            "answer": given,
            "received_at": event.get("Timestamp"),
            "deliveries": 1,
        }
    return list(seen.values())


def build_log(history: list[dict[str, Any]], cursor: int, limit: int) -> LogPage:
    """The log page after ``cursor`` (a history position)."""
    entries: list[LogEntry] = []
    position = cursor
    for position in range(cursor, len(history)):
        if len(entries) >= limit:
            break
        event = history[position]
        line = event_line(event)
        if line is not None:
            entries.append(LogEntry(seq=position, time=event.get("Timestamp"), message=line, **line_facts(event)))
    else:
        position = len(history)
    return LogPage(entries=entries, next_cursor=position, complete=position >= len(history))
