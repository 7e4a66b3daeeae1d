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


class PartialOutputStore(Protocol):
    """Where streamed text waits until the step's result reaches the history."""

    def append(self, job_id: str, step_id: str, attempt: int, text: str, *, complete: bool = False) -> None:
        """Append ``text`` to the entry (replacing it when it belongs to another attempt)."""
        ...

    def read(self, job_id: str, step_id: str) -> PartialOutput | None:
        """The entry of a step, or None."""
        ...

    def drop(self, job_id: str, step_id: str) -> None:
        """Forget the entry of a step."""
        ...
