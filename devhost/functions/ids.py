"""Cheap locally unique ids for invocations and executions.

``uuid.uuid4()`` reads the OS random source and builds a ``UUID`` object for every id (several µs,
several times per orchestration step). Invocation and execution ids only need to be unique, not
unpredictable, so they are derived from one random version-4 UUID per process with a counter in its
last 48 bits: every id is still a well-formed version-4 UUID (same text shape as before), ids of one
process never repeat (2**48 of them), and ids of different processes share a prefix only with the
probability of two random 74-bit values colliding. Instance ids the host picks stay ``uuid4().hex``.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator

_NODE_MASK = (1 << 48) - 1
_lock = threading.Lock()
_state: tuple[str, str, Iterator[int]] | None = None


def _init() -> tuple[str, str, Iterator[int]]:
    global _state
    with _lock:
        if _state is None:
            base = uuid.uuid4()
            text = str(base)  # 8-4-4-4-12; the counter replaces the last group
            _state = (text[:24], base.hex[:20], itertools.count(base.int & _NODE_MASK))
        return _state


def invocation_id() -> str:
    """A new GUID-formatted id (``xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx``), unique in this process."""
    dashed, _, counter = _state or _init()
    return f"{dashed}{next(counter) & _NODE_MASK:012x}"


def execution_id() -> str:
    """A new 32-hex-digit id (``uuid4().hex`` shape), unique in this process."""
    _, plain, counter = _state or _init()
    return f"{plain}{next(counter) & _NODE_MASK:012x}"
