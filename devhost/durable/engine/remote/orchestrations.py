"""Remote episodes: orchestrations and activities run by external workers (the gRPC sidecar protocol).

A remote instance's episode is not replayed here: the dispatcher hands its history and new events to a
worker (``ExternalWorkers``) and the instance waits (``Instance.flight``) until the worker answers with
its new actions. The answer is then applied as a JSON-protocol episode is: the same handlers schedule
activities, timers and sub-orchestrations, the same endings finish the execution, in one transaction
that also consumes the delivered messages. Until then the messages stay in the store, so a lost worker
or a crash loses nothing: the episode is offered again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.core import STORE_ERRORS, execution_started, log
from devhost.durable.engine.episodes.actions import EntitySender, WorkSink
from devhost.durable.engine.episodes.messages import close_delivered, consume, set_custom_status, take_batch
from devhost.durable.engine.episodes.replay import ActionMapper, Ending
from devhost.durable.engine.remote.workers import EntityFlight, Flight, Item
from devhost.durable.engine.state import Decisions, Instance, Message, Work, parse_json_text
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import Store
from devhost.durable.timeutil import epoch_to_history


@dataclass(frozen=True, slots=True)
class Failure:
    """A failure as a worker reports it."""

    error_type: str
    message: str
    stack: str | None = None

    def details(self) -> dict[str, Any]:
        """The history's ``FailureDetails`` object."""
        return {"ErrorType": self.error_type, "ErrorMessage": self.message, "StackTrace": self.stack}


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a worker says the execution ended: Completed, Failed, ContinuedAsNew or Terminated."""

    status: str
    result: str | None = None  # JSON text: the output, or the new input of continue-as-new
    failure: Failure | None = None


class RemoteSite(Protocol):
    """What remote episodes need of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def require_started(self) -> None:
        """Refuse a call on an engine that is not running."""

    def is_live(self, inst: Instance) -> bool:
        """Whether ``inst`` is still the live instance of its id."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""

    def wake_dispatcher(self) -> None:
        """Wake the dispatcher (new ready items, answers or a fault)."""

    def deliver(self, instance_id: str, message: Message) -> None:
        """Hand a message to a live instance's current execution (dropped otherwise) and schedule it."""

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        """Persist an event for ``target`` (inside the open transaction) and schedule it."""

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""

    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        """Append an episode's events (new, decisions, OrchestratorCompleted) to history."""


class Workers(Protocol):
    """The gRPC sidecar's work queues (``ExternalWorkers``)."""

    def new_token(self, instance_id: str) -> str:
        """A fresh token for an orchestration episode or entity batch."""

    def offer_orchestration(self, flight: Flight) -> None:
        """Queue an episode for the next worker."""

    def claim(self, token: str) -> Item | None:
        """The held item a completion names, no longer held; None for an unknown or already used token."""

    def release(self, stream: int) -> list[Item]:
        """What a closed stream still held (so the engine can offer it again)."""


class EntityFlights(Protocol):
    """Who takes back an entity batch a worker gave up (``RemoteEntities``)."""

    def offer_again(self, flight: EntityFlight) -> None:
        """A worker gave an entity batch back (or its stream closed): queue its operations again."""


