"""Extended sessions give, episode by episode, the very state JSON a full replay gives (devhost.durable.sessions).

Every recorded history in tests/replay/histories (devhost job runs of each mode: plan-and-execute, approvals,
retries, workflows with sub-orchestrations, agent, team, hybrid, fork) is cut into its episodes and run twice:
through the SDK handle over the whole history (what devhost does without sessions) and through one
``OrchestratorSessions`` that keeps the orchestrator alive between episodes. The state texts must be equal
byte for byte, and the session path must really have run incrementally.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.accel import install_sdk_accelerations
from devhost.durable.engine import Engine
from devhost.durable.replay import load_fixture, orchestrator_handles
from devhost.durable.sessions import OrchestratorSessions, sdk_supported, supports
from devhost.functions.loader import read_host_config
from devhost.functions.model import AppLoadError
from tests.devhost.conftest import BASIC_APP, EngineRunner, complete, event_input, sdk_input, until

REPO_ROOT = Path(__file__).resolve().parents[2]
HISTORIES = sorted((REPO_ROOT / "tests" / "replay" / "histories").glob("*.json"))
# Events a host appends after an episode ran (its decisions); the rest of an episode is what it was fed.
DECISIONS = {1, 2, 4, 7, 10, 13, 14}


@pytest.fixture(scope="module")
def handles() -> dict[str, Callable[[str], str]]:
    install_sdk_accelerations()  # as devhost runs the SDK
    return orchestrator_handles(REPO_ROOT)  # the app's orchestrators, loaded as devhost loads them


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
        context = functools.partial(_context, texts, fed, fixture)
        full = _outcome(lambda: handle(context()))  # noqa: B023 - called at once
        ours = _outcome(
            lambda: sessions.episode(
                fixture.instance_id,
                owner,
                "exec",
                handle,
                texts,
                fed,  # noqa: B023 - called at once
                lambda: (context(), None),  # noqa: B023
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


def test_the_lru_is_bounded_in_sessions_and_text(handles: dict[str, Callable[[str], str]]) -> None:
    fixture = load_fixture(next(p for p in HISTORIES if p.stem == "completed"))
    handle = handles[fixture.orchestrator]
    fed = [h.unplayed(t) for t in episodes(fixture.history)[0][0]]
    sessions = OrchestratorSessions(max_sessions=3)
    for i in range(5):
        sessions.episode(f"i{i}", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    assert len(sessions) == 3
    sessions = OrchestratorSessions(max_text=sum(map(len, fed)) * 2)
    for i in range(5):
        sessions.episode(f"i{i}", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    assert len(sessions) == 2
    sessions.forget("i4")
    assert len(sessions) == 1
    # Idle sessions end at the next episode of any instance.
    now = [0.0]
    sessions = OrchestratorSessions(idle_timeout_s=30, clock=lambda: now[0])
    sessions.episode("a", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    now[0] = 31.0
    sessions.episode("b", object(), "exec", handle, [], fed, lambda: (_context([], fed, fixture), None))
    assert len(sessions) == 1


def _app_with_sessions(tmp: Path, enabled: bool) -> Path:
    """A copy of the durable_basic test app whose host.json sets extendedSessionsEnabled."""
    app = tmp / ("app_on" if enabled else "app_off")
    shutil.copytree(BASIC_APP, app, ignore=shutil.ignore_patterns("__pycache__", ".devhost"))
    host_json = json.loads((app / "host.json").read_text(encoding="utf-8"))
    host_json["extensions"]["durableTask"]["extendedSessionsEnabled"] = enabled
    (app / "host.json").write_text(json.dumps(host_json), encoding="utf-8")
    return app


def _shape(status: dict[str, Any]) -> list[str]:
    """A history's events, sorted, without times, ids and episode marks (parallel work ends in any order)."""
    events = [
        e for e in status["historyEvents"] if e["EventType"] not in ("OrchestratorStarted", "OrchestratorCompleted")
    ]
    return sorted(json.dumps([e["EventType"], e.get("Name"), e.get("Result"), e.get("Input")]) for e in events)


