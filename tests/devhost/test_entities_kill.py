"""Entities after ``kill -9``: the host dies inside an entity batch, with operations pending, and starts again.

The counter of tests/apps/entity_counter sends SIGKILL to its own host process when an ``add`` brings it to
the number written in ``$ENTITY_CRASH_FILE``: the user code of that batch has run, nothing of it is
committed. Between the kill and the restart the test reads the SQLite file to see what was committed;
after the restart (crash file removed) the batch runs again and every operation counts exactly once:
state, pending operations and the replies to the calling orchestrations are one transaction.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.devhost.hostproc import APPS_DIR, DevHostProcess

DB_NAME = "durable-EntityCounter.sqlite3"


@pytest.fixture
def crashing(tmp_path: Path) -> Iterator[tuple[DevHostProcess, Path]]:
    crash_file = tmp_path / "crash-at"
    host = DevHostProcess(APPS_DIR / "entity_counter", tmp_path / "data", env={"ENTITY_CRASH_FILE": str(crash_file)})
    host.start()
    try:
        yield host, crash_file
    finally:
        host.stop()


def _died(host: DevHostProcess) -> None:
    """Wait until the host killed itself; reap it."""
    assert host.proc is not None
    deadline = time.monotonic() + 60
    while host.proc.poll() is None:
        assert time.monotonic() < deadline, "the host never reached the crash point"
        time.sleep(0.02)
    assert host.kill() == -9


def _committed(db_path: Path) -> tuple[dict[str, str], dict[str, int], str]:
    """(entity states, pending operations per entity, integrity check) as the kill left the store."""
    db = sqlite3.connect(db_path)
    try:
        states = dict(db.execute("SELECT entity_id, state FROM entities").fetchall())
        pending = dict(db.execute("SELECT entity_id, count(*) FROM entity_ops GROUP BY entity_id").fetchall())
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    return states, pending, check


def _state(host: DevHostProcess, key: str, wanted: int) -> int:
    deadline = time.monotonic() + 60
    value = None
    while time.monotonic() < deadline:
        resp = host.client.get(host.webhook(f"entities/counter/{key}"), params=host.system_code)
        value = resp.json() if resp.status_code == 200 else None
        if value == wanted:
            return wanted
        time.sleep(0.02)
    raise AssertionError(f"counter {key} is {value}, expected {wanted}")


def test_signals_pending_at_kill_count_exactly_once_after_restart(crashing: tuple[DevHostProcess, Path]) -> None:
    host, crash_file = crashing
    total = 60
    crash_file.write_text(str(total))
    for i in range(total):
        try:
            resp = host.client.post(
                host.webhook("entities/counter/sig"), params={**host.system_code, "op": "add"}, json="1"
            )
        except httpx.TransportError:
            assert i == total - 1, "only the last signal can race the crash"  # committed, then the host died
            break
        assert resp.status_code == 202
    _died(host)
    states, pending, check = _committed(host.data_dir / DB_NAME)
    assert check == "ok"
    assert pending.get("@counter@sig", 0) >= 1, "the crashing batch's operations must still be pending"
    assert int(states.get("@counter@sig", "0")) + pending["@counter@sig"] == total  # none lost, none doubled
    crash_file.unlink()
    host.start()
    assert _state(host, "sig", total) == total
    assert _committed(host.data_dir / DB_NAME)[1] == {}


def test_an_orchestration_waiting_on_a_call_completes_after_the_kill(crashing: tuple[DevHostProcess, Path]) -> None:
    host, crash_file = crashing
    crash_file.write_text("1000")
    resp = host.client.post("/api/orchestrators/count_up", json={"key": "orch", "numbers": [400, 600]})
    assert resp.status_code == 202, resp.text
    instance_id = resp.json()["id"]
    _died(host)
    states, pending, check = _committed(host.data_dir / DB_NAME)
    assert check == "ok"
    assert states == {"@counter@orch": "400"}  # the first add and its get were committed, the second add not
    assert pending == {"@counter@orch": 1}
    crash_file.unlink()
    host.start()
    status = host.wait_status(instance_id)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == [400, 1000]
    assert _state(host, "orch", 1000) == 1000
