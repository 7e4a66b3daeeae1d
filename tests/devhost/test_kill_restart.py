"""Restart after ``kill -9``: a real devhost process is SIGKILLed mid-orchestration and started again.

Each test reads the SQLite file between the kill and the restart to learn exactly what was committed
when the process died, then checks after the restart that the instance completes with the right
output, that every activity whose TaskCompleted was committed did not run again, that every one
that was not committed ran again (at-least-once), that the history is intact (contiguous, every
scheduled task completed exactly once, no pending work left) and that ``PRAGMA integrity_check`` is ok.

Activities of tests/apps/kill_restart append ``<key> <pid>`` to ``<dir>/runs.log`` per execution,
so executions before and after the crash are told apart by the process id.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.timeutil import parse_history_time
from tests.devhost.hostproc import APPS_DIR, DevHostProcess

APP = APPS_DIR / "kill_restart"
DB_NAME = "durable-KillRestart.sqlite3"
TERMINAL = {"Completed", "Failed", "Terminated", "Canceled"}


@dataclass
class Crash:
    """One host plus its data and side-effect folders."""

    host: DevHostProcess
    data: Path
    work: Path

    @property
    def db_path(self) -> Path:
        return self.data / DB_NAME

    def start(self, name: str, payload: dict[str, Any]) -> str:
        resp = self.host.client.post(
            self.host.webhook(f"orchestrators/{name}"),
            params=self.host.system_code,
            json={"dir": str(self.work), **payload},
        )
        assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        resp = self.host.client.post(
            self.host.webhook(f"instances/{instance_id}/raiseEvent/{name}"), params=self.host.system_code, json=data
        )
        assert resp.status_code == 202, resp.text

    @property
    def pid(self) -> int:
        """Process id of the running host."""
        assert self.host.proc is not None, "host not running"
        return self.host.proc.pid

    def crash(self) -> int:
        """SIGKILL the host; returns the pid that died."""
        pid = self.pid
        self.host.kill()
        return pid

    def runs(self) -> list[tuple[str, int]]:
        """(key, pid) of every activity execution so far."""
        path = self.work / "runs.log"
        if not path.exists():
            return []
        return [(key, int(pid)) for key, pid in (line.split() for line in path.read_text().splitlines())]

    def release(self) -> None:
        (self.work / "release").touch()


@pytest.fixture
def crash(tmp_path: Path) -> Iterator[Crash]:
    work = tmp_path / "work"
    work.mkdir()
    host = DevHostProcess(APP, tmp_path / "data", grace_s=1.0)
    host.start()
    try:
        yield Crash(host, tmp_path / "data", work)
    finally:
        (work / "release").touch()  # free latched threads so the SIGTERM stop is quick
        host.stop()


# ----- reading the committed state ------------------------------------------------------------


def _connect(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)


def committed_events(db_path: Path, instance_id: str) -> list[dict[str, Any]]:
    """The instance's history exactly as committed in the store (raw events, in order)."""
    with _connect(db_path) as db:
        rows = db.execute("SELECT idx, body FROM history WHERE instance_id=? ORDER BY idx", (instance_id,)).fetchall()
    assert [idx for idx, _ in rows] == list(range(len(rows))), "history positions are not contiguous"
    return [json.loads(body) for _, body in rows]


def integrity_ok(db_path: Path) -> None:
    with _connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def completed_keys(events: list[dict[str, Any]], key_of: Callable[[dict[str, Any]], str]) -> set[str]:
    """Activity keys (derived from the TaskScheduled input) whose TaskCompleted is in ``events``."""
    scheduled = {e["EventId"]: e for e in events if e["EventType"] == h.TASK_SCHEDULED}
    return {
        key_of(json.loads(scheduled[e["TaskScheduledId"]]["Input"]))
        for e in events
        if e["EventType"] == h.TASK_COMPLETED
    }


def check_history(db_path: Path, instance_id: str) -> list[dict[str, Any]]:
    """Structural checks on a completed instance's stored history; returns the events."""
    events = committed_events(db_path, instance_id)
    types = [e["EventType"] for e in events]
    assert types.count(h.EXECUTION_STARTED) == 1 and types[1] == h.EXECUTION_STARTED, types[:3]
    assert types[-2:] == [h.EXECUTION_COMPLETED, h.ORCHESTRATOR_COMPLETED], types[-2:]
    assert types.count(h.ORCHESTRATOR_STARTED) == types.count(h.ORCHESTRATOR_COMPLETED)
    scheduled = [e["EventId"] for e in events if e["EventType"] in (h.TASK_SCHEDULED, h.TIMER_CREATED)]
    assert len(scheduled) == len(set(scheduled)), "a sequence id was scheduled twice"
    done = Counter(
        e.get("TaskScheduledId", e.get("TimerId"))
        for e in events
        if e["EventType"] in (h.TASK_COMPLETED, h.TASK_FAILED, h.TIMER_FIRED)
    )
    assert done == Counter(scheduled), "every scheduled task and timer must complete exactly once"
    assert all(e["EventType"] != h.TASK_FAILED for e in events)
    with _connect(db_path) as db:
        for table in ("activities", "timers", "inbox"):
            left = db.execute(f"SELECT COUNT(*) FROM {table} WHERE instance_id=?", (instance_id,)).fetchone()[0]
            assert left == 0, f"{left} rows left in {table}"
    integrity_ok(db_path)
    return events


