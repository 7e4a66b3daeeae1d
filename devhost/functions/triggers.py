"""What the background triggers (timers, queues, blobs) share: the host they call, one logged invocation, and
their loops (started together, slept with a stop event, stopped with a grace period, polled with a back-off).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Protocol

from devhost.functions.invocation import InvocationContext
from devhost.functions.model import FunctionInfo, LoadedApp
from devhost.storage.bindings import run_bound
from devhost.storage.connections import MIN_POLL_S

# A poller that found nothing waits this long first, doubling up to its maximum (the host's polling).


class Host(Protocol):
    """What the trigger runners need from ``devhost.functions.http.server.DevHost``."""

    app: LoadedApp
    public_origin: str

    def build_kwargs(
        self, fn: FunctionInfo, trigger_value: Any, *, origin: str, context: InvocationContext
    ) -> dict[str, Any]:
        """Keyword arguments for one invocation."""

    async def call_function(self, fn: FunctionInfo, kwargs: dict[str, Any]) -> Any:
        """Run the function (async on the loop, sync in the pool, with the function timeout)."""


class TriggerLoops:
    """The background loops of one trigger family: one task per function, all stopped together."""

    def __init__(self, host: Host, log: logging.Logger) -> None:
        self.host = host
        self.log = log
        self.stopping = asyncio.Event()
        # Completed runs per function (for tests and the log).
        self.runs: dict[str, int] = {}
        self._tasks: list[asyncio.Task[object]] = []

    def spawn(self, loop: Coroutine[Any, Any, object], name: str) -> asyncio.Task[object]:
        """Run ``loop`` as a task on the running event loop until it returns or is stopped."""
        task = asyncio.create_task(loop, name=name)
        self._tasks.append(task)
        return task

    async def stop(self, grace_s: float = 0.0) -> None:
        """Signal ``stopping``, let runs in progress finish for up to ``grace_s`` seconds, then cancel them."""
        self.stopping.set()
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        if grace_s > 0:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
        else:
            pending = set(tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early when stopping; whether the loops are stopping."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), seconds)
        else:
            await asyncio.sleep(0)  # still let other tasks run between back-to-back occurrences
        return self.stopping.is_set()

    async def poll(self, step: Callable[[], Awaitable[bool]], max_s: float, name: str) -> None:
        """Call ``step`` until stopping; back off from 100 ms to ``max_s`` while it finds nothing or fails."""
        delay = MIN_POLL_S
        while not self.stopping.is_set():
            try:
                found = await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage unreachable for a moment: log once per failure, keep polling
                self.log.warning("Listener for '%s' failed (%s: %s); retrying", name, type(exc).__name__, exc)
                found = False
            delay = MIN_POLL_S if found else min(max_s, delay * 2)
            if not found:
                await self.pause(delay)

    async def invoke(
        self, fn: FunctionInfo, value: Any, reason: str, metadata: Mapping[str, Any] | None = None
    ) -> bool:
        """Run the function once with its trigger value; whether it succeeded (failures are logged, not raised).

        ``metadata`` is trigger metadata for binding expressions the value itself may not carry (a blob's path).
        Output bindings are written only when the function returned (devhost.storage.bindings).
        """
        invocation_id = str(uuid.uuid4())
        context = InvocationContext(
            invocation_id=invocation_id,
            function_name=fn.name,
            function_directory=Path(self.host.app.root),
            trace_parent=None,
            trace_state="",
        )
        kwargs = self.host.build_kwargs(fn, value, origin=self.host.public_origin, context=context)
        self.log.info("Executing 'Functions.%s' (Reason='%s', Id=%s)", fn.name, reason, invocation_id)
        started = time.monotonic()
        ok = True
        try:
            call = functools.partial(self.host.call_function, fn, kwargs)
            await run_bound(fn, kwargs, call, self.host.app.host.raw, value, metadata)
        except asyncio.CancelledError:
            raise
        except Exception:
            ok = False
            self.log.exception("Exception while executing function: Functions.%s (Id=%s)", fn.name, invocation_id)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        outcome = "Succeeded" if ok else "Failed"
        self.log.info("Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)", fn.name, outcome, invocation_id, elapsed_ms)
        self.runs[fn.name] = self.runs.get(fn.name, 0) + 1
        return ok
