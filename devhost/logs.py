"""Invocation-scoped logging: every log record carries the function name and invocation id.

``invocation_scope(name, id)`` sets a context variable for the duration of one function call; a
log-record factory (installed once by ``install_log_context``) copies it onto each record as
``record.function_name`` and ``record.invocation_id`` (empty strings outside an invocation), so
handlers can print or filter by invocation. Thread-pool calls must run inside
``contextvars.copy_context().run`` to carry the scope across threads.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
