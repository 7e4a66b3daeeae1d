"""Activity workers: run scheduled activities and deliver their results as messages."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.core import FunctionTable
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
    """What running activities needs of the engine core (``EngineCore``)."""

    app: LoadedApp
    timeout: float | None
    functions: FunctionTable

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    @property
    def fault(self) -> str | None:
        """Why the durable store cannot write right now, or None when it works."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the engine runs on (None before start)."""

    def deliver(self, instance_id: str, message: Message) -> None:
        """Hand a message to a live instance's current execution (dropped otherwise) and schedule it."""


class RemoteActivities(Protocol):
    """Where the activities of remote instances go: the gRPC sidecar's workers (``ExternalWorkers``)."""

    def offer_activity(self, work: Work) -> None:
        """Queue an activity for the next worker."""


class ActivityRunner:
    """Activity workers: run scheduled activities and deliver their results as messages.

    It owns the queue of work items, the thread pool of sync activities and its counters; the engine starts
    ``worker()`` tasks on its loop.
    """

    def __init__(self, site: ActivitySite, remote: RemoteActivities) -> None:
        self._site = site
        self._remote = remote
        self._queue: asyncio.Queue[Work | None] | None = None
        self._pool: DaemonThreadPool | None = None
        self.active = 0
        self.activities_run = 0
        # The durableClient binding JSON for functions that have one (an activity may raise events, start
        # orchestrations...): the host attaches it once its HTTP API is up.
        self.client_binding: Callable[[], str] | None = None

    def attach_client(self, binding: Callable[[], str]) -> None:
        """Where activities with a durableClient binding get its JSON (the host's Durable HTTP API)."""
        self.client_binding = binding

    def open(self) -> None:
        """Make the queue and the thread pool (at engine start, on its loop)."""
        self._queue = asyncio.Queue()
        self._pool = DaemonThreadPool("devhost-activity")

    def close(self) -> None:
        """Shut the thread pool down (at engine stop, after the workers ended)."""
        if self._pool is not None:
            self._pool.shutdown()

    def enqueue(self, work: Work) -> None:
        """Queue a work item of a live execution: for a local worker, or a gRPC worker for a remote instance."""
        inst = self._site.instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or self._queue is None:
            return
        if inst.remote:
            self._remote.offer_activity(work)
            return
        self._queue.put_nowait(work)

    def drop_queued(self) -> None:
        """Forget queued (not started) work: it stays in the store and is queued again by a reload."""
        queue = self._queue
        while queue is not None and not queue.empty():
            queue.get_nowait()

    def stop_workers(self, count: int) -> None:
        """Drop queued work and tell ``count`` workers to end once they finish what they run."""
        assert self._queue is not None
        self.drop_queued()
        for _ in range(count):
            self._queue.put_nowait(None)

    def idle(self) -> bool:
        """No activity runs or waits in the queue."""
        return self.active == 0 and (self._queue is None or self._queue.empty())

    async def worker(self) -> None:
        """One activity worker: run work items from the queue until it hands out None."""
        queue = self._queue
        assert queue is not None
        while True:
            work = await queue.get()
            if work is None:
                return
            self.active += 1
            try:
                await self._run_activity(work)
            finally:
                self.active -= 1

    async def _run_activity(self, work: Work) -> None:
        if self._site.fault is not None:
            return  # still in the store: the reload after the fault queues it again
        inst = self._site.instances.get(work.instance_id)
        if inst is None or inst.execution_id != work.execution_id or inst.open.get(work.seq) != "a":
            return
        fn = self._site.functions.activities.get(work.name.lower())
        if fn is None:
            ev = h.event(
                h.TASK_FAILED,
                epoch_to_history(time.time()),
                TaskScheduledId=work.seq,
                Reason=self._site.functions.unknown(work.name, "activity"),
                Details="",
            )
            self._site.deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
            return
        from azure.functions import meta  # noqa: PLC0415 - keeps module import light
        from azure.functions.durable_functions import ActivityTriggerConverter  # noqa: PLC0415

        invocation_id = ids.invocation_id()
        self.activities_run += 1
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        try:
            value = ActivityTriggerConverter.decode(
                meta.Datum(work.input_text if work.input_text is not None else "null", "json"), trigger_metadata=None
            )
            kwargs: dict[str, Any] = {str(fn.trigger.get("name")): value}
            if fn.client_binding:
                if self.client_binding is None:
                    raise RuntimeError(f"no durable client for {fn.name}: this engine runs without the HTTP API")
                kwargs[fn.client_binding] = self.client_binding()
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
            timeout = self._site.timeout
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
                self._site.deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))
                raise
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            outcome,
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        self._site.deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))

    async def _call_activity(self, fn: FunctionInfo, kwargs: dict[str, Any], invocation_id: str) -> Any:
        timeout = self._site.timeout
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
        loop = self._site.loop
        assert loop is not None and self._pool is not None
        future = self._pool.submit(loop, functools.partial(ctx.run, fn.user_function, **kwargs))
        if timeout is None:
            return await future
        return await asyncio.wait_for(future, timeout)
