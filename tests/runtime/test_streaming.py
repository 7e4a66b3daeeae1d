"""The partial output side channel: the SQLite store, the delta buffer, the view's use of it."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from api.view import build_view
from shared.runtime.settings import Settings
from shared.runtime.streaming.local import (
    DONE_TTL_S,
    DeltaBuffer,
    PartialOutput,
    PartialSlice,
    SqlitePartialOutputStore,
    build_store,
    get_store,
    reset_stores,
)


@pytest.fixture
def store(tmp_path: Path) -> SqlitePartialOutputStore:
    return SqlitePartialOutputStore(tmp_path / "p" / "partial.sqlite3")


def test_append_read_drop(store: SqlitePartialOutputStore) -> None:
    assert store.read("j", "s3") is None
    store.append("j", "s3", 1, "Hello ")
    store.append("j", "s3", 1, "world")
    got = store.read("j", "s3")
    assert got is not None and (got.text, got.attempt, got.complete, got.chars) == ("Hello world", 1, False, 11)
    store.append("j", "s3", 1, ".", complete=True)
    assert store.read("j", "s3") == PartialOutput("Hello world.", 1, store.read("j", "s3").updated_at, True)  # type: ignore[union-attr]
    # Another job, another step: separate entries.
    store.append("j2", "s3", 1, "other")
    store.append("j", "s4", 1, "x")
    assert store.read("j", "s3").text == "Hello world."  # type: ignore[union-attr]
    store.drop("j", "s3")
    assert store.read("j", "s3") is None and store.read("j2", "s3") is not None


def test_a_new_attempt_replaces_the_text_of_the_old_one(store: SqlitePartialOutputStore) -> None:
    store.append("j", "s", 1, "first try, cut off")
    store.append("j", "s", 2, "Second")
    store.append("j", "s", 2, " try")
    got = store.read("j", "s")
    assert got is not None and (got.text, got.attempt) == ("Second try", 2)


def test_prune_removes_finished_entries_after_the_ttl_and_orphans_after_a_day(
    store: SqlitePartialOutputStore,
) -> None:
    store.append("j", "done", 1, "all", complete=True)
    store.append("j", "running", 1, "some")
    assert store.prune() == 0
    assert store.prune(now_s=time.time() + DONE_TTL_S + 1) == 1
    assert store.read("j", "done") is None and store.read("j", "running") is not None
    assert store.prune(now_s=time.time() + 86_400 + 1) == 1
    assert store.read("j", "running") is None


def _writer(path: str, job: str, count: int) -> None:
    s = SqlitePartialOutputStore(Path(path))
    for i in range(count):
        s.append(job, "s", 1, f"{i},")


@pytest.mark.slow  # waits out a real timeout or lock: `make test` runs it, `make test-fast` does not
def test_concurrent_writers_in_several_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), f"job{n}", 60)) for n in range(3)]
    for p in procs:
        p.start()
    _writer(str(path), "job-main", 60)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = SqlitePartialOutputStore(path)
    for job in ("job0", "job1", "job2", "job-main"):
        got = store.read(job, "s")
        assert got is not None and got.text == "".join(f"{i}," for i in range(60))
    assert store.path.with_name("shared.sqlite3-wal").exists() or _journal_mode(path) == "wal"


def _journal_mode(path: Path) -> str:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingStore(SqlitePartialOutputStore):
    """The real store, counting appends."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appends: list[str] = []

    def append(self, job_id: str, step_id: str, attempt: int, text: str, *, complete: bool = False) -> None:
        self.appends.append(text)
        super().append(job_id, step_id, attempt, text, complete=complete)


def test_buffer_flushes_by_interval_or_size_never_per_token(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "c.sqlite3")
    clock = FakeClock()
    buf = DeltaBuffer(store, "j", "s", 1, flush_ms=250, flush_chars=50, clock=clock)
    for word in ["The ", "answer ", "is ", "42 "]:
        buf(word)
        clock.now += 0.01
    assert store.appends == []  # 40 ms, 18 chars: nothing written yet
    clock.now += 0.25
    buf("and ")
    assert store.appends == ["The answer is 42 and "]
    buf("x" * 60)  # enough pending text flushes without waiting for the interval
    assert len(store.appends) == 2
    buf("tail.")
    assert len(store.appends) == 2
    buf.finish(succeeded=True)
    got = store.read("j", "s")
    assert got is not None and got.complete and got.text == "The answer is 42 and " + "x" * 60 + "tail."
    assert buf.chars == got.chars