def event_copies(db_path: Path, instance_id: str) -> int:
    """How many times an external event is stored: pending in the inbox or consumed into history."""
    with _connect(db_path) as db:
        pending = db.execute("SELECT COUNT(*) FROM inbox WHERE instance_id=?", (instance_id,)).fetchone()[0]
    consumed = sum(e["EventType"] == h.EVENT_RAISED for e in committed_events(db_path, instance_id))
    return int(pending) + consumed


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _step_key(payload: dict[str, Any]) -> str:
    return str(payload["key"])


def _square_key(payload: dict[str, Any]) -> str:
    return f"{payload.get('tag', '')}sq{payload['n']}"


# ----- tests ------------------------------------------------------------------------------------


def test_kill_during_activity_reruns_it_and_completes(crash: Crash) -> None:
    instance_id = crash.start("three_steps", {})
    wait_until(lambda: ("b", crash.pid) in crash.runs(), "activity b")
    old_pid = crash.crash()
    integrity_ok(crash.db_path)
    before = committed_events(crash.db_path, instance_id)
    assert completed_keys(before, _step_key) == {"a"}, "a finished before b started; b was still running"

    crash.release()
    crash.host.start()
    status = crash.host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == ["a:done", "b:done", "c:done"]
    check_history(crash.db_path, instance_id)
    new_pid = crash.pid
    assert sorted(crash.runs()) == sorted([("a", old_pid), ("b", old_pid), ("b", new_pid), ("c", new_pid)])


def test_timer_due_while_down_fires_at_start(crash: Crash) -> None:
    delay_s = 2.0
    instance_id = crash.start("timer_wait", {"delay_s": delay_s})

    def timer_armed() -> bool:
        return any(e["EventType"] == h.TIMER_CREATED for e in committed_events(crash.db_path, instance_id))

    wait_until(timer_armed, "the timer to be committed")
    crash.crash()
    integrity_ok(crash.db_path)
    before = committed_events(crash.db_path, instance_id)
    assert not any(e["EventType"] == h.TIMER_FIRED for e in before), "the machine was too slow: fired before the kill"
    created = next(e for e in before if e["EventType"] == h.TIMER_CREATED)
    due = parse_history_time(created["FireAt"])
    # Stay down until the timer is overdue, so it must fire from the store at start.
    time.sleep(max(0.0, due - time.time()) + 0.3)
    restarted_at = time.time()
    crash.host.start()
    status = crash.host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"]["results"] == ["before:done", "after:done"]
    events = check_history(crash.db_path, instance_id)
    fired = [e for e in events if e["EventType"] == h.TIMER_FIRED]
    assert len(fired) == 1 and fired[0]["FireAt"] == created["FireAt"]
    fired_at = parse_history_time(fired[0]["Timestamp"])
    assert fired_at >= restarted_at > due, "the overdue timer fires after the restart, not before"
    assert Counter(key for key, _ in crash.runs()) == {"before": 1, "after": 1}


def test_kill_during_fan_out_of_100_keeps_every_committed_result(crash: Crash) -> None:
    count, latch_from = 100, 60
    instance_id = crash.start("fan_out", {"count": count, "latch_from": latch_from, "delay_s": 0.02})

    def some_committed() -> bool:
        return len(completed_keys(committed_events(crash.db_path, instance_id), _square_key)) >= 15

    # Kill in the middle of the fast items' completions: some results committed, some in flight.
    wait_until(some_committed, "some fan-out results to be committed")
    old_pid = crash.crash()
    integrity_ok(crash.db_path)
    committed = completed_keys(committed_events(crash.db_path, instance_id), _square_key)
    ran_before = {key for key, pid in crash.runs() if pid == old_pid}
    assert 15 <= len(committed) < latch_from
    assert committed <= ran_before

    crash.release()
    crash.host.start()
    status = crash.host.wait_status(instance_id, timeout_s=60)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == [n * n for n in range(count)]
    events = check_history(crash.db_path, instance_id)
    assert sum(e["EventType"] == h.TASK_COMPLETED for e in events) == count
    new_pid = crash.pid
    after = Counter(key for key, pid in crash.runs() if pid == new_pid)
    every = {f"sq{n}" for n in range(count)}
    # A result committed before the kill is never recomputed; everything else runs exactly once more.
    assert set(after) == every - committed
    assert all(n == 1 for n in after.values())
    assert set(Counter(key for key, pid in crash.runs() if pid == old_pid)) == ran_before


