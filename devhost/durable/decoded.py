"""Per-instance cache of decoded history, so an episode JSON-decodes only the events it appends.

The SDK still receives the whole history and replays every event (as with the real host); only the
``json.loads`` of the already-decoded prefix is skipped (``devhost.durable.accel.predecoded``). The
cached prefix is valid only while the history text still starts with the text it was decoded from.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

# Short histories decode in microseconds: caching them would only cost memory (parked instances).
MIN_CACHED_EVENTS = 32
# Bound on all cached events together (about 0.7 kB each), least recently used first out.
MAX_CACHED_EVENTS = 20_000


class DecodedHistories:
    """Decoded history events per instance, keyed by the exact history text they came from."""

    def __init__(self, min_events: int = MIN_CACHED_EVENTS, max_events: int = MAX_CACHED_EVENTS) -> None:
        self._entries: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()
        self._count = 0
        self._min = min_events
        self._max = max_events
        self.hits = 0

    def context(self, key: str, joined: str, fresh: str, tail: str) -> dict[str, Any]:
        """``json.loads('{"history":[' + joined + ',' + fresh + tail)``, decoding ``joined`` only in part.

        ``joined`` and ``fresh`` are comma-joined JSON objects (``joined`` may be empty); ``tail``
        starts with ``]`` and closes the context object.
        """
        context: dict[str, Any] = json.loads('{"history":[' + tail)
        history = self._history(key, joined)
        context["history"] = history + json.loads("[" + fresh + "]") if fresh else list(history)
        return context

    def forget(self, key: str) -> None:
        """Drop an instance's entry (it ended, or its history was rewritten)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._count -= len(entry[1])

    def _history(self, key: str, joined: str) -> list[dict[str, Any]]:
        entry = self._entries.pop(key, None)
        events: list[dict[str, Any]] | None = None
        if entry is not None:
            self._count -= len(entry[1])
            text, cached = entry
            if joined is text or joined == text:
                events = cached
                self.hits += 1
            elif joined.startswith(text) and joined[len(text) : len(text) + 1] == ",":
                # ``text`` ends where an event ends, so decoding the rest continues the same sequence.
                cached.extend(json.loads("[" + joined[len(text) + 1 :] + "]"))
                events = cached
                self.hits += 1
        if events is None:
            events = json.loads("[" + joined + "]") if joined else []
        if len(events) >= self._min:
            self._entries[key] = (joined, events)
            self._count += len(events)
            while self._count > self._max and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._count -= len(dropped)
        return events
