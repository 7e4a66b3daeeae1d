"""Between the engine's shapes and the sidecar protocol's protobuf messages, in one place.

History: the engine stores DTFx JSON events (devhost.durable.history); a worker gets ``HistoryEvent`` messages.
Actions: a worker answers with ``OrchestratorAction`` messages; the engine's handlers take the JSON
protocol's action objects (devhost.durable.actions), plus the worker's ``id`` as the sequence id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from durabletask.internal import orchestrator_service_pb2 as pb
from google.protobuf import timestamp_pb2, wrappers_pb2

from devhost.durable import history as h
from devhost.durable.actions import ActionType
from devhost.durable.engine.remote.orchestrations import Failure, Outcome
from devhost.durable.engine.remote.workers import Accepts, EntityFlight, Flight, Item, token_of
from devhost.durable.engine.state import Work, split_entity_id
from devhost.durable.store_schema import InstanceRow
from devhost.durable.timeutil import epoch_to_history, parse_history_time

# Runtime status names (devhost.durable.statuses) and the protocol's enum, both ways.
STATUS_TO_PB = {name: value for name, value in h.ORCHESTRATION_STATUS.items()}
PB_TO_STATUS = {value: name for name, value in STATUS_TO_PB.items()}


class UnsupportedAction(Exception):
    """A worker's action devhost does not run (yet); the episode fails with this message."""


def _text(value: str | None) -> wrappers_pb2.StringValue | None:
    return wrappers_pb2.StringValue(value=value) if value is not None else None


def _opt(message: Any, field: str) -> str | None:
    return getattr(message, field).value if message.HasField(field) else None


