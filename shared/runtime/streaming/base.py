"""What every partial-output store shares: the entry, the store interface and how long entries live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# Entries of finished steps are kept this long (the view prefers the history as soon as it has them).
DONE_TTL_S = 600
# Anything older than this is an orphan (a crashed worker): removed on the next prune.
MAX_AGE_S = 86_400


@dataclass(frozen=True)
class PartialOutput:
    """The text streamed so far by one attempt of one step."""

    text: str
    attempt: int
    updated_at: str
    complete: bool

    @property
    def chars(self) -> int:
        """Length of the text so far."""
        return len(self.text)


@dataclass(frozen=True)
class PartialSlice:
    """What a follower of one step's text gets: the text from ``offset`` of the stored attempt.

    ``superseded`` is True when the store holds another attempt than the one followed: the follower's text
    is void and this slice starts that attempt's text at 0.
    """

    text: str
    offset: int
    attempt: int
    complete: bool
    superseded: bool = False

    @property
    def end(self) -> int:
        """The character position after this slice."""
        return self.offset + len(self.text)


def slice_of(entry: PartialOutput | None, attempt: int, offset: int) -> PartialSlice | None:
    """The slice a follower at (``attempt``, ``offset``) gets from a whole entry (stores without range reads)."""
    if entry is None:
        return None
    if entry.attempt != attempt:
        return PartialSlice(entry.text, 0, entry.attempt, entry.complete, superseded=attempt != 0)
    return PartialSlice(entry.text[offset:], min(offset, len(entry.text)), entry.attempt, entry.complete)


class PartialOutputStore(Protocol):
    """Where streamed text waits until the step's result reaches the history."""

    def append(self, job_id: str, step_id: str, attempt: int, text: str, *, complete: bool = False) -> None:
        """Append ``text`` to the entry (replacing it when it belongs to another attempt)."""
        ...

    def read(self, job_id: str, step_id: str) -> PartialOutput | None:
        """The entry of a step, or None."""
        ...

    def read_from(self, job_id: str, step_id: str, attempt: int, offset: int) -> PartialSlice | None:
        """The text after ``offset`` of ``attempt`` (the whole text of another attempt, marked superseded)."""
        ...

    def drop(self, job_id: str, step_id: str) -> None:
        """Forget the entry of a step."""
        ...
