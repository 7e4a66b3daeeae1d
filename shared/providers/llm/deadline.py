"""A call's deadline over a streamed response, held whatever the server sends.

The SDK's timeout is httpx's: a read timeout, restarted by every byte. A server that sends only SSE keep-alive
comments (llama.cpp's server sends ``: ping`` every 15 s while it reads a long prompt) never lets it fire, and
comments never reach the code that reads events, so no check between events can fire either. A watchdog timer
shuts the connection's socket down when the deadline passes: the blocked read returns at once, and the reader
reports the deadline instead of the broken connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)


class StreamDeadline:
    """Cut a streamed response's connection at ``deadline`` (a ``time.monotonic()`` value) unless it ended first."""

    def __init__(self, response: Any, deadline: float) -> None:
        """Watch ``response`` (an ``httpx.Response``, or anything with its ``extensions`` and ``close``)."""
        self.response = response
        self.deadline = deadline
        self.expired = False
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._done = False

    def __enter__(self) -> StreamDeadline:
        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._done = True
        if self._timer is not None:
            self._timer.cancel()

    @property
    def passed(self) -> bool:
        """Whether the deadline has passed (cut or not yet)."""
        return self.expired or time.monotonic() > self.deadline

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
        sock = _socket_of(self.response)
        if sock is not None:
            # shutdown, not close: it wakes a recv() blocked in another thread; the reader's close frees it.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return
        # No socket to reach (another transport): closing the response is the next best thing.
        with contextlib.suppress(Exception):
            self.response.close()


def _socket_of(response: Any) -> socket.socket | None:
    """The socket under an httpx response (httpcore names its network stream in the response's extensions)."""
    extensions = getattr(response, "extensions", None) or {}
    stream = extensions.get("network_stream")
    getter = getattr(stream, "get_extra_info", None)
    if getter is None:
        return None
    try:
        sock = getter("socket")
    except Exception:  # a transport without that info
        return None
    return sock if isinstance(sock, socket.socket) else None


class _Passed(Exception):
    """The deadline passed between two events."""


def events_within(stream: Any, deadline: float, timed_out: Callable[[], Exception]) -> Iterator[Any]:
    """The stream's events until it ends; ``timed_out()`` is raised once the deadline passes, however it ends.

    Any error of the stream after the watchdog cut it is the deadline's doing, so it is reported as that.
    """
    with StreamDeadline(getattr(stream, "response", None), deadline) as watch:
        try:
            for event in stream:
                if watch.passed:
                    raise _Passed
                yield event
        except _Passed:
            raise timed_out() from None
        except Exception as exc:
            if watch.expired:
                raise timed_out() from exc
            raise
        if watch.expired:
            raise timed_out()