class RemoteEpisodes:
    """Remote episodes: orchestrations and activities run by external workers (the gRPC sidecar protocol).

    It owns the workers' answers not applied yet and its counters.
    """

    def __init__(
        self,
        site: RemoteSite,
        *,
        actions: ActionMapper,
        endings: Ending,
        entities: EntitySender,
        workers: Workers,
        work: WorkSink,
        entity_flights: EntityFlights,
    ) -> None:
        self._site = site
        self._actions = actions
        self._endings = endings
        self._entities = entities
        self._workers = workers
        self._work = work
        self._entity_flights = entity_flights
        self._done: deque[tuple[Instance, Flight, list[dict[str, Any]], Outcome | None, str | None]] = deque()
        self.episodes_run = 0
        self.activities_run = 0

    @property
    def has_answers(self) -> bool:
        """Whether workers' answers wait for the dispatcher's next slice."""
        return bool(self._done)

    def drop_answers(self) -> None:
        """Forget the answers not applied yet (a reload from the store offers their episodes again)."""
        self._done.clear()

    def episode(self, inst: Instance) -> None:
        """Hand the instance's next episode to a worker (after the slice commits); it waits for the answer."""
        if inst.flight is not None or inst.status in TERMINAL_STATES or inst.status == "Suspended":
            return
        batch, _retry = take_batch(self._site.store, inst)  # no host-side retries here: a worker retries itself
        first = not inst.texts
        if not batch and not first:
            return
        ts_epoch = max([time.time()] + [m.fire_at for m in batch])
        ts = epoch_to_history(ts_epoch)
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if first:
            new_events.append(execution_started(inst))
        new_events.extend(m.event for m in batch)
        token = self._workers.new_token(inst.id)
        flight = Flight(
            token,
            inst.id,
            inst.name,
            inst.version,
            inst.execution_id,
            batch,
            list(inst.texts),
            new_events,
            ts,
            ts_epoch,
        )
        inst.flight = flight
        self.episodes_run += 1
        self._site.defer(lambda: self._workers.offer_orchestration(flight))

    def complete_remote_orchestration(
        self, token: str, actions: list[dict[str, Any]], outcome: Outcome | None, custom_status: str | None
    ) -> None:
        """Take a worker's answer to an episode (new actions, how the execution ended); drop stale answers.

        It is applied in the dispatcher's next slice, so answers that arrive together share one commit; until
        then the instance waits as it did, and a crash before that commit offers the episode again.
        """
        self._site.require_started()
        flight = self._workers.claim(token)
        if not isinstance(flight, Flight):
            return
        inst = self._site.instances.get(flight.instance_id)
        if inst is None or inst.flight is not flight:
            return  # terminated, or reloaded after a store fault, meanwhile
        self._done.append((inst, flight, actions, outcome, custom_status))
        self._site.wake_dispatcher()

    def apply_answers(self) -> None:
        """Apply the answers that arrived since the last slice, inside the slice's transaction."""
        done = self._done
        while done:
            answer: tuple[Instance, Flight, list[dict[str, Any]], Outcome | None, str | None] = done.popleft()
            inst, flight, actions, outcome, custom_status = answer
            if not self._site.is_live(inst) or inst.flight is not flight:
                continue
            inst.flight = None
            try:
                consume(self._site.store, flight.batch)
                self._apply_remote(inst, flight, actions, outcome, custom_status)
            except STORE_ERRORS:
                raise  # the whole slice is rolled back; the dispatcher heals and offers the episode again
            except Exception as exc:  # an engine bug must not leave the instance waiting forever
                log.exception("Internal error while applying an episode of instance %s", inst.id)
                self._endings.fail_now(inst, f"devhost internal error: {type(exc).__name__}: {exc}")
            if inst.inbox and self._site.is_live(inst):
                self._site.schedule(inst)

    def _apply_remote(
        self,
        inst: Instance,
        flight: Flight,
        actions: list[dict[str, Any]],
        outcome: Outcome | None,
        custom_status: str | None,
    ) -> None:
        ts, new_events = flight.ts, flight.new_events
        close_delivered(inst, flight.batch)
        d = Decisions()
        messages = [a for a in actions if a.get("message")]
        calls = [a for a in actions if not a.get("message")]
        failure = self._actions.map_actions(inst, calls, d, ts, check_missing=False, new_only=True)
        for message in messages if failure is None else []:
            self._send_message(inst, message, d, ts)
        if failure is None and custom_status is not None:
            failure = set_custom_status(inst, custom_status)
        inst.updated = time.time()
        if inst.status in ("Pending", "ContinuedAsNew"):
            inst.status = "Running"
            log.info("%s: orchestration '%s' started.", inst.id, inst.name)
        if failure is not None:
            self._endings.finish(inst, new_events, d.events, "Failed", failure, ts)
            return
        if outcome is not None:
            # Entity messages of the last episode are sent even though the execution ends.
            for entity_id, request in d.entity_ops:
                self._entities.send_op(entity_id, request)
            d.entity_ops.clear()
            if outcome.status == "ContinuedAsNew":
                self._endings.continue_as_new(inst, parse_json_text(outcome.result), new_events, d, ts)
                return
            if outcome.status == "Failed":
                fail = outcome.failure or Failure("OrchestrationFailure", "The orchestration failed.")
                terminal = [
                    h.event(
                        h.EXECUTION_COMPLETED,
                        ts,
                        inst.next_seq,
                        OrchestrationStatus=h.ORCHESTRATION_STATUS["Failed"],
                        Result=h.dumps(fail.message),
                        FailureDetails=fail.details(),
                    )
                ]
                self._endings.finish(inst, new_events, d.events, "Failed", fail.message, ts, terminal_events=terminal)
                return
            # The sidecar protocol ends an execution when the worker says so, open timers or not.
            status = "Terminated" if outcome.status == "Terminated" else "Completed"
            self._endings.finish(inst, new_events, d.events, status, parse_json_text(outcome.result), ts)
            return
        self._site.append(inst, new_events, d.events, ts)
        self._actions.persist_decisions(inst, d)
        self._site.save(inst)

    def _send_message(self, inst: Instance, message: dict[str, Any], d: Decisions, ts: str) -> None:
        """A message without a reply task: an event for another instance, a lock request or an unlock."""
        kind = message["message"]
        if kind == "event":
            self._send_event(inst, message, d, ts)
            return
        target = str(message.get("instanceId") or "")
        if kind == "lock":
            request = {
                "lock": message["criticalSectionId"],
                "lockSet": message["lockSet"],
                "position": 0,
                "parent": inst.id,
                "parentExecution": inst.execution_id,
            }
        else:
            request = {"unlock": message["criticalSectionId"], "parent": inst.id}
        sent = h.event(h.EVENT_SENT, ts, int(message["id"]), InstanceId=target, Name=kind, Input=h.dumps(request))
        d.events.append(sent)
        d.entity_ops.append((target, request))

    def _send_event(self, inst: Instance, send: dict[str, Any], d: Decisions, ts: str) -> None:
        """An orchestration's send_event: EventSent in its history, EventRaised in the target's inbox (same commit)."""
        target_id = str(send.get("instanceId") or "")
        name, input_text = str(send.get("name") or ""), send.get("input")
        d.events.append(h.event(h.EVENT_SENT, ts, int(send["id"]), InstanceId=target_id, Name=name, Input=input_text))
        target = self._site.instances.get(target_id)
        if target is None:
            log.warning("%s: event '%s' for instance '%s' dropped: it is not running.", inst.id, name, target_id)
            return
        ev = h.event(h.EVENT_RAISED, ts, Name=name, Input=input_text)
        self._site.send_inbox(target, ev, None)

    def complete_remote_activity(self, token: str, result: str | None, failure: Failure | None) -> None:
        """Deliver a worker's activity result; it is consumed (and the work row deleted) by the next episode."""
        self._site.require_started()
        work = self._workers.claim(token)
        if not isinstance(work, Work):
            return
        self.activities_run += 1
        ts = epoch_to_history(time.time())
        if failure is None:
            ev = h.event(h.TASK_COMPLETED, ts, TaskScheduledId=work.seq, Result=result)
        else:
            ev = h.event(
                h.TASK_FAILED,
                ts,
                TaskScheduledId=work.seq,
                Reason=failure.message,
                Details=failure.stack or "",
                FailureDetails=failure.details(),
            )
        self._site.deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))

    def abandon_remote(self, token: str) -> None:
        """A worker gave an item back (or its stream closed): offer it again."""
        item = self._workers.claim(token)
        if item is not None:
            self._offer_again(item)

    def release_worker(self, stream: int) -> None:
        """A worker stream closed: what it held is offered again."""
        for item in self._workers.release(stream):
            self._offer_again(item)

    def _offer_again(self, item: Item) -> None:
        if isinstance(item, Work):
            self._work.enqueue(item)
            return
        if isinstance(item, EntityFlight):
            self._entity_flights.offer_again(item)
            return
        inst = self._site.instances.get(item.instance_id)
        if inst is None or inst.flight is not item:
            return
        inst.flight = None
        inst.inbox.extendleft(reversed(item.batch))
        self._site.schedule(inst)
