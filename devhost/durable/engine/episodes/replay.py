"""One episode: replay the orchestrator through the SDK over its history and apply what it decided."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, Protocol

from devhost.durable import history as h
from devhost.durable.accel import predecoded
from devhost.durable.actions import ActionType, flatten
from devhost.durable.decoded import MIN_CACHED_EVENTS, DecodedHistories
from devhost.durable.engine.core import OUT_OF_PROC_MARKER, FunctionTable, execution_started, flog, log
from devhost.durable.engine.episodes.actions import EntitySender
from devhost.durable.engine.episodes.messages import close_delivered, consume, set_custom_status, take_batch
from devhost.durable.engine.episodes.retries import retry_step
from devhost.durable.engine.state import Decisions, Instance, Message
from devhost.durable.sessions import OrchestratorSessions, supports
from devhost.durable.statuses import TERMINAL_STATES
from devhost.durable.store import Store
from devhost.durable.timeutil import (
    epoch_to_history,
)
from devhost.functions import ids
from devhost.functions.logs import current_invocation
from devhost.functions.model import (
    FunctionInfo,
)


class EpisodesSite(Protocol):
    """What an episode needs of the engine core (``EngineCore``)."""

    functions: FunctionTable

    @property
    def store(self) -> Store:
        """The durable store."""

    def schedule(self, inst: Instance) -> None:
        """Queue ``inst`` for an episode, unless it waits (a worker's episode, a scheduled start, coalescing)."""

    def save(self, inst: Instance) -> None:
        """Write the instance's row (status, output, custom status, execution state)."""

    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        """Append an episode's events (new, decisions, OrchestratorCompleted) to history."""


class ActionMapper(Protocol):
    """Who checks and schedules an episode's actions (``ActionHandlers``)."""

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
        """Flatten-and-diff (ARCHITECTURE.md): check replayed actions, schedule new ones; returns a failure message."""

    def persist_decisions(self, inst: Instance, d: Decisions) -> None:
        """Write the episode's work items, timers, cancellations and children; dispatch after commit."""


class Ending(Protocol):
    """How an execution ends (``Endings``)."""

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

    def continue_as_new(
        self, inst: Instance, input_text: Any, new_events: Sequence[dict[str, Any] | str], d: Decisions, ts: str
    ) -> None:
        """End this execution and start a new one of the same instance with ``input_text`` (continue-as-new)."""

    def fail_now(self, inst: Instance, message: str) -> None:
        """Fail an instance outside the normal episode path (unknown orchestrator, engine errors)."""


class Episodes:
    """One episode: replay the orchestrator through the SDK over its history and apply what it decided.

    It owns the decoded-history cache, the extended sessions (when host.json enables them) and the count of
    episodes it ran.
    """

    def __init__(
        self,
        site: EpisodesSite,
        actions: ActionMapper,
        endings: Ending,
        entities: EntitySender,
        sessions: OrchestratorSessions | None = None,
    ) -> None:
        self._site = site
        self._actions = actions
        self._endings = endings
        self._entities = entities
        self.decoded = DecodedHistories()  # decoded history prefixes: an episode decodes only its new events
        # Live orchestrators between episodes (host.json extendedSessionsEnabled): an episode runs only its new events.
        self.sessions = sessions
        self.episodes_run = 0

    def clear_sessions(self) -> None:
        """Drop every extended session (a reload after a store fault: the next episodes replay in full)."""
        if self.sessions is not None:
            self.sessions.clear()

    def run(self, inst: Instance) -> None:
        """Run the instance's next episode over its pending messages (effects go into the open transaction)."""
        if inst.status in TERMINAL_STATES or inst.status == "Suspended":
            return
        batch, retry_msg = take_batch(self._site.store, inst)
        first = not inst.texts
        if not batch and not first:
            return
        fn = self._site.functions.orchestrators.get(inst.name.lower())
        if fn is None:
            consume(self._site.store, batch)
            self._endings.fail_now(inst, self._site.functions.unknown(inst.name, "orchestrator"))
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
        consume(self._site.store, batch)
        self._apply(inst, new_events, state, error, retry_msg, batch, ts, ts_epoch)
        if inst.status in TERMINAL_STATES:
            self.decoded.forget(inst.id)
            if self.sessions is not None:
                self.sessions.forget(inst.id)
        inst.last_end = time.monotonic()
        inst.last_cost = time.time() - now
        if inst.inbox and inst.status not in TERMINAL_STATES:
            self._site.schedule(inst)

    @staticmethod
    def _ends_with_can(state: dict[str, Any]) -> bool:
        flat: list[dict[str, Any]] = []
        flatten(state.get("actions") or [], flat)
        return bool(flat) and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW

    def _invoke(
        self, fn: FunctionInfo, inst: Instance, batch: list[Message], ts: str, first: bool
    ) -> tuple[list[str], dict[str, Any] | None, str | None]:
        """Run the SDK handle over history + new events; returns (rendered new events, state, error)."""
        new_events = [h.event(h.ORCHESTRATOR_STARTED, ts)]
        if first:
            new_events.append(execution_started(inst))
        new_events.extend(m.event for m in batch)
        rendered = [h.render(e) for e in new_events]
        fed = [h.unplayed(t) for t in rendered]
        fresh = ",".join(fed)
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

        def context() -> tuple[str, dict[str, Any] | None]:
            """The whole context as the handle takes it, and its decoded value when the cache has the prefix."""
            history_text = f"{inst.joined},{fresh}" if inst.joined else fresh
            # A short history decodes as fast as the cache could splice it: the SDK decodes it, as before.
            decoded = None
            if len(inst.texts) >= MIN_CACHED_EVENTS:
                decoded = self.decoded.context(inst.id, inst.joined, fresh, tail)
            return '{"history":[' + history_text + tail, decoded

        invocation_id = ids.invocation_id()
        flog.info("Executing 'Functions.%s' (Reason='(null)', Id=%s)", fn.name, invocation_id)
        started = time.perf_counter()
        token = current_invocation.set((fn.name, invocation_id))
        state: dict[str, Any] | None = None
        error: str | None = None
        try:
            if self.sessions is not None and supports(fn.user_function):
                text = self.sessions.episode(
                    inst.id, inst, inst.execution_id, fn.user_function, inst.texts, fed, context
                )
                state = json.loads(text)
            else:
                context_json, decoded = context()
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
        close_delivered(inst, batch)
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
            self._endings.finish(
                inst, new_events, d.events, "Failed", f"Orchestrator function '{inst.name}' failed: {failure}", ts
            )
            return
        assert state is not None
        if state.get("isDone"):
            # Entity signals of the last episode are sent even though the execution ends (DTFx sends them).
            for entity_id, request in d.entity_ops:
                self._entities.send_op(entity_id, request)
            d.entity_ops.clear()
            if flat and flat[-1].get("actionType") == ActionType.CONTINUE_AS_NEW:
                self._endings.continue_as_new(inst, flat[-1].get("input"), new_events, d, ts)
                return
            if not inst.open:
                output = state.get("output")
                self._endings.finish(inst, new_events, d.events, "Completed", output, ts)
                return
        self._site.append(inst, new_events, d.events, ts)
        self._actions.persist_decisions(inst, d)
        self._site.save(inst)

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
        failure = self._actions.map_actions(inst, flat, d, ts, check_missing=error is None)
        if failure is None and "customStatus" in state:
            failure = set_custom_status(inst, h.dumps(state["customStatus"]))
        return failure or error
