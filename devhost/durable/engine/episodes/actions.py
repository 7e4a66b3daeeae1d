"""Orchestrator actions: check replayed ones, schedule new ones with one handler per action type."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from devhost.durable import history as h
from devhost.durable.actions import ActionType, first_mismatch
from devhost.durable.engine.core import FunctionTable, log
from devhost.durable.engine.entities import entity_request
from devhost.durable.engine.episodes.retries import add_retry_root
from devhost.durable.engine.state import (
    Decisions,
    Instance,
    Message,
    ParentRef,
    Work,
    split_entity_id,
    validate_instance_id,
)
from devhost.durable.store import Store
from devhost.durable.timeutil import (
    epoch_to_history,
    parse_history_time,
)
from devhost.functions.model import InvalidRequest, LoadedApp


class HandlersSite(Protocol):
    """What scheduling actions needs of the engine core (``EngineCore``)."""

    app: LoadedApp
    functions: FunctionTable
    max_actions: int

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def track(self, inst: Instance) -> None:
        """Hold ``inst`` as a live (non-terminal) instance."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""


class EntitySender(Protocol):
    """Who takes operations for entities (``Entities``)."""

    def send_op(self, entity_id: str, request: dict[str, Any]) -> None:
        """Persist an operation for an entity (inside the caller's transaction); it runs after the commit."""


class WorkSink(Protocol):
    """Who runs work items once their creation commits (``ActivityRunner``)."""

    def enqueue(self, work: Work) -> None:
        """Queue a work item of a live execution: for a local worker, or a gRPC worker for a remote instance."""


class TimerArming(Protocol):
    """Who arms durable timers once their creation commits (``DurableTimers``)."""

    def arm(self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str) -> None:
        """Arm the timer ``seq`` of ``inst`` (store row ``timer_id``) to fire at ``fire_at`` (epoch seconds)."""


