"""The Durable Task sidecar service (``TaskHubSidecarService``) over devhost's engine, on grpc.aio.

Clients start, query and manage orchestrations; workers take work items from ``GetWorkItems`` and
complete them. Every call runs on the engine's event loop, so it uses the engine directly (no lock).
Engine errors map to gRPC status codes in one place (``_guard``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
from durabletask.internal import orchestrator_service_pb2 as pb
from durabletask.internal import orchestrator_service_pb2_grpc as stubs
from google.protobuf import empty_pb2

from devhost.durable import history as h
from devhost.durable.engine import Engine, StoreUnavailable
from devhost.durable.engine.remote.orchestrations import Failure, Outcome
from devhost.durable.engine.state import split_entity_id
from devhost.durable.sidecar import convert
from devhost.durable.statuses import TERMINAL_STATES
from devhost.functions.model import EngineError, InstanceAlreadyExists, InstanceGone, InstanceNotFound, InvalidRequest

log = logging.getLogger("devhost.sidecar")

T = TypeVar("T")

# How often WaitForInstanceStart looks again (the engine has completion waiters, not start waiters).
START_POLL_S = 0.05


def _code(exc: EngineError) -> grpc.StatusCode:
    if isinstance(exc, InstanceNotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, InstanceAlreadyExists):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(exc, InvalidRequest):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, StoreUnavailable):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, InstanceGone):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.FAILED_PRECONDITION


async def _guard(context: grpc.aio.ServicerContext[Any, Any], call: Awaitable[T]) -> T:
    """Run an engine call; its errors become the matching gRPC status with the engine's message."""
    try:
        return await call
    except EngineError as exc:
        await context.abort(_code(exc), str(exc))
        raise  # abort raises; this keeps type checkers sure the function never falls through


def _statuses(values: Any) -> list[str] | None:
    names = [convert.PB_TO_STATUS[v] for v in values if v in convert.PB_TO_STATUS]
    return names or None


def _time(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=UTC)  # type: ignore[no-any-return]