def timestamp(epoch: float) -> timestamp_pb2.Timestamp:
    """A protobuf timestamp of epoch seconds."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(round(epoch * 1_000_000)) * 1000)
    return ts


def _history_ts(text: str | None) -> timestamp_pb2.Timestamp:
    return timestamp(parse_history_time(text)) if text else timestamp_pb2.Timestamp()


def _failure_pb(ev: dict[str, Any], default_type: str) -> pb.TaskFailureDetails:
    details = ev.get("FailureDetails")
    if isinstance(details, dict):
        return pb.TaskFailureDetails(
            errorType=str(details.get("ErrorType") or default_type),
            errorMessage=str(details.get("ErrorMessage") or ""),
            stackTrace=_text(details.get("StackTrace")),
        )
    return pb.TaskFailureDetails(
        errorType=default_type, errorMessage=str(ev.get("Reason") or ""), stackTrace=_text(ev.get("Details") or None)
    )


def _instance(instance_id: str, execution_id: str | None) -> pb.OrchestrationInstance:
    return pb.OrchestrationInstance(instanceId=instance_id, executionId=_text(execution_id))


def history_event(ev: dict[str, Any]) -> pb.HistoryEvent | None:
    """One stored JSON event as a protocol event; None for an event a worker never needs."""
    et = ev.get("EventType")
    out = pb.HistoryEvent(eventId=int(ev.get("EventId", -1)), timestamp=_history_ts(ev.get("Timestamp")))
    if et == h.EXECUTION_STARTED:
        oi = ev.get("OrchestrationInstance") or {}
        parent = ev.get("ParentInstance")
        out.executionStarted.CopyFrom(
            pb.ExecutionStartedEvent(
                name=ev.get("Name") or "",
                version=_text(ev.get("Version") or None),
                input=_text(ev.get("Input")),
                orchestrationInstance=_instance(oi.get("InstanceId", ""), oi.get("ExecutionId")),
                scheduledStartTimestamp=_history_ts(ev["ScheduledStartTime"]) if ev.get("ScheduledStartTime") else None,
                parentInstance=(
                    pb.ParentInstanceInfo(
                        taskScheduledId=int(parent.get("TaskScheduleId", -1)),
                        name=_text(parent.get("Name")),
                        orchestrationInstance=_instance(
                            parent["OrchestrationInstance"]["InstanceId"],
                            parent["OrchestrationInstance"].get("ExecutionId"),
                        ),
                    )
                    if parent
                    else None
                ),
            )
        )
    elif et == h.EXECUTION_COMPLETED:
        status = int(ev.get("OrchestrationStatus", 0))
        out.executionCompleted.CopyFrom(
            pb.ExecutionCompletedEvent(
                orchestrationStatus=status,  # type: ignore[arg-type]
                result=_text(ev.get("Result")),
                failureDetails=_failure_pb(ev, "OrchestrationFailure") if "FailureDetails" in ev else None,
            )
        )
    elif et == h.EXECUTION_TERMINATED:
        out.executionTerminated.CopyFrom(pb.ExecutionTerminatedEvent(input=_text(ev.get("Input"))))
    elif et == h.ORCHESTRATOR_STARTED:
        out.orchestratorStarted.CopyFrom(pb.OrchestratorStartedEvent())
    elif et == h.ORCHESTRATOR_COMPLETED:
        out.orchestratorCompleted.CopyFrom(pb.OrchestratorCompletedEvent())
    elif et == h.EXECUTION_SUSPENDED:
        out.executionSuspended.CopyFrom(pb.ExecutionSuspendedEvent(input=_text(ev.get("Reason"))))
    elif et == h.EXECUTION_RESUMED:
        out.executionResumed.CopyFrom(pb.ExecutionResumedEvent(input=_text(ev.get("Reason"))))
    elif not _task_event(out, ev, et):
        return None
    return out


def _task_event(out: pb.HistoryEvent, ev: dict[str, Any], et: Any) -> bool:
    """Fill ``out`` for tasks, timers, sub-orchestrations and messages; False for an event a worker never needs."""
    if et == h.TASK_SCHEDULED:
        out.taskScheduled.CopyFrom(pb.TaskScheduledEvent(name=ev.get("Name") or "", input=_text(ev.get("Input"))))
    elif et == h.TASK_COMPLETED:
        out.taskCompleted.CopyFrom(
            pb.TaskCompletedEvent(taskScheduledId=int(ev["TaskScheduledId"]), result=_text(ev.get("Result")))
        )
    elif et == h.TASK_FAILED:
        out.taskFailed.CopyFrom(
            pb.TaskFailedEvent(
                taskScheduledId=int(ev["TaskScheduledId"]), failureDetails=_failure_pb(ev, "TaskFailedException")
            )
        )
    elif et == h.SUB_ORCHESTRATION_CREATED:
        out.subOrchestrationInstanceCreated.CopyFrom(
            pb.SubOrchestrationInstanceCreatedEvent(
                instanceId=ev.get("InstanceId") or "",
                name=ev.get("Name") or "",
                version=_text(ev.get("Version") or None),
                input=_text(ev.get("Input")),
            )
        )
    elif et == h.SUB_ORCHESTRATION_COMPLETED:
        out.subOrchestrationInstanceCompleted.CopyFrom(
            pb.SubOrchestrationInstanceCompletedEvent(
                taskScheduledId=int(ev["TaskScheduledId"]), result=_text(ev.get("Result"))
            )
        )
    elif et == h.SUB_ORCHESTRATION_FAILED:
        out.subOrchestrationInstanceFailed.CopyFrom(
            pb.SubOrchestrationInstanceFailedEvent(
                taskScheduledId=int(ev["TaskScheduledId"]),
                failureDetails=_failure_pb(ev, "SubOrchestrationFailed"),
            )
        )
    elif et == h.TIMER_CREATED:
        out.timerCreated.CopyFrom(pb.TimerCreatedEvent(fireAt=_history_ts(ev.get("FireAt"))))
    elif et == h.TIMER_FIRED:
        out.timerFired.CopyFrom(pb.TimerFiredEvent(timerId=int(ev["TimerId"]), fireAt=_history_ts(ev.get("FireAt"))))
    elif et == h.EVENT_SENT and str(ev.get("InstanceId") or "").startswith("@"):
        _entity_message(out, ev)
    elif et == h.EVENT_RAISED and ev.get("EntityLockGranted"):
        out.entityLockGranted.CopyFrom(pb.EntityLockGrantedEvent(criticalSectionId=ev.get("Name") or ""))
    elif et == h.EVENT_RAISED and ev.get("EntityResponse"):
        if "FailureDetails" in ev:
            out.entityOperationFailed.CopyFrom(
                pb.EntityOperationFailedEvent(
                    requestId=ev.get("Name") or "", failureDetails=_failure_pb(ev, "EntityOperationFailed")
                )
            )
        else:
            out.entityOperationCompleted.CopyFrom(
                pb.EntityOperationCompletedEvent(requestId=ev.get("Name") or "", output=_text(ev.get("Input")))
            )
    elif et == h.EVENT_SENT:
        out.eventSent.CopyFrom(
            pb.EventSentEvent(
                instanceId=ev.get("InstanceId") or "", name=ev.get("Name") or "", input=_text(ev.get("Input"))
            )
        )
    elif et == h.EVENT_RAISED:
        out.eventRaised.CopyFrom(pb.EventRaisedEvent(name=ev.get("Name") or "", input=_text(ev.get("Input"))))
    else:
        return False
    return True


def _entity_message(out: pb.HistoryEvent, ev: dict[str, Any]) -> None:
    """An operation an orchestration sent to an entity (stored as EventSent with the request) as the worker saw it."""
    request = json.loads(ev.get("Input") or "{}")
    target = _text(str(ev.get("InstanceId")))
    if "lock" in request:
        out.entityLockRequested.CopyFrom(
            pb.EntityLockRequestedEvent(
                criticalSectionId=str(request["lock"]),
                lockSet=[str(e) for e in request.get("lockSet") or []],
                position=int(request.get("position", 0)),
                parentInstanceId=_text(request.get("parent")),
            )
        )
        return
    if "unlock" in request:
        out.entityUnlockSent.CopyFrom(
            pb.EntityUnlockSentEvent(
                criticalSectionId=str(request["unlock"]),
                parentInstanceId=_text(request.get("parent")),
                targetInstanceId=target,
            )
        )
        return
    if request.get("signal"):
        out.entityOperationSignaled.CopyFrom(
            pb.EntityOperationSignaledEvent(
                requestId=str(request.get("id") or ""),
                operation=str(request.get("op") or ""),
                input=_text(request.get("input")),
                targetInstanceId=target,
            )
        )
        return
    out.entityOperationCalled.CopyFrom(
        pb.EntityOperationCalledEvent(
            requestId=str(request.get("id") or ""),
            operation=str(request.get("op") or ""),
            input=_text(request.get("input")),
            parentInstanceId=_text(request.get("parent")),
            parentExecutionId=_text(request.get("parentExecution")),
            targetInstanceId=target,
        )
    )


def history(events: Iterable[dict[str, Any]]) -> list[pb.HistoryEvent]:
    """Protocol events of JSON events, skipping the ones a worker never needs."""
    return [e for e in (history_event(ev) for ev in events) if e is not None]


def work_item_filter(request: pb.GetWorkItemsRequest) -> Accepts:
    """Which items a worker takes, from its work item filters (names, and versions when it lists some)."""
    if not request.HasField("workItemFilters"):
        return None
    wf = request.workItemFilters
    orchestrations = {f.name: frozenset(f.versions) for f in wf.orchestrations}
    activities = {f.name: frozenset(f.versions) for f in wf.activities}
    entity_names = {f.name.lower() for f in wf.entities}

    def matches(accepted: dict[str, frozenset[str]], name: str, version: str | None) -> bool:
        versions = accepted.get(name)
        return versions is not None and (not versions or (version or "") in versions)

    def accepts(item: Item) -> bool:
        if isinstance(item, Flight):
            return matches(orchestrations, item.name, item.version)
        if isinstance(item, Work):
            return matches(activities, item.name, None)
        return split_entity_id(item.entity_id)[0] in entity_names

    return accepts


def work_item(item: Item) -> pb.WorkItem:
    """What a worker stream sends for an item the engine offered."""
    token = token_of(item)
    if isinstance(item, EntityFlight):
        return pb.WorkItem(
            completionToken=token,
            entityRequest=pb.EntityBatchRequest(
                instanceId=item.entity_id,
                entityState=_text(item.state),
                operations=[
                    pb.OperationRequest(
                        operation=str(op.request.get("op") or ""),
                        requestId=str(op.request.get("id") or ""),
                        input=_text(op.request.get("input")),
                    )
                    for op in item.batch
                ],
            ),
        )
    if isinstance(item, Flight):
        return pb.WorkItem(
            completionToken=token,
            orchestratorRequest=pb.OrchestratorRequest(
                instanceId=item.instance_id,
                executionId=_text(item.execution_id),
                pastEvents=history(json.loads(t) for t in item.past),
                newEvents=history(item.new_events),
            ),
        )
    return pb.WorkItem(
        completionToken=token,
        activityRequest=pb.ActivityRequest(
            name=item.name,
            input=_text(item.input_text),
            orchestrationInstance=_instance(item.instance_id, item.execution_id),
            taskId=item.seq,
        ),
    )


def failure(details: pb.TaskFailureDetails) -> Failure:
    """A protocol failure as the engine keeps it."""
    return Failure(details.errorType or "Exception", details.errorMessage, _opt(details, "stackTrace"))


def actions(response: pb.OrchestratorResponse) -> tuple[list[dict[str, Any]], Outcome | None]:
    """A worker's actions as the engine's action objects, and how the execution ended (None: it goes on).

    Raises UnsupportedAction for an action devhost does not run.
    """
    out: list[dict[str, Any]] = []
    outcome: Outcome | None = None
    for action in response.actions:
        kind = action.WhichOneof("orchestratorActionType")
        if kind == "scheduleTask":
            a = action.scheduleTask
            call = {"actionType": ActionType.CALL_ACTIVITY, "functionName": a.name, "input": _opt(a, "input")}
            out.append({**call, "id": action.id})
        elif kind == "createSubOrchestration":
            s = action.createSubOrchestration
            out.append(
                {
                    "actionType": ActionType.CALL_SUB_ORCHESTRATOR,
                    "functionName": s.name,
                    "instanceId": s.instanceId or None,
                    "input": _opt(s, "input"),
                    "version": _opt(s, "version"),
                    "id": action.id,
                }
            )
        elif kind == "createTimer":
            fire_at = action.createTimer.fireAt.ToNanoseconds() / 1e9
            out.append({"actionType": ActionType.CREATE_TIMER, "fireAt": epoch_to_history(fire_at), "id": action.id})
        elif kind == "sendEntityMessage" and action.sendEntityMessage.HasField("entityOperationCalled"):
            called = action.sendEntityMessage.entityOperationCalled
            out.append(_entity_action(ActionType.CALL_ENTITY, called, action.id))
        elif kind == "sendEntityMessage" and action.sendEntityMessage.HasField("entityOperationSignaled"):
            signaled = action.sendEntityMessage.entityOperationSignaled
            signal = _entity_action(ActionType.SIGNAL_ENTITY, signaled, action.id)
            if signaled.HasField("scheduledTime"):
                signal["notBefore"] = signaled.scheduledTime.ToNanoseconds() / 1e9
            out.append(signal)
        elif kind == "sendEvent":
            e = action.sendEvent
            out.append(
                {
                    "message": "event",
                    "instanceId": e.instance.instanceId,
                    "name": e.name,
                    "input": _opt(e, "data"),
                    "id": action.id,
                }
            )
        elif kind == "sendEntityMessage" and action.sendEntityMessage.HasField("entityLockRequested"):
            lock = action.sendEntityMessage.entityLockRequested
            lock_set = list(lock.lockSet)
            out.append(
                {
                    "message": "lock",
                    "instanceId": lock_set[0] if lock_set else "",
                    "criticalSectionId": lock.criticalSectionId,
                    "lockSet": lock_set,
                    "id": action.id,
                }
            )
        elif kind == "sendEntityMessage" and action.sendEntityMessage.HasField("entityUnlockSent"):
            unlock = action.sendEntityMessage.entityUnlockSent
            target = unlock.targetInstanceId.value
            out.append(
                {
                    "message": "unlock",
                    "instanceId": target,
                    "criticalSectionId": unlock.criticalSectionId,
                    "id": action.id,
                }
            )
        elif kind == "completeOrchestration":
            c = action.completeOrchestration
            status = PB_TO_STATUS.get(c.orchestrationStatus, "Completed")
            outcome = Outcome(
                status,
                _opt(c, "result"),
                failure(c.failureDetails) if c.HasField("failureDetails") else None,
            )
        else:
            raise UnsupportedAction(
                f"The orchestrator action '{kind}' is not supported by devhost's gRPC endpoint yet "
                "(see devhost/README.md, 'Durable Task gRPC')."
            )
    return out, outcome


def _entity_action(action_type: ActionType, message: Any, action_id: int) -> dict[str, Any]:
    return {
        "actionType": action_type,
        "instanceId": message.targetInstanceId.value,
        "operation": message.operation,
        "input": _opt(message, "input"),
        "requestId": message.requestId,
        "id": action_id,
    }


def entity_batch_result(
    result: pb.EntityBatchResult,
) -> tuple[
    list[tuple[str | None, Failure | None]],
    str | None,
    list[tuple[str, str, str | None, float | None]],
    list[pb.StartNewOrchestrationAction],
]:
    """A worker's entity batch result: per-operation (result, failure), new state, signals sent, orchestrations
    to start."""
    starts: list[pb.StartNewOrchestrationAction] = []
    outcomes: list[tuple[str | None, Failure | None]] = []
    for r in result.results:
        if r.HasField("failure"):
            outcomes.append((None, failure(r.failure.failureDetails)))
        else:
            outcomes.append((_opt(r.success, "result"), None))
    signals: list[tuple[str, str, str | None, float | None]] = []
    for action in result.actions:
        if action.HasField("sendSignal"):
            sig = action.sendSignal
            when = sig.scheduledTime.ToNanoseconds() / 1e9 if sig.HasField("scheduledTime") else None
            signals.append((sig.instanceId, sig.name, _opt(sig, "input"), when))
        elif action.HasField("startNewOrchestration"):
            starts.append(action.startNewOrchestration)
    return outcomes, _opt(result, "entityState"), signals, starts


def entity_metadata(entity_id: str, state: str | None, last_op: float, *, with_state: bool) -> pb.EntityMetadata:
    """An existing entity as the protocol describes it."""
    meta = pb.EntityMetadata(instanceId=entity_id, lastModifiedTime=timestamp(last_op), backlogQueueSize=0)
    if with_state and state is not None:
        meta.serializedState.value = state
    return meta


def orchestration_state(
    row: InstanceRow, failure_event: dict[str, Any] | None, *, with_payloads: bool
) -> pb.OrchestrationState:
    """The protocol's state of a stored instance (``failure_event``: its ExecutionCompleted when it failed)."""
    state = pb.OrchestrationState(
        instanceId=row.instance_id,
        name=row.name,
        version=_text(row.version),
        orchestrationStatus=STATUS_TO_PB.get(row.status, 0),  # type: ignore[arg-type]
        createdTimestamp=timestamp(row.created),
        lastUpdatedTimestamp=timestamp(row.updated),
        executionId=_text(row.execution_id),
        parentInstanceId=_text(row.parent_id),
    )
    if with_payloads:
        if row.input is not None:
            state.input.value = row.input
        if row.output is not None and row.status != "Failed":
            state.output.value = row.output
        if row.custom_status is not None:
            state.customStatus.value = row.custom_status
    if row.status in ("Completed", "Failed", "Terminated"):
        state.completedTimestamp.CopyFrom(timestamp(row.updated))
    if row.status == "Failed":
        if failure_event is not None and "FailureDetails" in failure_event:
            state.failureDetails.CopyFrom(_failure_pb(failure_event, "OrchestrationFailure"))
        else:
            message = row.output or ""
            state.failureDetails.CopyFrom(
                pb.TaskFailureDetails(errorType="OrchestrationFailure", errorMessage=str(h.parse_json_or_text(message)))
            )
    return state