def test_a_failed_attempt_drops_its_entry(store: SqlitePartialOutputStore) -> None:
    clock = FakeClock()
    buf = DeltaBuffer(store, "j", "s", 1, clock=clock)
    buf("partial ")
    clock.now += 1
    buf("text")
    assert store.read("j", "s") is not None
    buf.finish(succeeded=False)
    assert store.read("j", "s") is None


class BrokenStore:
    """A store whose every call fails."""

    calls = 0

    def append(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise OSError("disk full")

    def read(self, job_id: str, step_id: str) -> PartialOutput | None:
        raise OSError("disk full")

    def read_from(self, job_id: str, step_id: str, attempt: int, offset: int) -> PartialSlice | None:
        raise OSError("disk full")

    def drop(self, job_id: str, step_id: str) -> None:
        raise OSError("disk full")


def test_store_failures_switch_the_buffer_off_without_raising() -> None:
    broken = BrokenStore()
    clock = FakeClock()
    buf = DeltaBuffer(broken, "j", "s", 1, clock=clock)
    for _ in range(5):
        clock.now += 1
        buf("word ")
    buf.finish(succeeded=True)
    assert broken.calls == 1 and buf.broken


def test_store_choice_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AzureWebJobsStorage__blobServiceUri", raising=False)
    local = Settings(partial_output_path=tmp_path / "x.sqlite3")
    assert isinstance(build_store(local), SqlitePartialOutputStore)
    assert build_store(Settings(partial_output_store="off")) is None
    reset_stores()
    try:
        # Unbuildable stores disable the preview instead of failing: a path under a file.
        (tmp_path / "file").write_text("")
        assert get_store(Settings(partial_output_path=tmp_path / "file" / "p.sqlite3")) is None
    finally:
        reset_stores()


def _status(step_state: str, attempts: int = 1, runtime: str = "Running") -> dict[str, Any]:
    return {
        "instanceId": "job-1",
        "runtimeStatus": runtime,
        "customStatus": {
            "status": "running",
            "step_index": 0,
            "steps": [
                {"id": "s1", "kind": "generate_response", "title": "Answer", "state": step_state, "attempts": attempts}
            ],
        },
        "historyEvents": [{"EventType": "ExecutionStarted", "Timestamp": "2026-01-01T00:00:00Z"}],
    }


def test_view_shows_partial_output_of_the_running_step_outside_the_log_cursor(
    store: SqlitePartialOutputStore,
) -> None:
    store.append("job-1", "s1", 1, "Returns in the West")
    view = build_view(_status("running"), {}, partials=store.read)
    step = view["steps"][0]
    assert step["partial_output"]["text"] == "Returns in the West" and step["partial_output"]["chars"] == 19
    assert view["log"]["live"] == [
        {
            "step_id": "s1",
            "time": step["partial_output"]["updated_at"],
            "message": "s1 generate_response: streaming, 19 chars so far",
        }
    ]
    assert [e["seq"] for e in view["log"]["entries"]] == [0] and view["log"]["next_cursor"] == 1
    # A stale attempt's text, a finished step, or a finished job: no preview.
    assert "partial_output" not in build_view(_status("running", attempts=2), {}, partials=store.read)["steps"][0]
    assert "partial_output" not in build_view(_status("succeeded"), {}, partials=store.read)["steps"][0]
    ended = build_view(_status("running", runtime="Terminated"), {}, partials=store.read)
    assert "partial_output" not in ended["steps"][0] and ended["log"]["live"] == []


def test_view_survives_an_unreadable_store() -> None:
    view = build_view(_status("running"), {}, partials=BrokenStore().read)
    assert "partial_output" not in view["steps"][0] and view["log"]["live"] == []
