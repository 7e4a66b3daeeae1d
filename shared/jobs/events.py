"""The job event stream's events (docs/events.md): one model per type, their ids and their SSE encoding.

Committed events come from the Durable history and have ids ``c<seq>``; provisional ones (the current state
from the custom status, answer deltas) have cursor ids ``c<seq>.p<k>.<attempt>.<chars>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StepEventState = Literal["started", "retrying", "waiting", "succeeded", "failed", "skipped"]
_ID = re.compile(r"^c(\d{1,9})(?:\.p(\d{1,6})\.(\d{1,4})\.(\d{1,9}))?$")


class _Event(BaseModel):
    """What every event carries."""

    model_config = ConfigDict(extra="forbid")

    at: str
    committed: bool = True


class EventError(BaseModel):
    """Why a step attempt failed."""

    code: str
    message: str = Field(default="", max_length=600)


class StatusEvent(_Event):
    """The job's status changed."""

    type: Literal["status"] = "status"
    status: str
    # The job has ended (a terminal status): set by the API, which owns the statuses (api/contract/view.py).
    finished: bool = False


class StepEvent(_Event):
    """A step attempt started, waits, is retried, or ended."""

    type: Literal["step"] = "step"
    step_id: str
    kind: str
    state: StepEventState
    attempt: int = Field(default=0, ge=0)
    retry_at: str | None = None
    error: EventError | None = None
    duration_ms: int | None = Field(default=None, ge=0)


class LogEvent(_Event):
    """One line of the job's log."""

    type: Literal["log"] = "log"
    level: Literal["info", "warning", "error"] = "info"
    message: str
    step_id: str | None = None
    # What the line is about (api/view_log.line_facts): a client reads these, never the line's English.
    topic: Literal["job", "task", "answer", "question", "timer"] | None = None
    activity: str | None = None
    failed: bool | None = None


class QuestionEvent(_Event):
    """The job waits for a person."""

    type: Literal["question"] = "question"
    question_id: str
    text: str
    step_id: str | None = None
    options: list[str] = Field(default_factory=list)


class ToolCallEvent(_Event):
    """A tool call of agent mode."""

    type: Literal["tool_call"] = "tool_call"
    step_id: str
    tool: str
    state: Literal["started", "succeeded", "failed"]
    summary: str | None = None


class DeltaEvent(_Event):
    """Provisional answer text: ``text`` belongs at character ``offset`` of the attempt's answer."""

    type: Literal["delta"] = "delta"
    committed: bool = False
    step_id: str
    attempt: int = Field(ge=0)
    offset: int = Field(ge=0)
    text: str


class SupersededEvent(_Event):
    """The deltas of that attempt are void (it failed or was retried)."""

    type: Literal["superseded"] = "superseded"
    step_id: str
    attempt: int = Field(ge=0)


class UsageEvent(_Event):
    """The job's running usage total."""

    type: Literal["usage"] = "usage"
    tokens_input: int = 0
    tokens_output: int = 0
    total_tokens: int = 0
    estimated_cost: float = 0.0


class EndEvent(_Event):
    """The last event of a job."""

    type: Literal["end"] = "end"
    status: str
    answer_available: bool = False


class ReconnectEvent(_Event):
    """The stream reached its maximum duration: reconnect with Last-Event-ID."""

    type: Literal["reconnect"] = "reconnect"
    committed: bool = False
    after: str


AnyEvent = (
    StatusEvent
    | StepEvent
    | LogEvent
    | QuestionEvent
    | ToolCallEvent
    | DeltaEvent
    | SupersededEvent
    | UsageEvent
    | EndEvent
    | ReconnectEvent
)
# One event as a client parses it: ``TypeAdapter(JobEvent).validate_json(data)``.
JobEvent = Annotated[AnyEvent, Field(discriminator="type")]


@dataclass(frozen=True, order=True)
class Cursor:
    """Where a subscriber is: committed events sent, current-state events since, answer attempt and chars sent."""

    seq: int = 0
    state: int = 0
    attempt: int = 0
    chars: int = 0

    def committed_id(self) -> str:
        """The id of the committed event at ``seq``."""
        return f"c{self.seq}"

    def provisional_id(self) -> str:
        """The id of a provisional event that leaves the subscriber here."""
        return f"c{self.seq}.p{self.state}.{self.attempt}.{self.chars}"


def parse_event_id(text: str) -> Cursor | None:
    """The cursor an event id stands for; None when it is not one of ours."""
    match = _ID.match(text.strip())
    if match is None:
        return None
    seq, state, attempt, chars = match.groups()
    if state is None:
        return Cursor(int(seq))
    return Cursor(int(seq), int(state), int(attempt), int(chars))


def sse(event_id: str, event: BaseModel) -> str:
    """One SSE message: id, event type and one-line JSON data."""
    data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
    line = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"id: {event_id}\nevent: {data['type']}\ndata: {line}\n\n"


KEEP_ALIVE = ": keep-alive\n\n"
