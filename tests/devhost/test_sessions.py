"""Extended sessions give, episode by episode, the very state JSON a full replay gives (devhost.durable.sessions).

Every recorded history in tests/replay/histories (devhost job runs of each mode: plan-and-execute, approvals,
retries, workflows with sub-orchestrations, agent, team, hybrid, fork) is cut into its episodes and run twice:
through the SDK handle over the whole history (what devhost does without sessions) and through one
``OrchestratorSessions`` that keeps the orchestrator alive between episodes. The state texts must be equal
byte for byte, and the session path must really have run incrementally.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.accel import install_sdk_accelerations
from devhost.durable.replay import load_fixture
from devhost.durable.sessions import OrchestratorSessions, sdk_supported, supports

HISTORIES = sorted((Path(__file__).parents[1] / "replay" / "histories").glob("*.json"))
# Events a host appends after an episode ran (its decisions); the rest of an episode is what it was fed.
DECISIONS = {1, 2, 4, 7, 10, 13, 14}


@pytest.fixture(scope="module")
def handles() -> dict[str, Callable[[str], str]]:
    install_sdk_accelerations()  # as devhost runs the SDK
    import function_app

    functions = {fn.get_function_name(): fn for fn in function_app.app.get_functions()}
    return {name: functions[name].get_user_function() for name in ("job_orchestrator", "workflow_part")}


def _ordered(event: dict[str, Any]) -> dict[str, Any]:
    """The event with devhost's key order (EventType, EventId, IsPlayed, Timestamp first), played."""
    rest = {k: v for k, v in event.items() if k not in ("EventType", "EventId", "IsPlayed", "Timestamp")}
    return h.event(event["EventType"], event["Timestamp"], event["EventId"], **rest)


def episodes(history: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    """(fed events, decision events) per episode, as stored texts; fed ones are what the SDK got new."""
    starts = [i for i, e in enumerate(history) if e["EventType"] == 12] + [len(history)]
    out = []
    for a, b in zip(starts, starts[1:], strict=False):
        texts = [h.render(_ordered(e)) for e in history[a:b]]
        n = 1
        while n < len(texts) and history[a + n]["EventType"] not in DECISIONS:
            n += 1
        out.append((texts[:n], texts[n:]))
    return out


def _outcome(run: Callable[[], str]) -> str:
    """The state text, or the exception text the host reads it from."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - an orchestrator's failure carries its state in the message
        return f"raised: {exc}"


def _context(texts: list[str], fed: list[str], fixture: Any) -> str:
    history = ",".join(texts + fed)
    return json.dumps(
        {
            "history": [],
            "input": json.loads(fixture.input) if fixture.input is not None else None,
            "instanceId": fixture.instance_id,
            "isReplaying": bool(texts),
            "parentInstanceId": fixture.parent_instance_id,
            "upperSchemaVersion": 1,
            "upperSchemaVersionNew": 2,
        },
        separators=(",", ":"),
    ).replace('"history":[]', '"history":[' + history + "]", 1)


def test_the_installed_sdk_is_one_sessions_were_checked_against(handles: dict[str, Callable[[str], str]]) -> None:
    assert sdk_supported()
    assert all(supports(handle) for handle in handles.values())
    assert not supports(lambda text: text)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_every_episode_of_a_recorded_job_is_byte_for_byte_a_full_replay(
    path: Path, handles: dict[str, Callable[[str], str]]
) -> None:
    fixture = load_fixture(path)
    handle = handles[fixture.orchestrator]
    sessions = OrchestratorSessions()
    owner = object()
    texts: list[str] = []
    cuts = episodes(fixture.history)
    compared = 0
    for fed_stored, decided in cuts:
        fed = [h.unplayed(t) for t in fed_stored]
        full = _outcome(lambda: handle(_context(texts, fed, fixture)))  # noqa: B023 - called at once
        ours = _outcome(
            lambda: sessions.episode(
                fixture.instance_id,
                owner,
                "exec",
                handle,
                texts,
                fed,
                lambda: (_context(texts, fed, fixture), None),  # noqa: B023
            )
        )
        assert ours == full, f"episode {compared} of {path.stem}"
        compared += 1
        texts.extend(fed_stored + decided)
    assert compared == len(cuts) >= 3
    # Only the first episode replayed in full; every later one ran on the live orchestrator.
    assert sessions.full == 1
    assert sessions.incremental == len(cuts) - 1


def test_a_changed_history_replays_in_full(handles: dict[str, Callable[[str], str]]) -> None:
    fixture = load_fixture(next(p for p in HISTORIES if p.stem == "completed"))
    handle = handles[fixture.orchestrator]
    cuts = episodes(fixture.history)
    owner = object()

    def run(sessions: OrchestratorSessions, texts: list[str], k: int, key_owner: object = owner) -> str:
        fed = [h.unplayed(t) for t in cuts[k][0]]
        return sessions.episode(
            "i", key_owner, "exec", handle, texts, fed, lambda: (_context(texts, fed, fixture), None)
        )

    def after_two(sessions: OrchestratorSessions) -> list[str]:
        texts: list[str] = []
        for k in range(2):
            run(sessions, texts, k)
            texts.extend(cuts[k][0] + cuts[k][1])
        return texts

    # A reloaded history (a new list, as after a restart, a store fault or a rewind): full replay.
    sessions = OrchestratorSessions()
    texts = after_two(sessions)
    run(sessions, list(texts), 2)
    assert (sessions.full, sessions.incremental) == (2, 1)
    # Another instance object (reloaded): full replay.
    sessions = OrchestratorSessions()
    texts = after_two(sessions)
    run(sessions, texts, 2, key_owner=object())
    assert (sessions.full, sessions.incremental) == (2, 1)
    # The last episode's events not stored (its commit failed): full replay.
    sessions = OrchestratorSessions()
    texts = after_two(sessions)
    del texts[-len(cuts[1][0]) - len(cuts[1][1]) :]
    run(sessions, texts, 1)
    assert (sessions.full, sessions.incremental) == (2, 1)
    # An event of an unexpected kind between episodes: full replay, the same state.
    sessions = OrchestratorSessions()
    texts = after_two(sessions)
    texts.append(h.render(h.event(19, "2026-11-24T01:10:54.000000Z")))  # ExecutionSuspended
    fed = [h.unplayed(t) for t in cuts[2][0]]
    assert run(sessions, texts, 2) == handle(_context(texts, fed, fixture))
    assert (sessions.full, sessions.incremental) == (2, 1)
    # Idle past the timeout: full replay.
    now = [0.0]
    sessions = OrchestratorSessions(idle_timeout_s=30, clock=lambda: now[0])
    texts = after_two(sessions)
    now[0] = 31.0
    run(sessions, texts, 2)
    assert (sessions.full, sessions.incremental) == (2, 1)


def test_the_lru_is_bounded_in_sessions_and_events(handles: dict[str, Callable[[str], str]]) -> None:
    fixture = load_fixture(next(p for p in HISTORIES if p.stem == "completed"))
    handle = handles[fixture.orchestrator]
    fed = [h.unplayed(t) for t in episodes(fixture.history)[0][0]]
    sessions = OrchestratorSessions(max_sessions=3)
    for i in range(5):
        sessions.episode(f"i{i}", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    assert len(sessions) == 3
    sessions = OrchestratorSessions(max_events=len(fed) * 2)
    for i in range(5):
        sessions.episode(f"i{i}", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    assert len(sessions) == 2
    sessions.forget("i4")
    assert len(sessions) == 1
