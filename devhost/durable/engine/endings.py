"""How an execution ends: completion, failure, continue-as-new, and telling the parent."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.engine.core import execution_started, forget_message
from devhost.durable.engine.state import Decisions, Instance, Message
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import Store
from devhost.durable.timeutil import (
    epoch_to_history,
)
from devhost.functions.logs import host_logger

log = host_logger("devhost.durable")


class EndingsSite(Protocol):
    """What ending an execution needs of the engine core (``EngineCore``)."""

    @property
    def store(self) -> Store:
        """The durable store."""

    @property
    def instances(self) -> Mapping[str, Instance]:
        """The live (non-terminal) orchestration instances by id (read-only)."""

    def untrack(self, instance_id: str) -> None:
        """Forget a live instance (it ended)."""

    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (never if it rolls back)."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""

    def wake_waiters(self, instance_id: str) -> None:
        """Resolve the waiters of an instance that ended."""

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        """Persist an event for ``target`` (inside the open transaction) and schedule it."""

    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        """Append an episode's events (new, decisions, OrchestratorCompleted) to history."""


class Endings:
    """How an execution ends: completion, failure, continue-as-new, and telling the parent."""

    def __init__(self, site: EndingsSite) -> None:
        self._site = site

    def continue_as_new(
        self, inst: Instance, input_text: Any, new_events: Sequence[dict[str, Any] | str], d: Decisions, ts: str
    ) -> None:
        """End this execution and start a new one of the same instance with ``input_text`` (continue-as-new)."""
        store = self._site.store
        old_execution = inst.execution_id
        for handle in inst.timer_handles.values():
            handle.cancel()
        inst.timer_handles.clear()
        store.delete_instance_work(inst.id, inbox=False)
        store.replace_history(inst.id, [])
        # Results for the old execution are void; external events carry over.
        kept: deque[Message] = deque()
        for m in inst.inbox:
            if m.execution_id == old_execution:
                forget_message(store, m)
            else:
                kept.append(m)
        inst.inbox = kept
        inst.reset_execution(h.dumps(input_text), time.time())
        inst.status = "ContinuedAsNew"
        self._site.save(inst)
        log.info("%s: orchestration '%s' continued as new (generation %d).", inst.id, inst.name, inst.generation)
        self._site.schedule(inst)
        del new_events, d

    def finish(
        self,
        inst: Instance,
        new_events: Sequence[dict[str, Any] | str],
        decided: list[dict[str, Any]],
        status: str,
        output: Any,
        ts: str,
        *,
        terminal_events: list[dict[str, Any]] | None = None,
    ) -> None:
        """Move an instance to a terminal status: history tail, row, cleanup, parent notification."""
        output_text = h.dumps(output)
        if terminal_events is None:
            extra: dict[str, Any] = {}
            if status == "Failed":
                extra["FailureDetails"] = {"ErrorType": "OrchestrationFailure", "ErrorMessage": output}
            terminal_events = [
                h.event(
                    h.EXECUTION_COMPLETED,
                    ts,
                    inst.next_seq,
                    OrchestrationStatus=h.ORCHESTRATION_STATUS[status],
                    Result=output_text,
                    **extra,
                )
            ]
        self._site.append(inst, new_events, decided + terminal_events, ts)
        for handle in inst.timer_handles.values():
            handle.cancel()
        inst.timer_handles.clear()
        self._site.store.delete_instance_work(inst.id)
        inst.inbox.clear()
        inst.status = status
        inst.output_text = output_text
        inst.updated = time.time()
        self._site.save(inst)
        self._site.untrack(inst.id)
        self._notify_parent(inst, status, output, ts)
        instance_id = inst.id
        self._site.defer(lambda: self._site.wake_waiters(instance_id))
        if status == "Completed":
            log.info("%s: orchestration '%s' completed.", inst.id, inst.name)
        elif status == "Failed":
            log.info("%s: orchestration '%s' failed: %s", inst.id, inst.name, output)
        else:
            log.info("%s: orchestration '%s' %s.", inst.id, inst.name, status.lower())

    def fail_now(self, inst: Instance, message: str) -> None:
        """Fail an instance outside the normal episode path (unknown orchestrator, engine errors)."""
        if inst.status in TERMINAL_STATES:
            return
        ts = epoch_to_history(time.time())
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if not inst.texts:
            new_events.append(execution_started(inst))
        self.finish(inst, new_events, [], "Failed", f"Orchestrator function '{inst.name}' failed: {message}", ts)

    def _notify_parent(self, inst: Instance, status: str, output: Any, ts: str) -> None:
        p = inst.parent
        if p is None:
            return
        parent = self._site.instances.get(p.instance_id)
        if parent is None or parent.execution_id != p.execution_id or parent.open.get(p.seq) != "o":
            return
        if status == "Completed":
            ev = h.event(h.SUB_ORCHESTRATION_COMPLETED, ts, TaskScheduledId=p.seq, Result=inst.output_text)
        else:
            reason = output if isinstance(output, str) else h.dumps(output)
            if status != "Failed":
                reason = f"Sub-orchestration '{inst.id}' was {status.lower()}: {reason}"
            ev = h.event(h.SUB_ORCHESTRATION_FAILED, ts, TaskScheduledId=p.seq, Reason=reason, Details="")
        self._site.send_inbox(parent, ev, parent.execution_id)
