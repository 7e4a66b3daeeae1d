"""A small Server-Sent Events client for the job event stream (tests and bench only)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Message:
    """One SSE message: id, event type and the decoded data (None for a keep-alive comment)."""

    id: str | None
    event: str | None
    data: dict[str, Any] | None

    @property
    def committed(self) -> bool:
        """Whether the event is committed (derived from the history)."""
        return bool(self.data and self.data.get("committed"))


def messages(lines: Iterator[str]) -> Iterator[Message]:
    """Parse SSE lines into messages; a comment block (``: keep-alive``) becomes a message with no data."""
    fields: dict[str, str] = {}
    comment = False
    for line in lines:
        if line == "":
            if fields:
                data = json.loads(fields["data"]) if "data" in fields else None
                yield Message(fields.get("id"), fields.get("event"), data)
            elif comment:
                yield Message(None, None, None)
            fields, comment = {}, False
        elif line.startswith(":"):
            comment = True
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def read(
    http: httpx.Client, job_id: str, *, last_id: str | None = None, after: str | None = None, stop: Any = None
) -> list[Message]:
    """Read the stream until it closes, or until ``stop(message)`` is true (then disconnect)."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    params = {"after": after} if after else {}
    got: list[Message] = []
    with http.stream("GET", f"/api/jobs/{job_id}/events", headers=headers, params=params, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for message in messages(resp.iter_lines()):
            got.append(message)
            if stop is not None and stop(message):
                break
    return got


def committed_ids(found: list[Message]) -> list[str]:
    """The ids of the committed events, in order."""
    return [m.id for m in found if m.committed and m.id]
