"""Daemon threads for sync functions (the engine runs sync activities on them): a hung one never blocks exit."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class DaemonThreadPool:
    """Threads for sync activities; daemon threads so a hung activity never blocks process exit.

    A new thread starts whenever no thread is idle (the engine bounds concurrent activities, so
    this only grows past that bound when timed-out activities keep threads busy).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]] | None]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn`` on a pool thread; the returned future resolves on ``loop``."""
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle == 0:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        self._queue.put((loop, future, fn))
        return future

    def shutdown(self) -> None:
        """Ask idle threads to exit (busy ones exit after their current call)."""
        with self._lock:
            count = self._threads
        for _ in range(count):
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                with self._lock:
                    self._threads -= 1
                return
            loop, future, fn = item
            callback: Callable[[asyncio.Future[Any], Any], None]
            try:
                value: Any = fn()
                callback = _resolve_result
            except BaseException as exc:  # delivered to the awaiting coroutine
                value, callback = exc, _resolve_exception
            try:
                loop.call_soon_threadsafe(callback, future, value)
            except RuntimeError:
                pass  # the loop is closed: the engine has stopped
            with self._lock:
                self._idle += 1


def _resolve_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _resolve_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
