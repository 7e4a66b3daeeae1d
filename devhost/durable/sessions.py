"""Extended sessions: keep an in-process orchestrator alive between episodes and feed it only the new events.

host.json ``extensions.durableTask.extendedSessionsEnabled`` (off by default, as in the extension) keeps
each running orchestration's SDK state in memory after an episode: its ``TaskOrchestrationExecutor``,
its ``DurableOrchestrationContext`` and the user's suspended generator. The next episode then processes
only the events appended since (the decisions the host recorded, then OrchestratorStarted and the new
messages), exactly as the SDK's own replay loop would reach them, instead of re-running the orchestrator
over its whole history. The extension does the same for .NET (``extendedSessionsEnabled``).

What makes the result equal to a full replay: the SDK processes history strictly in order, and its state
after a prefix depends only on that prefix (deterministic orchestrator code). A session is used only
when the history is provably the one it saw, extended at its end: the same instance object and history
list, the same execution, the text before its last episode the same object, and the events it was fed
stored as fed. Anything else replays in full: the first episode, a reload after a restart or a store fault
(new objects), rewind (a new history list), continue-as-new, any exception, an unexpected event kind in
between, an evicted or idle session. A crash loses only sessions; the next episode replays in full.

The one difference a full replay would show: code that branches on ``context.is_replaying`` (or reads
``context.histories`` mid-run) sees the values of the episode in which it first ran. Logging under
``if not context.is_replaying`` is the intended use and is unaffected; the same holds for .NET.
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devhost.durable import history as h
from devhost.durable.accel import predecoded

# SDK versions whose handle (``Orchestrator.create``'s ``handle``) and replay loop
# (``TaskOrchestrationExecutor.execute``) tests/devhost/test_sessions.py checks event by event.
TESTED_SDK_VERSIONS = frozenset({"1.7.0"})
# Bounds (least recently used out first): sessions kept, and the history text they hold together. In
# memory a session costs about twice its history text for a no-op chain (120 kB at 100 steps) and up to
# four times for the app's jobs (40-160 kB each), so the text cap bounds all sessions to about 64 MB.
MAX_SESSIONS = 1000
MAX_SESSION_TEXT = 16_000_000
DEFAULT_IDLE_TIMEOUT_S = 30.0  # the extension's extendedSessionIdleTimeoutInSeconds default
# Events the host appends between episodes (an episode's decisions): the SDK's loop only reads EventSent.
_BETWEEN_EPISODES = frozenset({4, 7, 10, 13, 14})
_HANDLE_QUALNAME = "Orchestrator.create.<locals>.handle"

Handle = Callable[[str], str]


@dataclass(slots=True)
class _Session:
    owner: object  # the engine's Instance the session belongs to (identity)
    handle: Handle  # the orchestrator function it runs (identity: a reloaded app replays in full)
    texts: list[str]  # that instance's history list (identity: replaced on reload, rewind, continue-as-new)
    execution_id: str
    before: str | None  # the history text just before the last episode's events (identity)
    base: int  # where the last episode's events start in ``texts``
    fed: list[str]  # the last episode's events as the SDK got them (IsPlayed false)
    executor: Any
    context: Any
    used: float
    size: int  # characters of history text it has processed (the measure of what it holds)

    @property
    def cursor(self) -> int:
        return self.base + len(self.fed)


def sdk_supported() -> bool:
    """True when the installed Durable SDK is one whose replay loop the session path was checked against."""
    try:
        return importlib.metadata.version("azure-functions-durable") in TESTED_SDK_VERSIONS
    except importlib.metadata.PackageNotFoundError:
        return False


def supports(handle: Any) -> bool:
    """True for the SDK's own orchestrator handle (the one ``Orchestrator.create`` returns)."""
    return (
        getattr(handle, "__qualname__", None) == _HANDLE_QUALNAME
        and getattr(handle, "__module__", None) == "azure.durable_functions.orchestrator"
        and callable(getattr(handle, "orchestrator_function", None))
    )


