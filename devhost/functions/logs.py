"""Invocation-scoped logging: every log record carries the function name and invocation id.

``invocation_scope(name, id)`` sets a context variable for the duration of one function call; a
log-record factory (installed once by ``install_log_context``) copies it onto each record as
``record.function_name`` and ``record.invocation_id`` (empty strings outside an invocation), so
handlers can print or filter by invocation. Thread-pool calls must run inside
``contextvars.copy_context().run`` to carry the scope across threads.

The host's own hot-path lines are made cheaper (``host_logger``, ``HostLogFormatter``,
``HostLogHandler`` with ``held_output``) without changing any record attribute or printed text.
"""

from __future__ import annotations

import contextvars
import io
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# (function name, invocation id) of the invocation running in this context.
current_invocation: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "devhost_invocation", default=None
)
_install_lock = threading.Lock()
_installed = False


def install_log_context() -> None:
    """Install the record factory that stamps records with the current invocation (idempotent)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()
        get = current_invocation.get

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            scope = get()
            if scope is None:
                record.function_name = ""
                record.invocation_id = ""
            else:
                record.function_name, record.invocation_id = scope
            return record

        logging.setLogRecordFactory(factory)
        _installed = True


@contextmanager
def invocation_scope(function_name: str, invocation_id: str) -> Iterator[None]:
    """Mark the code inside as running in one function invocation (for log records)."""
    token = current_invocation.set((function_name, invocation_id))
    try:
        yield
    finally:
        current_invocation.reset(token)


# -- the app's traceback -------------------------------------------------------------------------

# The devhost package (this module is in devhost/functions/): its frames are the host's, not the app's.
_DEVHOST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.join(sysconfig.get_paths()["stdlib"], "")


def _host_frame(filename: str) -> bool:
    """A frame of devhost itself or of the stdlib machinery it calls the app through (threads, asyncio)."""
    path = os.path.abspath(filename)
    return path.startswith(_DEVHOST_DIR) or (path.startswith(_STDLIB_DIR) and "site-packages" not in path)


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    start = 0
    while start < len(frames) and _host_frame(frames[start].filename):
        start += 1
    if start < len(frames):  # an exception raised by devhost itself keeps its frames
        te.stack = traceback.StackSummary.from_list(frames[start:])
    for linked in (te.__cause__, te.__context__):
        if linked is not None:
            _trim(linked, seen)


def app_traceback(exc: BaseException) -> str:
    """The traceback of an exception from app code, chained causes included, without devhost's own frames.

    What the Python worker reports as the stack (``traceback.format_exception`` of the whole chain); the
    frames through which devhost called the function are dropped, as the worker's caller is not the app's.
    """
    te = traceback.TracebackException.from_exception(exc)
    _trim(te, set())
    return "".join(te.format())


# -- cheaper host log lines -----------------------------------------------------------------------
# The devhost writes several lines per orchestration step; these pieces make each one cheaper
# without changing the records handlers see or the text printed.

_LOGGING_SRC = logging.Logger.findCaller.__code__.co_filename


class _HostLogger(logging.Logger):
    """A Logger whose ``findCaller`` compares code filenames directly instead of normalising each frame."""

    def findCaller(self, stack_info: bool = False, stacklevel: int = 1) -> tuple[str, int, str, str | None]:
        """Same result as ``logging.Logger.findCaller`` (first frame outside logging, after ``stacklevel``)."""
        f: FrameType | None = sys._getframe(0)
        while stacklevel > 0 and f is not None:
            next_f = f.f_back
            if next_f is None:
                break
            f = next_f
            filename = f.f_code.co_filename
            if not (filename == _LOGGING_SRC or ("importlib" in filename and "_bootstrap" in filename)):
                stacklevel -= 1
        if f is None:  # pragma: no cover - CPython always has frames
            return "(unknown file)", 0, "(unknown function)", None
        code = f.f_code
        sinfo = None
        if stack_info:
            with io.StringIO() as sio:
                sio.write("Stack (most recent call last):\n")
                traceback.print_stack(f, file=sio)
                sinfo = sio.getvalue()
                if sinfo[-1] == "\n":
                    sinfo = sinfo[:-1]
        return code.co_filename, f.f_lineno, code.co_name, sinfo


def host_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` for the devhost's own hot-path loggers (cheaper caller lookup)."""
    logger = logging.getLogger(name)
    if type(logger) is logging.Logger:
        logger.__class__ = _HostLogger
    return logger


class HostLogFormatter(logging.Formatter):
    """A Formatter that formats the seconds part of ``asctime`` once per second (same text)."""

    def __init__(self, fmt: str | None = None, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """``logging.Formatter.formatTime`` with the per-second text memoised."""
        if datefmt or record.created < 0 or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached = self._second
        if cached[0] != second:
            cached = (second, time.strftime(self.default_time_format, time.localtime(record.created)))
            self._second = cached
        return self.default_msec_format % (cached[1], record.msecs) if self.default_msec_format else cached[1]


_holding: weakref.WeakSet[HostLogHandler] = weakref.WeakSet()


class HostLogHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in stubs
    """A StreamHandler that can hold lines during a synchronous stretch of work and write them at once.

    Outside ``held_output()`` it writes and flushes each line as ``StreamHandler`` does. Inside, lines
    (from any thread) are collected and written in one call when the stretch ends, before control
    goes back to the event loop, so nothing the loop sends afterwards can overtake them.
    """

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._held: list[str] | None = None
        self._depth = 0
        _holding.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        """Write (or hold) one formatted record."""
        try:
            line = self.format(record) + self.terminator
            held = self._held
            if held is not None:  # Handler.handle holds self.lock here
                held.append(line)
                return
            self.stream.write(line)
            self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def hold_lines(self) -> None:
        """Start (or nest) holding lines."""
        with self.lock:  # type: ignore[union-attr]
            self._depth += 1
            if self._held is None:
                self._held = []

    def release_lines(self) -> None:
        """End one level of holding; the outermost writes the held lines in one call."""
        with self.lock:  # type: ignore[union-attr]
            self._depth -= 1
            if self._depth > 0 or self._held is None:
                return
            text = "".join(self._held)
            self._held = None
            if not text:
                return
            try:
                self.stream.write(text)
                self.flush()
            except Exception:  # noqa: BLE001 - a broken stream must not break the engine
                self.handleError(logging.makeLogRecord({"msg": "held log output could not be written"}))


@contextmanager
def held_output() -> Iterator[None]:
    """Hold the lines of every ``HostLogHandler`` for the duration of a synchronous block."""
    handlers = list(_holding)
    for handler in handlers:
        handler.hold_lines()
    try:
        yield
    finally:
        for handler in handlers:
            handler.release_lines()
