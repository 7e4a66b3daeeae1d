"""WAL checkpoints of the durable store run on a background thread, not inside the engine's commits."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from devhost.durable.checkpoint import BACKSTOP_CHECKPOINT_PAGES, CHECKPOINT_EVERY_COMMITS
from devhost.durable.store import Store
from devhost.durable.store_schema import InstanceRow


def _row(instance_id: str) -> InstanceRow:
    return InstanceRow(
        instance_id, "orch", None, "e1", "Running", "null", None, None, 1.0, 1.0, None, None, None, None, None
    )


def _commit_instances(store: Store, count: int, prefix: str = "i") -> None:
    for i in range(count):
        store.begin()
        store.insert_instance(_row(f"{prefix}{i}"))
        store.append_history(f"{prefix}{i}", 0, ['{"EventType":12}'] * 4)
        store.commit()


def _wait_for_checkpoints(store: Store, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.checkpointer.checkpoints < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"no background checkpoint after {timeout_s}s ({store.checkpointer.checkpoints})")
        time.sleep(0.02)


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "devhost-wal-checkpoint"]


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_engine_connection_leaves_checkpoints_to_the_background_thread(tmp_path: Path, synchronous: str) -> None:
    store = Store(tmp_path / "hub.sqlite3", synchronous=synchronous)
    store.open("hub")
    try:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_CHECKPOINT_PAGES
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == {"NORMAL": 1, "FULL": 2}[synchronous]
        assert len(_checkpoint_threads()) == 1
        _commit_instances(store, CHECKPOINT_EVERY_COMMITS)
        _wait_for_checkpoints(store, 1)
        busy, log_frames, done = store.checkpointer.last_result or (-1, -1, -1)
        assert busy == 0 and log_frames > 0 and done > 0
    finally:
        store.close()
    assert _checkpoint_threads() == []


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_idle_store_is_checkpointed_after_a_few_commits(tmp_path: Path) -> None:
    store = Store(tmp_path / "hub.sqlite3")
    store.open("hub")
    try:
        _commit_instances(store, 3)
        _wait_for_checkpoints(store, 1)
        checkpoints = store.checkpointer.checkpoints
        time.sleep(1.5)  # no commits since: the thread has nothing to do
        assert store.checkpointer.checkpoints == checkpoints
    finally:
        store.close()


def test_committed_rows_are_visible_to_another_connection_across_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "hub.sqlite3"
    store = Store(path)
    store.open("hub")
    _commit_instances(store, 2 * CHECKPOINT_EVERY_COMMITS)
    _wait_for_checkpoints(store, 1)
    _commit_instances(store, 2 * CHECKPOINT_EVERY_COMMITS, prefix="j")
    _wait_for_checkpoints(store, 2)
    # A second connection opened without closing the first sees every committed row (as after kill -9).
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT count(*) FROM instances").fetchone()[0] == 4 * CHECKPOINT_EVERY_COMMITS
        assert other.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        other.close()
        store.close()
