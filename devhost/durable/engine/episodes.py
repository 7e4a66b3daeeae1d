"""One episode: replay the orchestrator through the SDK over its history and apply what it decided."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from devhost.durable import history as h
from devhost.durable.accel import predecoded
from devhost.durable.actions import ActionType, flatten
from devhost.durable.decoded import MIN_CACHED_EVENTS
from devhost.durable.engine.core import CUSTOM_STATUS_LIMIT_KB, MAX_BATCH, OUT_OF_PROC_MARKER, flog, log
from devhost.durable.engine.handlers import ActionHandlers
from devhost.durable.engine.retries import retry_step
from devhost.durable.engine.state import Decisions, Instance, Message
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.timeutil import (
    epoch_to_history,
)
from devhost.functions import ids
from devhost.functions.logs import current_invocation
from devhost.functions.model import (
    FunctionInfo,
)


class Episodes(ActionHandlers):
    """One episode: replay the orchestrator through the SDK over its history and apply what it decided."""

    def _is_retry_relevant(self, inst: Instance, ev: dict[str, Any]) -> bool:
        et = ev.get("EventType")
        if et in (h.TASK_FAILED, h.SUB_ORCHESTRATION_FAILED):
            entry = inst.rmap.get(ev.get("TaskScheduledId", -1))
            return entry is not None and entry[1] == "attempt"
        if et == h.TIMER_FIRED:
            entry = inst.rmap.get(ev.get("TimerId", -1))
            return entry is not None and entry[1] == "timer"
        return False

    def _episode(self, inst: Instance) -> None:
        if inst.status in TERMINAL_STATES or inst.status == "Suspended":
            return
        batch, retry_msg = self._take_batch(inst)
        first = not inst.texts
        if not batch and not first:
            return
        fn = self._orchestrators.get(inst.name.lower())
        if fn is None:
            self._consume(batch)
            self.endings.fail_now(inst, self._unknown_function_message(inst.name, "orchestrator"))
            return
        now = time.time()
        ts_epoch = max([now] + [m.fire_at for m in batch])
        ts = epoch_to_history(ts_epoch)
        new_events, state, error = self._invoke(fn, inst, batch, ts, first)
        if state is not None and state.get("isDone") and len(batch) > 1 and self._ends_with_can(state):
            # Re-run with the first message only: later messages carry over to the next execution.
            for m in reversed(batch[1:]):
                inst.inbox.appendleft(m)
            batch = batch[:1]
            new_events, state, error = self._invoke(fn, inst, batch, ts, first)
        self.episodes_run += 1
        self._consume(batch)
        self._apply(inst, new_events, state, error, retry_msg, batch, ts, ts_epoch)
        if inst.status in TERMINAL_STATES:
            self._decoded.forget(inst.id)
        inst.last_end = time.monotonic()
        inst.last_cost = time.time() - now
        if inst.inbox and inst.status not in TERMINAL_STATES:
            self._schedule(inst)

    def _take_batch(self, inst: Instance) -> tuple[list[Message], Message | None]:
        """The messages one episode delivers, and the retry-relevant one if that is what it delivers.

        Stale messages (another execution's, or completing a task no longer open) are dropped; a
        retry-relevant message always gets an episode of its own, so host and SDK number retries alike.
        """
        inbox = inst.inbox
        batch: list[Message] = []
        while inbox:
            m = inbox[0]
            seq = self._seq_of(m.event)
            stale = (m.execution_id is not None and m.execution_id != inst.execution_id) or (
                seq is not None and seq not in inst.open
            )
            if stale:
                inbox.popleft()
                self._forget_message(m)
                continue
            if self._is_retry_relevant(inst, m.event):
                if batch:
                    break
                inbox.popleft()
                return [m], m
            inbox.popleft()
            batch.append(m)
            if len(batch) >= MAX_BATCH:
                break
        return batch, None

    @staticmethod
    def _ends_with_can(state: dict[str, Any]) -> bool:
        flat: list[dict[str, Any]] = []
        flatten(state.get("actions") or [], flat)
        return bool(flat) and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW

    def _consume(self, batch: list[Message]) -> None:
        store = self._store
        inbox_ids = [m.inbox_id for m in batch if m.inbox_id is not None]
        work_ids = [m.work_id for m in batch if m.work_id is not None]
        timer_ids = [m.timer_id for m in batch if m.timer_id is not None]
        if inbox_ids:
            store.delete_inbox(inbox_ids)
        if work_ids:
            store.delete_activities(work_ids)
        if timer_ids:
            store.delete_timers(timer_ids)

    def _invoke(
        self, fn: FunctionInfo, inst: Instance, batch: list[Message], ts: str, first: bool
    ) -> tuple[list[str], dict[str, Any] | None, str | None]:
        """Run the SDK handle over history + new events; returns (rendered new events, state, error)."""
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if first:
            new_events.append(self._execution_started(inst))
        new_events.extend(m.event for m in batch)
        rendered = [h.render(e) for e in new_events]
        fresh = ",".join([h.unplayed(t) for t in rendered])
        history_text = f"{inst.joined},{fresh}" if inst.joined else fresh
        p = inst.parent
        tail = (
            '],"input":'
            + (inst.input_text if inst.input_text is not None else "null")
            + ',"instanceId":'
            + h.dumps(inst.id)
            + ',"isReplaying":'
            + ("true" if inst.texts else "false")
            + ',"parentInstanceId":'
            + (h.dumps(p.instance_id) if p else "null")
            + ',"upperSchemaVersion":1,"upperSchemaVersionNew":2}'
        )
        context_json = '{"history":[' + history_text + tail
        # A short history decodes as fast as the cache could splice it: the SDK decodes it, as before.
        decoded = None
        if len(inst.texts) >= MIN_CACHED_EVENTS:
            decoded = self._decoded.context(inst.id, inst.joined, fresh, tail)
        invocation_id = ids.invocation_id()
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        token = current_invocation.set((fn.name, invocation_id))
        state: dict[str, Any] | None = None
        error: str | None = None
        try:
            if decoded is None:
                state = json.loads(fn.user_function(context_json))
            else:
                with predecoded(context_json, decoded):
                    state = json.loads(fn.user_function(context_json))
        except Exception as exc:
            text = str(exc)
            at = text.find(OUT_OF_PROC_MARKER)
            if at >= 0:
                try:
                    state = json.loads(text[at + len(OUT_OF_PROC_MARKER) :])
                except ValueError:
                    state = None
                error = (state or {}).get("error") or text[:at]
            else:
                error = f"{type(exc).__name__}: {exc}"
        finally:
            current_invocation.reset(token)
        if state is not None and not isinstance(state, dict):
            error, state = f"The orchestrator returned invalid state JSON: {state!r:.200}", None
        flog.info(
            "Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)",
            fn.name,
            "Failed" if error is not None else "Succeeded",
            invocation_id,
            (time.perf_counter() - started) * 1000,
        )
        return rendered, state, error

    def _apply(
        self,
        inst: Instance,
        new_events: Sequence[dict[str, Any] | str],
        state: dict[str, Any] | None,
        error: str | None,
        retry_msg: Message | None,
        batch: list[Message],
        ts: str,
        ts_epoch: float,
    ) -> None:
        """Turn the orchestrator's state into history, scheduled work and a status."""
        self._close_delivered(inst, batch)
        d = Decisions()
        if retry_msg is not None:
            retry_step(inst, retry_msg.event, ts, ts_epoch, d)
        flat: list[dict[str, Any]] = []
        failure = self._state_failure(inst, state, error, flat, d, ts)
        inst.updated = time.time()
        if inst.status in ("Pending", "ContinuedAsNew"):
            inst.status = "Running"
            log.info("%s: orchestration '%s' started.", inst.id, inst.name)
        if failure is not None:
            self.endings.finish(
                inst, new_events, d.events, "Failed", f"Orchestrator function '{inst.name}' failed: {failure}", ts
            )
            return
        assert state is not None
        if state.get("isDone"):
            # Entity signals of the last episode are sent even though the execution ends (DTFx sends them).
            for entity_id, request in d.entity_ops:
                self._send_entity_op(entity_id, request)
            d.entity_ops.clear()
            if flat and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW:
                self.endings.continue_as_new(inst, flat[-1].get("input"), new_events, d, ts)
                return
            if not inst.open:
                output = state.get("output")
                self.endings.finish(inst, new_events, d.events, "Completed", output, ts)
                return
        self._append(inst, new_events, d.events, ts)
        self._persist_decisions(inst, d)
        self._save(inst)

    def _close_delivered(self, inst: Instance, batch: list[Message]) -> None:
        """The tasks this batch completes are no longer open; completed retry attempts leave the retry map."""
        for m in batch:
            seq = self._seq_of(m.event)
            if seq is None:
                continue
            inst.open.pop(seq, None)
            if m.event["EventType"] in (h.TASK_COMPLETED, h.SUB_ORCHESTRATION_COMPLETED):
                inst.rmap.pop(seq, None)

    def _state_failure(
        self,
        inst: Instance,
        state: dict[str, Any] | None,
        error: str | None,
        flat: list[dict[str, Any]],
        d: Decisions,
        ts: str,
    ) -> str | None:
        """Map the state's actions into ``flat`` and ``d``, take its custom status; why the episode fails, if so."""
        if state is None:
            return error or "The orchestrator returned no state."
        flatten(state.get("actions") or [], flat)
        failure = self._map_actions(inst, flat, d, ts, check_missing=error is None)
        if failure is None and "customStatus" in state:
            failure = self._set_custom_status(inst, h.dumps(state["customStatus"]))
        return failure or error

    @staticmethod
    def _set_custom_status(inst: Instance, text: str) -> str | None:
        """Take an episode's custom status (JSON text); why the episode fails when it is too large."""
        size_kb = len(text.encode("utf-16-le")) // 1024
        if size_kb > CUSTOM_STATUS_LIMIT_KB:
            return (
                "The UTF-16 size of the JSON-serialized payload must not exceed 16 KB. "
                f"The current payload size is {size_kb} KB."
            )
        inst.custom_status_text = text
        return None