class Sidecar(stubs.TaskHubSidecarServiceServicer):
    """``TaskHubSidecarService`` over one engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # --- client calls ---------------------------------------------------------------------------

    async def Hello(self, request: empty_pb2.Empty, context: Any) -> empty_pb2.Empty:  # noqa: N802
        """The worker's and client's connection check."""
        return empty_pb2.Empty()

    async def StartInstance(self, request: pb.CreateInstanceRequest, context: Any) -> pb.CreateInstanceResponse:  # noqa: N802
        """Start an orchestration that a worker of this protocol runs."""
        start_at = None
        if request.HasField("scheduledStartTimestamp"):
            start_at = request.scheduledStartTimestamp.ToNanoseconds() / 1e9
        instance_id = await _guard(
            context,
            self._engine.start_instance(
                request.name,
                request.instanceId or None,
                request.input.value if request.HasField("input") else None,
                request.version.value if request.HasField("version") else None,
                remote=True,
                start_at=start_at,
            ),
        )
        return pb.CreateInstanceResponse(instanceId=instance_id)

    def _state(self, instance_id: str, with_payloads: bool) -> pb.GetInstanceResponse:
        row = self._engine.instance_row(instance_id)
        if row is None:
            return pb.GetInstanceResponse(exists=False)
        failed = None
        if row.status == "Failed":
            ends = [e for e in self._engine.history_events(instance_id) if e.get("EventType") == h.EXECUTION_COMPLETED]
            failed = ends[-1] if ends else None
        return pb.GetInstanceResponse(
            exists=True, orchestrationState=convert.orchestration_state(row, failed, with_payloads=with_payloads)
        )

    async def GetInstance(self, request: pb.GetInstanceRequest, context: Any) -> pb.GetInstanceResponse:  # noqa: N802
        """An instance's state (orchestrations of either protocol)."""
        return self._state(request.instanceId, request.getInputsAndOutputs)

    async def WaitForInstanceStart(self, request: pb.GetInstanceRequest, context: Any) -> pb.GetInstanceResponse:  # noqa: N802
        """Wait until the instance has started (or is gone); the client's deadline bounds the wait."""
        while True:
            row = self._engine.instance_row(request.instanceId)
            if row is None or row.status not in ("Pending",):
                return self._state(request.instanceId, request.getInputsAndOutputs)
            await asyncio.sleep(START_POLL_S)

    async def WaitForInstanceCompletion(self, request: pb.GetInstanceRequest, context: Any) -> pb.GetInstanceResponse:  # noqa: N802
        """Wait until the instance is terminal; the client's deadline bounds the wait."""
        while True:
            row = self._engine.instance_row(request.instanceId)
            if row is None or row.status in TERMINAL_STATES:
                return self._state(request.instanceId, request.getInputsAndOutputs)
            await self._engine.wait_for_completion(request.instanceId, 30.0)

    async def RaiseEvent(self, request: pb.RaiseEventRequest, context: Any) -> pb.RaiseEventResponse:  # noqa: N802
        """Deliver an external event."""
        payload = request.input.value if request.HasField("input") else "null"
        await _guard(context, self._engine.raise_event(request.instanceId, request.name, payload))
        return pb.RaiseEventResponse()

    async def TerminateInstance(self, request: pb.TerminateRequest, context: Any) -> pb.TerminateResponse:  # noqa: N802
        """Terminate an instance (its output: the request's)."""
        output = request.output.value if request.HasField("output") else None
        await _guard(context, self._engine.terminate(request.instanceId, output))
        return pb.TerminateResponse()

    async def SuspendInstance(self, request: pb.SuspendRequest, context: Any) -> pb.SuspendResponse:  # noqa: N802
        """Suspend an instance."""
        reason = request.reason.value if request.HasField("reason") else None
        await _guard(context, self._engine.suspend(request.instanceId, reason))
        return pb.SuspendResponse()

    async def ResumeInstance(self, request: pb.ResumeRequest, context: Any) -> pb.ResumeResponse:  # noqa: N802
        """Resume a suspended instance."""
        reason = request.reason.value if request.HasField("reason") else None
        await _guard(context, self._engine.resume(request.instanceId, reason))
        return pb.ResumeResponse()

    async def RewindInstance(self, request: pb.RewindInstanceRequest, context: Any) -> pb.RewindInstanceResponse:  # noqa: N802
        """Re-run the failed tasks of a failed instance."""
        reason = request.reason.value if request.HasField("reason") else None
        await _guard(context, self._engine.rewind(request.instanceId, reason))
        return pb.RewindInstanceResponse()

    async def RestartInstance(self, request: pb.RestartInstanceRequest, context: Any) -> pb.RestartInstanceResponse:  # noqa: N802
        """Start an instance's orchestration again with its input."""
        new_id = await _guard(context, self._engine.restart(request.instanceId, request.restartWithNewInstanceId))
        return pb.RestartInstanceResponse(instanceId=new_id)

    async def PurgeInstances(self, request: pb.PurgeInstancesRequest, context: Any) -> pb.PurgeInstancesResponse:  # noqa: N802
        """Delete finished instances: one by id, or by created time and status."""
        if request.instanceId:
            if self._engine.instance_row(request.instanceId) is None:
                return pb.PurgeInstancesResponse(deletedInstanceCount=0)
            count = await _guard(context, self._engine.purge(request.instanceId))
        else:
            f = request.purgeInstanceFilter
            created_from = _time(f, "createdTimeFrom") or datetime(1970, 1, 1, tzinfo=UTC)
            count = await _guard(
                context, self._engine.purge_by(created_from, _time(f, "createdTimeTo"), _statuses(f.runtimeStatus))
            )
        response = pb.PurgeInstancesResponse(deletedInstanceCount=count)
        response.isComplete.value = True
        return response

    async def QueryInstances(self, request: pb.QueryInstancesRequest, context: Any) -> pb.QueryInstancesResponse:  # noqa: N802
        """Instances by created time, status and id prefix, a page at a time."""
        q = request.query
        rows, token = await _guard(
            context,
            self._engine.query_rows(
                created_from=_time(q, "createdTimeFrom"),
                created_to=_time(q, "createdTimeTo"),
                statuses=_statuses(q.runtimeStatus),
                prefix=q.instanceIdPrefix.value if q.HasField("instanceIdPrefix") else None,
                top=q.maxInstanceCount or None,
                continuation=q.continuationToken.value if q.HasField("continuationToken") else None,
            ),
        )
        response = pb.QueryInstancesResponse(
            orchestrationState=[
                convert.orchestration_state(row, None, with_payloads=q.fetchInputsAndOutputs) for row in rows
            ]
        )
        if token is not None:
            response.continuationToken.value = token
        return response

    async def StreamInstanceHistory(  # noqa: N802
        self, request: pb.StreamInstanceHistoryRequest, context: Any
    ) -> AsyncIterator[pb.HistoryChunk]:
        """An instance's history (its current execution), in one chunk."""
        if self._engine.instance_row(request.instanceId) is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"No instance with ID '{request.instanceId}' was found.")
        yield pb.HistoryChunk(events=convert.history(self._engine.history_events(request.instanceId)))

    async def ListInstanceIds(self, request: pb.ListInstanceIdsRequest, context: Any) -> pb.ListInstanceIdsResponse:  # noqa: N802
        """Ids of finished instances (by status and completed time), a page at a time."""
        statuses = _statuses(request.runtimeStatus) or sorted(TERMINAL_STATES)
        rows, token = await _guard(
            context,
            self._engine.query_rows(
                statuses=[s for s in statuses if s in TERMINAL_STATES] or sorted(TERMINAL_STATES),
                top=request.pageSize or None,
                continuation=request.lastInstanceKey.value if request.HasField("lastInstanceKey") else None,
            ),
        )
        low, high = _time(request, "completedTimeFrom"), _time(request, "completedTimeTo")
        ids = [
            row.instance_id
            for row in rows
            if (low is None or row.updated >= low.timestamp()) and (high is None or row.updated <= high.timestamp())
        ]
        response = pb.ListInstanceIdsResponse(instanceIds=ids)
        if token is not None:
            response.lastInstanceKey.value = token
        return response

    # --- worker calls ---------------------------------------------------------------------------

    async def GetWorkItems(self, request: pb.GetWorkItemsRequest, context: Any) -> AsyncIterator[pb.WorkItem]:  # noqa: N802
        """Stream work items to a worker until it disconnects; what it still holds is then offered again."""
        workers = self._engine.workers
        stream = workers.new_stream(convert.work_item_filter(request))
        log.info("A Durable Task worker connected (%d connected).", workers.connected)
        try:
            while True:
                item = workers.take(stream)
                if item is None:
                    await workers.wait(stream)
                    continue
                yield convert.work_item(item)
        finally:
            self._engine.release_worker(stream)
            log.info("A Durable Task worker disconnected (%d connected).", workers.connected)

    async def CompleteOrchestratorTask(self, request: pb.OrchestratorResponse, context: Any) -> pb.CompleteTaskResponse:  # noqa: N802
        """A worker's answer to an orchestration work item."""
        custom = request.customStatus.value if request.HasField("customStatus") else None
        try:
            actions, outcome = convert.actions(request)
        except convert.UnsupportedAction as exc:
            actions, outcome = [], Outcome("Failed", None, Failure("NotSupported", str(exc)))
        complete = self._engine.complete_remote_orchestration
        await _guard(context, _now(complete, request.completionToken, actions, outcome, custom))
        return pb.CompleteTaskResponse()

    async def CompleteActivityTask(self, request: pb.ActivityResponse, context: Any) -> pb.CompleteTaskResponse:  # noqa: N802
        """A worker's activity result or failure."""
        failure = convert.failure(request.failureDetails) if request.HasField("failureDetails") else None
        result = request.result.value if request.HasField("result") else None
        self._engine.complete_remote_activity(request.completionToken, result, failure)
        return pb.CompleteTaskResponse()

    async def CompleteEntityTask(self, request: pb.EntityBatchResult, context: Any) -> pb.CompleteTaskResponse:  # noqa: N802
        """A worker's result for an entity batch."""
        results, state, signals, starts = convert.entity_batch_result(request)
        batch_failure = convert.failure(request.failureDetails) if request.HasField("failureDetails") else None
        complete = self._engine.complete_remote_entity
        await _guard(context, _now(complete, request.completionToken, results, state, signals, batch_failure))
        # Orchestrations the batch starts: after its commit, each in a transaction of its own (not atomic with it).
        for start in starts if batch_failure is None else []:
            try:
                await self._engine.start_instance(
                    start.name,
                    start.instanceId or None,
                    start.input.value if start.HasField("input") else None,
                    start.version.value if start.HasField("version") else None,
                    remote=True,
                )
            except EngineError as exc:
                log.warning("An entity's orchestration '%s' was not started: %s", start.name, exc)
        return pb.CompleteTaskResponse()

    async def AbandonTaskEntityWorkItem(  # noqa: N802
        self, request: pb.AbandonEntityTaskRequest, context: Any
    ) -> pb.AbandonEntityTaskResponse:
        """A worker gives an entity work item back."""
        self._engine.abandon_remote(request.completionToken)
        return pb.AbandonEntityTaskResponse()

    # --- entities -------------------------------------------------------------------------------

    async def SignalEntity(self, request: pb.SignalEntityRequest, context: Any) -> pb.SignalEntityResponse:  # noqa: N802
        """Send a one-way operation to an entity."""
        not_before = request.scheduledTime.ToNanoseconds() / 1e9 if request.HasField("scheduledTime") else None
        try:
            name, key = split_entity_id(request.instanceId)
        except EngineError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        payload = request.input.value if request.HasField("input") else None
        await _guard(context, self._engine.signal_entity(name, key, request.name, payload, not_before=not_before))
        return pb.SignalEntityResponse()

    async def GetEntity(self, request: pb.GetEntityRequest, context: Any) -> pb.GetEntityResponse:  # noqa: N802
        """An entity's metadata and state."""
        found = self._engine.entity_record(request.instanceId)
        if found is None:
            return pb.GetEntityResponse(exists=False)
        meta = convert.entity_metadata(request.instanceId, found[0], found[1], with_state=request.includeState)
        return pb.GetEntityResponse(exists=True, entity=meta)

    async def QueryEntities(self, request: pb.QueryEntitiesRequest, context: Any) -> pb.QueryEntitiesResponse:  # noqa: N802
        """Existing entities by id prefix and last operation time, a page at a time."""
        q = request.query
        page = q.pageSize.value if q.HasField("pageSize") and q.pageSize.value > 0 else 100
        start = q.instanceIdStartsWith.value if q.HasField("instanceIdStartsWith") else "@"
        prefix = start if start.startswith("@") else f"@{start}"
        low, high = _time(q, "lastModifiedFrom"), _time(q, "lastModifiedTo")
        rows = self._engine.entity_records(
            prefix=prefix,
            op_from=low.timestamp() if low else None,
            op_to=high.timestamp() if high else None,
            after=q.continuationToken.value if q.HasField("continuationToken") else None,
            limit=page + 1,
        )
        response = pb.QueryEntitiesResponse(
            entities=[
                convert.entity_metadata(eid, state, last, with_state=q.includeState) for eid, state, last in rows[:page]
            ]
        )
        if len(rows) > page:
            response.continuationToken.value = rows[page - 1][0]
        return response

    async def CleanEntityStorage(  # noqa: N802
        self, request: pb.CleanEntityStorageRequest, context: Any
    ) -> pb.CleanEntityStorageResponse:
        """Release locks of orchestrations that are gone (devhost deletes an entity whose state is deleted at once)."""
        released = await _guard(context, self._engine.release_orphaned_locks()) if request.releaseOrphanedLocks else 0
        return pb.CleanEntityStorageResponse(emptyEntitiesRemoved=0, orphanedLocksReleased=released)

    async def AbandonTaskOrchestratorWorkItem(  # noqa: N802
        self, request: pb.AbandonOrchestrationTaskRequest, context: Any
    ) -> pb.AbandonOrchestrationTaskResponse:
        """A worker gives an orchestration work item back."""
        self._engine.abandon_remote(request.completionToken)
        return pb.AbandonOrchestrationTaskResponse()

    async def AbandonTaskActivityWorkItem(  # noqa: N802
        self, request: pb.AbandonActivityTaskRequest, context: Any
    ) -> pb.AbandonActivityTaskResponse:
        """A worker gives an activity work item back."""
        self._engine.abandon_remote(request.completionToken)
        return pb.AbandonActivityTaskResponse()


async def _now(fn: Callable[..., None], *args: Any) -> None:
    """A synchronous engine call as an awaitable, so ``_guard`` maps its errors too."""
    fn(*args)


class SidecarServer:
    """The gRPC server of one engine: started after the engine, stopped before it."""

    def __init__(self, engine: Engine, host: str, port: int) -> None:
        self._engine = engine
        self._address = f"{host}:{port}"
        self._server: grpc.aio.Server | None = None
        self.port = port

    async def start(self) -> int:
        """Bind and serve; returns the bound port (``port`` 0 picks a free one). Raises OSError when it cannot bind."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        stubs.add_TaskHubSidecarServiceServicer_to_server(Sidecar(self._engine), server)  # type: ignore[no-untyped-call]
        try:
            port = int(server.add_insecure_port(self._address))
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self._address}: {exc}") from exc
        if port == 0:
            raise OSError(f"cannot listen on {self._address}")
        await server.start()
        self._server, self.port = server, port
        self._engine.workers.enabled = True
        return port

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop taking calls; open worker streams end (their items are offered again after a restart)."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
            self._engine.workers.enabled = False