def test_event_raised_then_killed_is_consumed_after_restart(crash: Crash) -> None:
    instance_id = crash.start("approval", {})
    wait_until(lambda: crash.host.wait_status(instance_id, {"Running"}).get("customStatus") == "waiting", "the wait")
    crash.raise_event(instance_id, "Approval", {"approved": True, "by": "ops"})
    old_pid = crash.crash()  # right after the 202: the event is committed, its episode may not be
    integrity_ok(crash.db_path)
    assert event_copies(crash.db_path, instance_id) == 1
    committed = completed_keys(committed_events(crash.db_path, instance_id), _step_key)
    crash.host.start()
    status = crash.host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {"decision": {"approved": True, "by": "ops"}, "results": ["before:done", "after:done"]}
    events = check_history(crash.db_path, instance_id)
    assert sum(e["EventType"] == h.EVENT_RAISED for e in events) == 1
    assert ("before", old_pid) in crash.runs() and "before" in committed
    # 'after' may already have run in the old process in the moment before the kill; it runs again
    # after the restart exactly when its result was not committed.
    after = Counter(pid for key, pid in crash.runs() if key == "after")
    assert after[crash.pid] == (0 if "after" in committed else 1)
    assert after[old_pid] <= 1 and sum(after.values()) >= 1


def test_kill_while_waiting_then_event_after_restart(crash: Crash) -> None:
    instance_id = crash.start("approval", {})
    wait_until(lambda: crash.host.wait_status(instance_id, {"Running"}).get("customStatus") == "waiting", "the wait")
    crash.crash()
    crash.host.start()
    assert crash.host.wait_status(instance_id, {"Running"})["customStatus"] == "waiting"
    crash.raise_event(instance_id, "Approval", "later")
    status = crash.host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {"decision": "later", "results": ["before:done", "after:done"]}
    check_history(crash.db_path, instance_id)
    assert Counter(key for key, _ in crash.runs()) == {"before": 1, "after": 1}


def test_event_buffered_during_activity_survives_kill(crash: Crash) -> None:
    instance_id = crash.start("approval", {"latch": True})
    wait_until(lambda: any(key == "before" for key, _ in crash.runs()), "the latched activity")
    # Raised before the orchestration waits for it: buffered, then the host dies mid-activity.
    crash.raise_event(instance_id, "Approval", {"approved": False})
    crash.crash()
    integrity_ok(crash.db_path)
    assert event_copies(crash.db_path, instance_id) == 1
    crash.release()
    crash.host.start()
    status = crash.host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {"decision": {"approved": False}, "results": ["before:done", "after:done"]}
    events = check_history(crash.db_path, instance_id)
    assert sum(e["EventType"] == h.EVENT_RAISED for e in events) == 1
    assert Counter(key for key, _ in crash.runs()) == {"before": 2, "after": 1}


def test_repeated_kills_at_random_moments_lose_nothing(crash: Crash) -> None:
    """Several jobs, four SIGKILLs at seeded random moments: every result committed before a kill is
    never recomputed, nothing runs twice in one process, and every job ends with the right output."""
    rng = random.Random(20261122)
    jobs: dict[str, tuple[str, dict[str, Any]]] = {
        **{f"fan{i}": ("fan_out", {"count": 40, "latch_from": 40, "delay_s": 0.05}) for i in range(3)},
        **{f"seq{i}": ("square_chain", {"count": 20, "delay_s": 0.05}) for i in range(3)},
    }
    ids = {tag: crash.start(name, {**payload, "tag": f"{tag}:"}) for tag, (name, payload) in jobs.items()}
    committed_by_pid: dict[int, set[str]] = {}
    for _ in range(4):
        time.sleep(rng.uniform(0.1, 0.6))
        pid = crash.crash()
        integrity_ok(crash.db_path)
        committed_by_pid[pid] = set().union(
            *(completed_keys(committed_events(crash.db_path, i), _square_key) for i in ids.values())
        )
        crash.host.start()
    for tag, instance_id in ids.items():
        status = crash.host.wait_status(instance_id, timeout_s=60)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == [n * n for n in range(jobs[tag][1]["count"])]
        check_history(crash.db_path, instance_id)

    runs = crash.runs()
    pids = list(dict.fromkeys(pid for _, pid in runs))  # processes in the order they ran
    per_process = Counter(runs)
    assert max(per_process.values()) == 1, "an activity ran twice in one process"
    every = {f"{tag}:sq{n}" for tag, (_, payload) in jobs.items() for n in range(payload["count"])}
    assert {key for key, _ in runs} == every
    for pid, committed in committed_by_pid.items():
        later = set(pids[pids.index(pid) + 1 :]) if pid in pids else set()
        rerun = {key for key, p in runs if p in later} & committed
        assert not rerun, f"results committed before kill of {pid} were recomputed: {sorted(rerun)[:5]}"