class ActionHandlers:
    """Orchestrator actions: check replayed ones, schedule new ones with one handler per action type."""

    def __init__(self, site: HandlersSite, entities: EntitySender, work: WorkSink, timers: TimerArming) -> None:
        self._site = site
        self._entities = entities
        self._work = work
        self._timers = timers

    def map_actions(
        self,
        inst: Instance,
        flat: list[dict[str, Any]],
        d: Decisions,
        ts: str,
        *,
        check_missing: bool,
        new_only: bool = False,
    ) -> str | None:
        """Flatten-and-diff (ARCHITECTURE.md): check replayed actions, schedule new ones; returns a failure message.

        ``new_only``: ``flat`` holds only the new actions, each with its ``id`` (a gRPC worker's response: the
        worker checks its replay itself and numbers its own tasks, so its ids become the sequence ids).
        """
        mapped = inst.mapped
        n_old = len(mapped)
        if len(flat) + (n_old if new_only else 0) > self._site.max_actions:
            return (
                f"Maximum amount of orchestration actions ({self._site.max_actions}) has been reached. "
                "This value can be configured in host.json file as MaxOrchestrationActions."
            )
        fresh = flat
        if not new_only:
            mismatch = first_mismatch(mapped, flat, check_missing=check_missing)
            if mismatch is not None:
                return mismatch
            for action, (t, _name, seq) in zip(flat, mapped, strict=False):
                # A replayed action changes only by a cancelled timer: never fire it.
                if t == ActionType.CREATE_TIMER and action.get("isCanceled") and inst.open.get(seq) == "t":
                    del inst.open[seq]
                    d.cancels.append(seq)
            fresh = flat[n_old:]
        for action in fresh:
            if new_only:
                inst.next_seq = int(action["id"])
            t = action.get("actionType")
            handler = self._ACTION_HANDLERS.get(t) if isinstance(t, int) else None
            if handler is None:
                return f"Unsupported orchestrator action: {h.dumps(action)[:200]}"
            problem = handler(self, inst, action, d, ts)
            if problem is not None:
                return problem
        return None

    def _new_activity(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        t = action["actionType"]
        name = action.get("functionName") or ""
        if (
            not inst.remote and name.lower() not in self._site.functions.activities
        ):  # a remote worker fails unknown names itself
            return self._site.functions.unknown(name, "activity")
        seq = inst.next_seq
        inst.next_seq += 1
        input_text = action.get("input")
        d.events.append(h.event(h.TASK_SCHEDULED, ts, seq, Name=name, Version="", Input=input_text))
        d.work.append((seq, name, input_text))
        inst.open[seq] = "a"
        if t == ActionType.CALL_ACTIVITY_WITH_RETRY:
            add_retry_root(inst, seq, "a", name, input_text, action, None, None)
        inst.mapped.append([t, name, seq])
        return None

    def _new_sub_orchestration(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        t = action["actionType"]
        name = action.get("functionName") or ""
        if not inst.remote and name.lower() not in self._site.functions.orchestrators:
            return self._site.functions.unknown(name, "orchestrator")
        seq = inst.next_seq
        inst.next_seq += 1
        explicit_id = action.get("instanceId")
        child_id = explicit_id or f"{inst.execution_id}:{seq}"
        problem = self._child_id_problem(inst, child_id)
        if problem:
            return problem
        version = action.get("version") or self._site.app.host.default_version
        input_text = action.get("input")
        d.events.append(
            h.event(
                h.SUB_ORCHESTRATION_CREATED,
                ts,
                seq,
                Name=name,
                InstanceId=child_id,
                Input=input_text,
                Version=version or "",
            )
        )
        d.children.append((seq, name, child_id, input_text, version))
        inst.open[seq] = "o"
        if t == ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY:
            add_retry_root(inst, seq, "o", name, input_text, action, explicit_id, version)
        inst.mapped.append([t, name, seq])
        return None

    def _new_timer(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        seq = inst.next_seq
        inst.next_seq += 1
        fire_text = action.get("fireAt") or ts
        d.events.append(h.event(h.TIMER_CREATED, ts, seq, FireAt=fire_text))
        inst.mapped.append([ActionType.CREATE_TIMER, None, seq])
        if not action.get("isCanceled"):
            inst.open[seq] = "t"
            d.timers.append((seq, parse_history_time(fire_text), fire_text))
        return None

    def _new_wait(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        # Takes no sequence number: the wait is keyed by the event's name.
        inst.mapped.append([ActionType.WAIT_FOR_EXTERNAL_EVENT, action.get("externalEventName"), None])
        return None

    def _new_continue_as_new(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        inst.next_seq += 1
        inst.mapped.append([ActionType.CONTINUE_AS_NEW, None, None])
        return None

    def _new_entity_call(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        """call_entity / signal_entity: an EventSent in history and a request for the entity, one sequence id."""
        t = action["actionType"]
        entity_id = str(action.get("instanceId") or "")
        try:
            name, _key = split_entity_id(entity_id)
        except InvalidRequest as exc:
            return str(exc)
        if not inst.remote and name not in self._site.functions.entities:
            return self._site.functions.unknown(name, "entity")
        seq = inst.next_seq
        inst.next_seq += 1
        # The SDK's input is JSON text; the extension sends it on as a JSON string (the entity decodes twice).
        # A gRPC worker's input goes on as it is, under the worker's request id.
        input_text = action.get("input")
        if input_text is not None and not inst.remote:
            input_text = h.dumps(input_text)
        request = entity_request(
            str(action.get("operation") or ""),
            input_text,
            signal=t == ActionType.SIGNAL_ENTITY,
            ts=ts,
            parent=inst.id,
        )
        if action.get("requestId"):
            request["id"] = str(action["requestId"])
        if action.get("notBefore"):
            request["notBefore"] = float(action["notBefore"])  # a gRPC worker's scheduled signal
        request["parentExecution"] = inst.execution_id
        d.events.append(h.event(h.EVENT_SENT, ts, seq, InstanceId=entity_id, Name="op", Input=h.dumps(request)))
        d.entity_ops.append((entity_id, request))
        inst.mapped.append([t, entity_id, seq])
        return None

    def _new_http_call(self, inst: Instance, action: dict[str, Any], d: Decisions, ts: str) -> str | None:
        return "call_http (CallHttp actions) is not supported by the devhost; call HTTP from an activity."

    _ACTION_HANDLERS: ClassVar[
        dict[int, Callable[[ActionHandlers, Instance, dict[str, Any], Decisions, str], str | None]]
    ] = {
        ActionType.CALL_ACTIVITY: _new_activity,
        ActionType.CALL_ACTIVITY_WITH_RETRY: _new_activity,
        ActionType.CALL_SUB_ORCHESTRATOR: _new_sub_orchestration,
        ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY: _new_sub_orchestration,
        ActionType.CREATE_TIMER: _new_timer,
        ActionType.WAIT_FOR_EXTERNAL_EVENT: _new_wait,
        ActionType.CONTINUE_AS_NEW: _new_continue_as_new,
        ActionType.CALL_ENTITY: _new_entity_call,
        ActionType.SIGNAL_ENTITY: _new_entity_call,
        ActionType.CALL_HTTP: _new_http_call,
    }

    def _child_id_problem(self, inst: Instance, child_id: str) -> str | None:
        if child_id == inst.id or (inst.parent is not None and child_id == inst.parent.instance_id):
            return f"A sub-orchestration cannot use the instance ID '{child_id}' of its parent or of itself."
        try:
            validate_instance_id(child_id)
        except InvalidRequest as exc:
            return str(exc)
        return None

    def persist_decisions(self, inst: Instance, d: Decisions) -> None:
        """Write the episode's work items, timers, cancellations and children; dispatch after commit."""
        store = self._site.store
        execution_id = inst.execution_id
        for seq in d.cancels:
            store.delete_timer_seq(inst.id, execution_id, seq)
            handle = inst.timer_handles.pop(seq, None)
            if handle is not None:
                handle.cancel()
        for seq, name, input_text in d.work:
            work_id = store.insert_activity(inst.id, execution_id, seq, name, input_text)
            self._site.defer(
                functools.partial(self._work.enqueue, Work(work_id, inst.id, execution_id, seq, name, input_text))
            )
        for seq, fire_at, fire_text in d.timers:
            timer_id = store.insert_timer(inst.id, execution_id, seq, fire_at, fire_text)
            self._site.defer(functools.partial(self._timers.arm, inst, execution_id, seq, timer_id, fire_at, fire_text))
        for seq, name, child_id, input_text, version in d.children:
            self._create_child(inst, seq, name, child_id, input_text, version)
        for entity_id, request in d.entity_ops:
            self._entities.send_op(entity_id, request)

    def _create_child(
        self, parent: Instance, seq: int, name: str, child_id: str, input_text: str | None, version: str | None
    ) -> None:
        ts = epoch_to_history(time.time())
        if child_id in self._site.instances:
            ev = h.event(
                h.SUB_ORCHESTRATION_FAILED,
                ts,
                TaskScheduledId=seq,
                Reason=f"An orchestration with instance ID '{child_id}' already exists and is still running.",
                Details="",
            )
            inbox_id = self._site.store.insert_inbox(parent.id, parent.execution_id, h.render(ev))
            parent.inbox.append(Message(ev, parent.execution_id, inbox_id=inbox_id))
            return
        if self._site.store.get_instance(child_id) is not None:
            self._site.store.delete_instance(child_id)  # a terminal instance with this id is replaced
        now = time.time()
        # The JSON protocol's action input is sent on as a JSON string; a gRPC worker's is the input itself.
        child_input = input_text if parent.remote else h.dumps(input_text)
        child = Instance(child_id, name, version, child_input, now)
        child.parent = ParentRef(parent.id, parent.execution_id, seq, parent.name)
        child.remote = parent.remote
        self._site.store.insert_instance(child.row())
        self._site.track(child)
        log.info("%s: sub-orchestration '%s' scheduled by %s.", child_id, name, parent.id)
        self._site.schedule(child)