class OrchestratorSessions:
    """Live orchestrator sessions per instance, an LRU bounded in count and in history text held; idle ones end."""

    def __init__(
        self,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_sessions: int = MAX_SESSIONS,
        max_text: int = MAX_SESSION_TEXT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._text = 0
        self._idle = idle_timeout_s
        self._max_sessions = max_sessions
        self._max_text = max_text
        self._clock = clock
        self.incremental = 0  # episodes that ran on a session
        self.full = 0  # episodes that replayed the whole history

    def __len__(self) -> int:
        return len(self._sessions)

    def episode(
        self,
        key: str,
        owner: object,
        execution_id: str,
        handle: Handle,
        prior: list[str],
        fresh: list[str],
        context: Callable[[], tuple[str, dict[str, Any] | None]],
    ) -> str:
        """The state JSON of this episode (raises as ``handle`` raises), from the session when it is valid.

        ``prior`` is the instance's history (stored texts), ``fresh`` this episode's new events (IsPlayed
        false), ``context`` builds the whole context as ``handle`` takes it (and its decoded value, when known)
        for a full replay.
        """
        now = self._clock()
        self._end_idle(now)
        session = self._take(key)
        if session is not None and session.handle is handle and self._valid(session, owner, execution_id, prior, now):
            try:
                state, processed = self._advance(session, prior, fresh)
            except Exception:  # noqa: BLE001 - anything unusual: the full replay below decides (and raises)
                pass
            else:
                self.incremental += 1
                session.before, session.base, session.fed, session.used = (
                    prior[-1] if prior else None,
                    len(prior),
                    fresh,
                    now,
                )
                session.size += processed
                self._keep(key, session)
                return state
        self.full += 1
        orchestrator, sdk_context = _sdk_parts(handle, *context())
        state = orchestrator.handle(sdk_context)  # the SDK handle's own body: raises as it raises
        session = _Session(
            owner, handle, prior, execution_id, prior[-1] if prior else None, len(prior), fresh,
            orchestrator.task_orchestration_executor, sdk_context, now,
            sum(map(len, prior)) + sum(map(len, fresh)),
        )  # fmt: skip
        self._keep(key, session)
        return str(state)

    def forget(self, key: str) -> None:
        """Drop an instance's session (it ended, or its history was rewritten)."""
        self._take(key)

    def clear(self) -> None:
        """Drop every session (the engine stops or reloads)."""
        self._sessions.clear()
        self._text = 0

    def _take(self, key: str) -> _Session | None:
        session = self._sessions.pop(key, None)
        if session is not None:
            self._text -= session.size
        return session

    def _end_idle(self, now: float) -> None:
        """End the sessions idle past the timeout (the least recently used come first)."""
        sessions = self._sessions
        while sessions:
            key, oldest = next(iter(sessions.items()))
            if now - oldest.used <= self._idle:
                return
            self._take(key)

    def _keep(self, key: str, session: _Session) -> None:
        executor = session.executor
        if executor.has_execution_completed or getattr(executor, "generator", None) is None:
            return  # nothing more to run: the execution ended (returned, failed or continued as new)
        self._sessions[key] = session
        self._text += session.size
        while self._sessions and (len(self._sessions) > self._max_sessions or self._text > self._max_text):
            _, dropped = self._sessions.popitem(last=False)
            self._text -= dropped.size

    def _valid(self, s: _Session, owner: object, execution_id: str, prior: list[str], now: float) -> bool:
        if s.owner is not owner or s.texts is not prior or s.execution_id != execution_id:
            return False
        if now - s.used > self._idle or len(prior) < s.cursor:
            return False
        if s.base and prior[s.base - 1] is not s.before:
            return False
        # The events it was fed are stored as fed (the stored form says IsPlayed true).
        return all(h.unplayed(prior[s.base + i]) == text for i, text in enumerate(s.fed))

    @staticmethod
    def _advance(s: _Session, prior: list[str], fresh: list[str]) -> tuple[str, int]:
        """Run the SDK's replay loop on from where the session stopped: the stored events since, then the new ones.

        Returns the state text and the characters of history text processed.
        """
        tail = prior[s.cursor :]
        between = [json.loads(t) for t in tail]
        if any(e.get("EventType") not in _BETWEEN_EPISODES for e in between):
            raise ValueError("an unexpected event between episodes")
        history_event = _history_event_class()
        old = [history_event(**e) for e in between]
        new = [history_event(**json.loads(t)) for t in fresh]
        executor, context = s.executor, s.context
        context.histories.extend(old)
        context.histories.extend(new)
        # TaskOrchestrationExecutor.execute's loop, resumed: events before the last OrchestratorStarted are old.
        executor._is_processing_new_events = False
        for event in old:
            executor.process_event(event)
            if executor.has_execution_completed:
                raise ValueError("the execution completed on old events")
        executor._is_processing_new_events = True
        for event in new:
            executor.process_event(event)
            if executor.has_execution_completed:
                break
        return str(executor.get_orchestrator_state_str()), sum(map(len, tail)) + sum(map(len, fresh))


def _history_event_class() -> Any:
    from azure.durable_functions.models.history.HistoryEvent import HistoryEvent  # noqa: PLC0415 - the SDK's

    return HistoryEvent


def _sdk_parts(handle: Any, context_json: str, decoded: dict[str, Any] | None) -> tuple[Any, Any]:
    """What the SDK's ``handle(context_json)`` builds before it runs: the Orchestrator and the context."""
    from azure.durable_functions.models.DurableOrchestrationContext import (  # noqa: PLC0415
        DurableOrchestrationContext,
    )
    from azure.durable_functions.orchestrator import Orchestrator  # noqa: PLC0415

    if decoded is None:
        context = DurableOrchestrationContext.from_json(context_json)
    else:
        with predecoded(context_json, decoded):
            context = DurableOrchestrationContext.from_json(context_json)
    context._input_expected_type = getattr(handle, "_df_input_type", None)
    return Orchestrator(handle.orchestrator_function), context