def test_devhost_jobs_with_sessions_end_as_without(run_engine: EngineRunner, tmp_path: Path) -> None:
    """Chains, fan-out, retries, sub-orchestrations, events, status, continue-as-new: same outputs and histories."""
    run = ["on"]

    async def jobs(engine: Engine) -> tuple[list[Any], int]:
        key = f"{tmp_path}-{run[0]}"  # flaky counts attempts per key in this process: a fresh key per run
        out = []
        ids = [
            await engine.start_instance("chain", "c1", None),
            await engine.start_instance("fan_out", "f1", sdk_input(6)),
            await engine.start_instance("retry_fan", "r1", sdk_input({"width": 3, "key": key})),
            await engine.start_instance(
                "parent_orch", "p1", sdk_input({"attempts": 3, "key": key + "p", "fail_times": 1})
            ),
            await engine.start_instance("counter_orch", "n1", sdk_input({"n": 0, "limit": 3})),
        ]
        sid = await engine.start_instance("status_orch", "s1", sdk_input("abc"))
        await until(engine, sid, lambda s: s["runtimeStatus"] == "Running")
        await engine.raise_event(sid, "go", event_input("yes"))
        eid = await engine.start_instance("event_orch", "e1", None)
        await until(engine, eid, lambda s: s["runtimeStatus"] == "Running")
        await engine.raise_event(eid, "first", event_input(1))
        await until(engine, eid, lambda s: sum(e["EventType"] == "EventRaised" for e in s["historyEvents"]) == 1)
        await engine.raise_event(eid, "second", event_input(2))
        for iid in [*ids, sid, eid]:
            await complete(engine, iid)
            status = await engine.get_status(iid, show_history=True, show_history_output=True)
            assert status is not None
            row = [iid, status["runtimeStatus"], status["output"], status["customStatus"], _shape(status)]
            # The run's key and generated ids (a default sub-orchestration id is made of the execution id) differ.
            out.append(json.loads(re.sub("[0-9a-f]{32}", "ID", json.dumps(row).replace(key, "KEY"))))
        sessions = engine.episodes.sessions
        return out, (sessions.incremental if sessions is not None else 0)

    with_sessions, incremental = run_engine(jobs, app_dir=_app_with_sessions(tmp_path, True), data_dir=tmp_path / "on")
    run[0] = "off"
    without, none = run_engine(jobs, app_dir=_app_with_sessions(tmp_path, False), data_dir=tmp_path / "off")
    assert none == 0
    assert incremental >= 20  # most episodes ran on a live orchestrator
    assert [row[:4] for row in with_sessions] == [row[:4] for row in without]
    assert all(row[1] == "Completed" for row in with_sessions)
    assert [row[4] for row in with_sessions] == [row[4] for row in without]


@pytest.mark.parametrize(
    ("durable", "enabled", "idle"),
    [
        ({}, False, 30),
        ({"extendedSessionsEnabled": True, "extendedSessionIdleTimeoutInSeconds": 5}, True, 5),
        ({"extendedSessionsEnabled": "true"}, True, 30),
        ({"extendedSessionsEnabled": "False"}, False, 30),
    ],
)
def test_host_json_sets_sessions_as_the_host_reads_it(
    tmp_path: Path, durable: dict[str, Any], enabled: bool, idle: int
) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"version": "2.0", "extensions": {"durableTask": durable}}))
    host = read_host_config(tmp_path)
    assert (host.extended_sessions, host.extended_session_idle_timeout_s) == (enabled, idle)


@pytest.mark.parametrize("durable", [{"extendedSessionsEnabled": "yes"}, {"extendedSessionIdleTimeoutInSeconds": 0}])
def test_a_bad_sessions_setting_is_named(tmp_path: Path, durable: dict[str, Any]) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"version": "2.0", "extensions": {"durableTask": durable}}))
    with pytest.raises(AppLoadError, match=f"extensions.durableTask.{next(iter(durable))}"):
        read_host_config(tmp_path)
