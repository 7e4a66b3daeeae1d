"""The invocation context the Python worker passes to a function (``context``), whatever its trigger."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.functions._abc import RetryContext, TraceContext


class _TraceContext(TraceContext):
    """W3C trace context of one invocation."""

    def __init__(self, trace_parent: str, trace_state: str) -> None:
        self._parent = trace_parent
        self._state = trace_state

    @property
    def trace_parent(self) -> str:
        """The ``traceparent`` header value."""
        return self._parent

    @property
    def trace_state(self) -> str:
        """The ``tracestate`` header value."""
        return self._state

    @property
    def attributes(self) -> dict[str, str]:
        """Extra attributes (none locally)."""
        return {}


class _RetryContext(RetryContext):
    """Retry information; the devhost does not retry HTTP invocations."""

    @property
    def retry_count(self) -> int:
        """Current retry count (always 0)."""
        return 0

    @property
    def max_retry_count(self) -> int:
        """Maximum retry count (always 0)."""
        return 0

    @property
    def exception(self) -> Any:
        """The exception of the previous attempt (none)."""
        return None


class InvocationContext(func.Context):
    """The ``context`` argument the worker passes to a function that declares one."""

    _tls = threading.local()

    def __init__(
        self,
        *,
        invocation_id: str,
        function_name: str,
        function_directory: str | Path,
        trace_parent: str | None = None,
        trace_state: str = "",
    ) -> None:
        self._invocation_id = invocation_id
        self._function_name = function_name
        self._function_directory = os.fspath(function_directory)
        self._trace = _TraceContext(trace_parent or new_trace_parent(), trace_state)
        self._retry = _RetryContext()

    @property
    def invocation_id(self) -> str:
        """Unique id of this invocation."""
        return self._invocation_id

    @property
    def function_name(self) -> str:
        """The function's name."""
        return self._function_name

    @property
    def function_directory(self) -> str:
        """The app root (where function_app.py lives), as the v2 worker reports it."""
        return self._function_directory

    @property
    def trace_context(self) -> TraceContext:
        """W3C trace context."""
        return self._trace

    @property
    def retry_context(self) -> RetryContext:
        """Retry context."""
        return self._retry

    @property
    def thread_local_storage(self) -> Any:
        """Thread-local storage shared by invocations, like the worker's."""
        return self._tls


def new_trace_parent() -> str:
    """A fresh W3C ``traceparent`` value."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
