"""Activity workers: run scheduled activities and deliver their results as messages."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.state import Instance, Message, Work
from devhost.durable.timeutil import (
    epoch_to_history,
)
from devhost.functions import ids
from devhost.functions.invocation import InvocationContext
from devhost.functions.logs import app_traceback, current_invocation, host_logger
from devhost.functions.model import FunctionInfo, LoadedApp
from devhost.functions.threads import DaemonThreadPool
from devhost.storage.bindings import add_binding_arguments, run_bound

flog = host_logger("devhost.host")


class ActivitySite(Protocol):
    """What running activities needs of the engine: the app, the live instances, the loop and pool, delivery."""

    app: LoadedApp
    client_binding: Callable[[], str] | None
    activities_run: int
    _active_activities: int
    _timeout: float | None
    _fault: str | None
    _instances: dict[str, Instance]
    _activities: dict[str, FunctionInfo]
    _work_queue: asyncio.Queue[Work | None] | None
    _pool: DaemonThreadPool | None
    _loop: asyncio.AbstractEventLoop | None

    def _deliver(self, instance_id: str, message: Message) -> None: ...
    def _unknown_function_message(self, name: str, kind: str) -> str: ...


class ActivityRunner:
    """Activity workers: run scheduled activities and deliver their results as messages."""

    def __init__(self, site: ActivitySite) -> None:
        self._site = site

    async def worker(self) -> None:
        """One activity worker: run work items from the engine's queue until it hands out None."""
        queue = self._site._work_queue
        assert queue is not None
        while True:
            work = await queue.get()
            if work is None:
                return
            self._site._active_activities += 1
            try:
                await self._run_activity(work)
            finally:
                self._site._active_activities -= 1

    async def _run_activity(self, work: Work) -> None:
        if self._site._fault is not None:
            return  # still in the store: the reload after the fault queues it again
        inst = self._site._instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or inst.open.get(work.seq) != "a":
            return
        fn = self._site._activities.get(work.name.lower())
        if fn is None:
            ev = h.event(
                h.TASK_FAILED,
                epoch_to_history(time.time()),
                TaskScheduledId=work.seq,
                Reason=self._site._unknown_function_message(work.name, "activity"),
                Details="",
            )
            self._site._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
            return
        from azure.functions import meta  # noqa: PLC0415 - keeps module import light
        from azure.functions.durable_functions import ActivityTriggerConverter  # noqa: PLC0415

        invocation_id = ids.invocation_id()
        self._site.activities_run += 1
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        try:
            value = ActivityTriggerConverter.decode(
                meta.Datum(work.input_text if work.input_text is not None else "null", "json"), trigger_metadata=None
            )
            kwargs: dict[str, Any] = {str(fn.trigger.get("name")): value}
            if fn.client_binding:
                if self._site.client_binding is None:
                    raise RuntimeError(f"no durable client for {fn.name}: this engine runs without the HTTP API")
                kwargs[fn.client_binding] = self._site.client_binding()
            if fn.wants_context:
                kwargs["context"] = InvocationContext(
                    invocation_id=invocation_id, function_name=fn.name, function_directory=self._site.app.root
                )
            add_binding_arguments(fn, kwargs)  # blob, queue and table bindings of the activity
            call = functools.partial(self._call_activity, fn, kwargs, invocation_id)
            metadata = {"instanceId": work.instance_id}
            result = await run_bound(fn, kwargs, call, self._site.app.host.raw, value, metadata)
            encoded = ActivityTriggerConverter.encode(result, expected_type=None).value
            ev = h.event(h.TASK_COMPLETED, epoch_to_history(time.time()), TaskScheduledId=work.seq, Result=encoded)
            outcome = "Succeeded"
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            outcome = "Failed"
            timeout = self._site._timeout
            if isinstance(exc, TimeoutError) and timeout is not None:
                message = f"Timeout value of {timeout:g} seconds was exceeded by function: Functions.{fn.name}"
                exc_name = "FunctionTimeoutException"
                stack = f"{exc_name}: {message}"
            else:
                message, exc_name = str(exc), type(exc).__name__
                stack = app_traceback(exc)
            # The host's line: the invocation's exception, then the worker's RpcException text, whose stack
            # holds the whole chain ("The above exception was the direct cause ...").
            flog.error(
                "Exception while executing function: Functions.%s (Id=%s). Result: Failure\n"
                "Exception: %s: %s\nStack: %s",
                fn.name,
                invocation_id,
                exc_name,
                message,
                stack.rstrip("\n"),
            )
            ev = h.event(
                h.TASK_FAILED,
                epoch_to_history(time.time()),
                TaskScheduledId=work.seq,
                Reason=f"Activity function '{work.name}' failed: {exc_name}: {message}",
                Details=stack,
            )
            if not isinstance(exc, Exception):
                self._site._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
                raise
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            outcome,
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        self._site._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))

    async def _call_activity(self, fn: FunctionInfo, kwargs: dict[str, Any], invocation_id: str) -> Any:
        timeout = self._site._timeout
        if fn.is_async:
            token = current_invocation.set((fn.name, invocation_id))
            try:
                if timeout is None:
                    return await fn.user_function(**kwargs)
                async with asyncio.timeout(timeout):
                    return await fn.user_function(**kwargs)
            finally:
                current_invocation.reset(token)
        ctx = contextvars.copy_context()
        ctx.run(current_invocation.set, (fn.name, invocation_id))
        assert self._site._loop is not None and self._site._pool is not None
        future = self._site._pool.submit(self._site._loop, functools.partial(ctx.run, fn.user_function, **kwargs))
        if timeout is None:
            return await future
        return await asyncio.wait_for(future, timeout)
