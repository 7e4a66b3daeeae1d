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
from dataclasses import dataclass
from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.core import STORE_ERRORS, log
from devhost.durable.engine.entities import ENTITY_BATCH, BatchResult, EntitySignal, OperationResult
from devhost.durable.engine.episodes import Episodes
from devhost.durable.engine.state import (
    Decisions,
    EntityInstance,
    EntityOp,
    Instance,
    Message,
    Work,
    parse_json_text,
    split_entity_id,
)
from devhost.durable.engine.workers import EntityFlight, Flight, Item
from devhost.durable.statuses import TERMINAL_STATES
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


class RemoteEpisodes(Episodes):
    """Remote episodes: orchestrations and activities run by external workers (the gRPC sidecar protocol)."""

    def _remote_episode(self, inst: Instance) -> None:
        """Hand the instance's next episode to a worker (after the slice commits); it waits for the answer."""
        if inst.flight is not None or inst.status in TERMINAL_STATES or inst.status == "Suspended":
            return
        batch, _retry = self._take_batch(inst)  # no host-side retries here: a worker retries itself
        first = not inst.texts
        if not batch and not first:
            return
        ts_epoch = max([time.time()] + [m.fire_at for m in batch])
        ts = epoch_to_history(ts_epoch)
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if first:
            new_events.append(self._execution_started(inst))
        new_events.extend(m.event for m in batch)
        token = self.workers.new_token(inst.id)
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
        self._after.append(lambda: self.workers.offer_orchestration(flight))

    def complete_remote_orchestration(
        self, token: str, actions: list[dict[str, Any]], outcome: Outcome | None, custom_status: str | None
    ) -> None:
        """Take a worker's answer to an episode (new actions, how the execution ended); drop stale answers.

        It is applied in the dispatcher's next slice, so answers that arrive together share one commit; until
        then the instance waits as it did, and a crash before that commit offers the episode again.
        """
        self._require_started()
        flight = self.workers.claim(token)
        if not isinstance(flight, Flight):
            return
        inst = self._instances.get(flight.instance_id)
        if inst is None or inst.flight is not flight:
            return  # terminated, or reloaded after a store fault, meanwhile
        self._remote_done.append((inst, flight, actions, outcome, custom_status))
        if self._ready_event is not None:
            self._ready_event.set()

    def _apply_remote_answers(self) -> None:
        """Apply the answers that arrived since the last slice, inside the slice's transaction."""
        done = self._remote_done
        while done:
            answer: tuple[Instance, Flight, list[dict[str, Any]], Outcome | None, str | None] = done.popleft()
            inst, flight, actions, outcome, custom_status = answer
            if self._instances.get(inst.id) is not inst or inst.flight is not flight:
                continue
            inst.flight = None
            try:
                self._consume(flight.batch)
                self._apply_remote(inst, flight, actions, outcome, custom_status)
            except STORE_ERRORS:
                raise  # the whole slice is rolled back; the dispatcher heals and offers the episode again
            except Exception as exc:  # an engine bug must not leave the instance waiting forever
                log.exception("Internal error while applying an episode of instance %s", inst.id)
                self.endings.fail_now(inst, f"devhost internal error: {type(exc).__name__}: {exc}")
            if inst.inbox and self._instances.get(inst.id) is inst:
                self._schedule(inst)

    def _apply_remote(
        self,
        inst: Instance,
        flight: Flight,
        actions: list[dict[str, Any]],
        outcome: Outcome | None,
        custom_status: str | None,
    ) -> None:
        ts, new_events = flight.ts, flight.new_events
        self._close_delivered(inst, flight.batch)
        d = Decisions()
        messages = [a for a in actions if a.get("message")]
        calls = [a for a in actions if not a.get("message")]
        failure = self._map_actions(inst, calls, d, ts, check_missing=False, new_only=True)
        for message in messages if failure is None else []:
            self._send_message(inst, message, d, ts)
        if failure is None and custom_status is not None:
            failure = self._set_custom_status(inst, custom_status)
        inst.updated = time.time()
        if inst.status in ("Pending", "ContinuedAsNew"):
            inst.status = "Running"
            log.info("%s: orchestration '%s' started.", inst.id, inst.name)
        if failure is not None:
            self.endings.finish(inst, new_events, d.events, "Failed", failure, ts)
            return
        if outcome is not None:
            # Entity messages of the last episode are sent even though the execution ends.
            for entity_id, request in d.entity_ops:
                self._send_entity_op(entity_id, request)
            d.entity_ops.clear()
            if outcome.status == "ContinuedAsNew":
                self.endings.continue_as_new(inst, parse_json_text(outcome.result), new_events, d, ts)
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
                self.endings.finish(inst, new_events, d.events, "Failed", fail.message, ts, terminal_events=terminal)
                return
            # The sidecar protocol ends an execution when the worker says so, open timers or not.
            status = "Terminated" if outcome.status == "Terminated" else "Completed"
            self.endings.finish(inst, new_events, d.events, status, parse_json_text(outcome.result), ts)
            return
        self._append(inst, new_events, d.events, ts)
        self._persist_decisions(inst, d)
        self._save(inst)

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
        target = self._instances.get(target_id)
        if target is None:
            log.warning("%s: event '%s' for instance '%s' dropped: it is not running.", inst.id, name, target_id)
            return
        ev = h.event(h.EVENT_RAISED, ts, Name=name, Input=input_text)
        inbox_id = self._store.insert_inbox(target_id, None, h.render(ev))
        target.inbox.append(Message(ev, None, inbox_id=inbox_id))
        self._schedule(target)

    def complete_remote_activity(self, token: str, result: str | None, failure: Failure | None) -> None:
        """Deliver a worker's activity result; it is consumed (and the work row deleted) by the next episode."""
        self._require_started()
        work = self.workers.claim(token)
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
        self._deliver(work.instance_id, Message(ev, work.execution_id, work_id=work.work_id))

    def _remote_entity_episode(self, ent: EntityInstance) -> None:
        """Hand the entity's next batch of operations, with its state, to a worker (after the slice commits)."""
        if ent.flight is not None:
            return
        batch, waiting, again = self._due_operations(ent)
        if again:
            self._after.append(lambda: self._schedule_entity(ent))  # a lock was released: look at the queue again
        if not batch:
            if waiting is not None and self._loop is not None:  # only scheduled signals: wake up for the first
                self._loop.call_later(max(0.0, waiting - time.time()), self._schedule_entity, ent)
            elif self._entities.get(ent.id) is ent and not ent.queue and ent.lock is None:
                del self._entities[ent.id]
            return
        found = self._store.get_entity(ent.id)
        token = self.workers.new_token(ent.id)
        flight = EntityFlight(token, ent.id, batch, found[0] if found else None, found is not None)
        ent.flight = flight
        self.entity_batches_run += 1
        self._after.append(lambda: self.workers.offer_entity(flight))

    def _due_operations(self, ent: EntityInstance) -> tuple[list[EntityOp], float | None, bool]:
        """The next batch of operations to run (in order), when the first scheduled one left waiting is due, and
        whether a lock was released (so what waited on it is looked at again).

        Lock messages are handled here, not by the worker: a lock request takes a free entity (and goes on to
        the next entity of its lock set, or is granted to the orchestration), waits while another critical
        section holds it; while held, only the holder's operations run; the holder's unlock frees it.
        """
        now = time.time()
        self._adopt_held_lock(ent)
        due: list[EntityOp] = []
        kept: list[EntityOp] = []
        released = False
        while ent.queue and len(due) < ENTITY_BATCH:
            op = ent.queue.popleft()
            request = op.request
            not_before = request.get("notBefore")
            if not_before and float(not_before) > now:
                kept.append(op)
            elif "lock" in request:
                if ent.lock is None:
                    self._take_lock(ent, op)
                else:
                    kept.append(op)
            elif "unlock" in request:
                self._store.delete_entity_ops([op.op_id])
                if ent.lock is not None and ent.lock.request.get("held") == request["unlock"]:
                    self._store.delete_entity_ops([ent.lock.op_id])
                    ent.lock, released = None, True
                    break
            elif ent.lock is not None and request.get("parent") != ent.lock.request.get("parent"):
                kept.append(op)  # another caller's operation waits for the critical section to end
            else:
                due.append(op)
        ent.queue.extendleft(reversed(kept))
        waiting = [float(op.request["notBefore"]) for op in kept if op.request.get("notBefore")]
        return due, (min(waiting) if waiting and not due else None), released

    @staticmethod
    def _adopt_held_lock(ent: EntityInstance) -> None:
        """After a restart the lock an entity held is its "held" op in the queue: take it out and hold it."""
        if ent.lock is not None:
            return
        for op in ent.queue:
            if "held" in op.request:
                ent.queue.remove(op)
                ent.lock = op
                return

    def _take_lock(self, ent: EntityInstance, op: EntityOp) -> None:
        """Lock the entity for a critical section; pass the request on to the next entity, or grant it."""
        request = op.request
        held = {"held": request["lock"], "parent": request.get("parent")}
        self._store.delete_entity_ops([op.op_id])
        ent.lock = EntityOp(self._store.insert_entity_op(ent.id, h.dumps(held)), held)
        lock_set, position = list(request.get("lockSet") or []), int(request.get("position", 0))
        if position + 1 < len(lock_set):
            self._send_entity_op(lock_set[position + 1], {**request, "position": position + 1})
            return
        parent = self._instances.get(str(request.get("parent")))
        if parent is None or parent.execution_id != request.get("parentExecution"):
            return  # the orchestration is gone: its unlock never comes (purging the entity's owner does not free it)
        ev = h.event(h.EVENT_RAISED, epoch_to_history(time.time()), Name=request["lock"], EntityLockGranted=True)
        inbox_id = self._store.insert_inbox(parent.id, parent.execution_id, h.render(ev))
        parent.inbox.append(Message(ev, parent.execution_id, inbox_id=inbox_id))
        self._schedule(parent)

    def complete_remote_entity(
        self,
        token: str,
        results: list[tuple[str | None, Failure | None]],
        state: str | None,
        signals: list[tuple[str, str, str | None, float | None]],
        batch_failure: Failure | None = None,
    ) -> None:
        """Apply a worker's batch result: new state (None: deleted), one result per operation, signals it sent.

        As for the app's entities, the state, the replies and the deletion of the operations commit together.
        ``batch_failure``: the whole batch failed; every operation fails with it and the state stays.
        """
        self._require_started()
        flight = self.workers.claim(token)
        if not isinstance(flight, EntityFlight):
            return
        ent = self._entities.get(flight.entity_id)
        if ent is None or ent.flight is not flight:
            return
        ent.flight = None
        batch = flight.batch
        if batch_failure is None and len(results) != len(batch):
            message = f"the worker returned {len(results)} results for {len(batch)} operations"
            batch_failure = Failure("InvalidBatchResult", message)
        if batch_failure is not None:
            results, state, signals = [(None, batch_failure)] * len(batch), flight.state, []
        outcomes = [
            OperationResult(result=result)
            if failure is None
            else OperationResult(isError=True, result=h.dumps(failure.message), failure=failure.details())
            for result, failure in results
        ]
        sent = []
        for target, operation, input_text, not_before in signals:
            name, key = split_entity_id(target)
            target_ref = {"name": name, "key": key}
            sent.append(EntitySignal(target=target_ref, name=operation, input=input_text, notBefore=not_before))
        result = BatchResult(entityExists=state is not None, entityState=state, results=outcomes, signals=sent)
        with self._transaction():
            self._apply_batch(ent, batch, result, existed=flight.existed)
            self._store.delete_entity_ops([op.op_id for op in batch])
        if ent.queue:
            self._schedule_entity(ent)
        elif self._entities.get(ent.id) is ent and ent.lock is None:
            del self._entities[ent.id]

    async def release_orphaned_locks(self) -> int:
        """Free entities whose critical section belongs to an orchestration that is no longer running."""
        self._require_started()
        orphaned = []
        for ent in list(self._entities.values()):
            if ent.lock is None and ent.queue:
                self._adopt_held_lock(ent)
            if ent.lock is not None and str(ent.lock.request.get("parent")) not in self._instances:
                orphaned.append(ent)
        if not orphaned:
            return 0
        with self._transaction():
            self._store.delete_entity_ops([ent.lock.op_id for ent in orphaned if ent.lock is not None])
        for ent in orphaned:
            ent.lock = None
            if ent.queue:
                self._schedule_entity(ent)
            elif self._entities.get(ent.id) is ent:
                del self._entities[ent.id]
        return len(orphaned)

    def abandon_remote(self, token: str) -> None:
        """A worker gave an item back (or its stream closed): offer it again."""
        item = self.workers.claim(token)
        if item is not None:
            self._offer_again(item)

    def release_worker(self, stream: int) -> None:
        """A worker stream closed: what it held is offered again."""
        for item in self.workers.release(stream):
            self._offer_again(item)

    def _offer_again(self, item: Item) -> None:
        if isinstance(item, Work):
            self._enqueue_work(item)
            return
        if isinstance(item, EntityFlight):
            ent = self._entities.get(item.entity_id)
            if ent is not None and ent.flight is item:
                ent.flight = None
                ent.queue.extendleft(reversed(item.batch))
                self._schedule_entity(ent)
            return
        inst = self._instances.get(item.instance_id)
        if inst is None or inst.flight is not item:
            return
        inst.flight = None
        inst.inbox.extendleft(reversed(item.batch))
        self._schedule(inst)
