"""A durable store that cannot write (disk full), then heals; damaged stores refused at start.

The disk filling up is simulated two ways: SQLite's page limit (``PRAGMA max_page_count`` on the
engine's own connection, always available) and, where this process may mount one, a small tmpfs
that a filler file fills for real (the host runs as a subprocess there).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import devhost.durable.store as store_module
import devhost.durable.store_schema as store_schema
from devhost.durable.engine import Engine, StoreUnavailable
from devhost.durable.store import Store
from devhost.durable.store_schema import SCHEMA_VERSION, StoreDamaged, StoreFault
from devhost.functions.loader import load_app
from tests.devhost.conftest import BASIC_APP, EngineRunner, complete
from tests.devhost.hostproc import APPS_DIR, DEFAULT_KEYS, REPO_ROOT, DevHostProcess

NO_LIMIT = 1073741823  # SQLite's default max_page_count
EXPECTED = ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


def _limit_pages(engine: Engine, extra: int) -> None:
    """Let the store grow by ``extra`` pages at most: the disk is (nearly) full."""
    db = engine.core.store.db
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    db.execute(f"PRAGMA max_page_count={pages + extra}")


def _free_space(engine: Engine) -> None:
    engine.core.store.db.execute(f"PRAGMA max_page_count={NO_LIMIT}")


async def _submit_with_retry(engine: Engine, faults_seen: list[str], wait_s: float = 60.0) -> str:
    """What a client does: submit; on 503 (StoreUnavailable) wait and submit again."""
    for _ in range(int(wait_s / 0.02)):
        try:
            return await engine.start_instance("chain", None, None)
        except StoreUnavailable as exc:
            assert exc.status_code == 503 and exc.code == "STORE_UNAVAILABLE"
            faults_seen.append(str(exc))
            await asyncio.sleep(0.02)
    raise AssertionError("the store never accepted the submit again")


async def _wait_healed(engine: Engine, wait_s: float = 30.0) -> None:
    for _ in range(int(wait_s / 0.01)):
        if engine.store_fault is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the engine never healed: {engine.store_fault}")


def _instance_ids(db_path: Path) -> list[str]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        return [r[0] for r in db.execute("SELECT instance_id FROM instances")]


def test_disk_full_under_load_then_freed_loses_nothing_and_duplicates_nothing(
    run_engine: EngineRunner, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    accepted: list[str] = []
    faults_seen: list[str] = []
    reported: list[str] = []

    async def body(engine: Engine) -> None:
        accepted.extend([await engine.start_instance("chain", None, None) for _ in range(20)])
        _limit_pages(engine, 2)
        # Load while the disk is full: clients keep submitting (retrying on 503), work keeps arriving.
        submits = [asyncio.create_task(_submit_with_retry(engine, faults_seen)) for _ in range(30)]
        for _ in range(3000):
            if engine.store_fault is not None:
                break
            await asyncio.sleep(0.01)
        assert engine.store_fault is not None, "the full store was never reported"
        reported.append(engine.store_fault)
        with pytest.raises(StoreUnavailable):
            await engine.start_instance("chain", None, None)
        await asyncio.sleep(0.3)  # several failed heal probes while the disk stays full
        assert engine.store_fault is not None
        _free_space(engine)
        accepted.extend(await asyncio.gather(*submits))
        await _wait_healed(engine)
        for iid in accepted:
            status = await complete(engine, iid, wait_s=60)
            assert status["runtimeStatus"] == "Completed" and status["output"] == EXPECTED, status
        assert engine.store_faults >= 1

    run_engine(body, data_dir=data)
    assert faults_seen, "no submit was refused while the store was full"
    assert "full" in reported[0].lower() or "rolled" in reported[0].lower(), reported
    # Exactly one instance per accepted submit: a refused submit left nothing behind.
    assert len(set(accepted)) == 50
    (db_path,) = data.glob("durable-*.sqlite3")
    assert sorted(_instance_ids(db_path)) == sorted(accepted)

    # Nothing of the fault survives a restart either: every instance is still there and completed.
    async def again(engine: Engine) -> None:
        for iid in accepted:
            status = await engine.get_status(iid)
            assert status is not None and status["runtimeStatus"] == "Completed"

    run_engine(again, data_dir=data)


def test_management_operations_are_one_transaction_each(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("event_orch", None, None)
        for _ in range(500):
            status = await engine.get_status(iid)
            if status and status["runtimeStatus"] == "Running":
                break
            await asyncio.sleep(0.01)
        await engine.wait_for_idle()
        _limit_pages(engine, 0)
        big = '"' + "x" * 200_000 + '"'  # needs new pages: cannot be written while the disk is full
        with pytest.raises(StoreUnavailable):
            await engine.raise_event(iid, "approval", big)
        assert engine.store_fault is not None
        _free_space(engine)
        await _wait_healed(engine)
        _limit_pages(engine, 0)
        with pytest.raises(StoreUnavailable):  # the start itself fails: no instance, in memory or on disk
            await engine.start_instance("chain", "fixed-id", big)
        # While faulty every operation is refused before it changes anything, in memory or on disk.
        with pytest.raises(StoreUnavailable):
            await engine.terminate(iid, "stop")
        with pytest.raises(StoreUnavailable):
            await engine.start_instance("chain", "fixed-id", None)
        _free_space(engine)
        await _wait_healed(engine)
        status = await engine.get_status(iid, show_history=True)
        assert status is not None and status["runtimeStatus"] == "Running", status
        assert await engine.get_status("fixed-id") is None
        await engine.terminate(iid, "stop")
        assert (await complete(engine, iid))["runtimeStatus"] == "Terminated"
        # The refused start left nothing behind: the same id starts now and runs normally.
        assert await engine.start_instance("chain", "fixed-id", None) == "fixed-id"
        assert (await complete(engine, "fixed-id"))["output"] == EXPECTED

    run_engine(body)


def test_commit_after_sqlite_rolled_back_by_itself_is_a_fault(tmp_path: Path) -> None:
    store = Store(tmp_path / "hub.sqlite3")
    store.open("Hub")
    try:
        store.begin()
        store.db.execute("INSERT INTO meta(key, value) VALUES ('a', '1')")
        store.db.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL / SQLITE_IOERR
        assert not store.in_tx
        store.db.execute("INSERT INTO meta(key, value) VALUES ('b', '2')")  # autocommits: not ours
        with pytest.raises(StoreFault):
            store.commit()
        store.begin()
        store.db.execute("INSERT INTO meta(key, value) VALUES ('c', '3')")
        store.commit()
        keys = {r[0] for r in store.db.execute("SELECT key FROM meta")}
        assert "a" not in keys and "c" in keys
    finally:
        store.close()


# ----------------------------------------------------------------------------- damaged stores at start
def _made_store(tmp_path: Path, rows: int = 0) -> Store:
    store = Store(tmp_path / "hub.sqlite3")
    store.open("Hub")
    if rows:
        store.begin()
        store.db.executemany(
            "INSERT INTO history (instance_id, idx, body) VALUES (?,?,?)",
            [(f"i{n}", 0, os.urandom(200).hex()) for n in range(rows)],
        )
        store.commit()
    store.close()
    return store


def test_zero_byte_store_in_a_used_folder_is_refused_unless_reset(tmp_path: Path) -> None:
    store = _made_store(tmp_path)
    store.path.write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreDamaged, match=r"empty \(0 bytes\).*--reset-store"):
        Store(store.path).open("Hub")
    store.path.unlink()
    with pytest.raises(StoreDamaged, match="is missing"):
        Store(store.path).open("Hub")
    fresh = Store(store.path)
    fresh.open("Hub", reset=True)
    fresh.close()
    again = Store(store.path)  # the reset store is a store like any other from now on
    again.open("Hub")
    again.close()


def test_new_folder_starts_an_empty_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "new" / "hub.sqlite3")
    store.open("Hub")
    store.close()
    assert store.used_marker.exists()


def test_garbage_in_the_middle_is_refused(tmp_path: Path) -> None:
    store = _made_store(tmp_path, rows=2000)
    size = store.path.stat().st_size
    assert size > 64 * 4096
    with store.path.open("r+b") as f:
        f.seek((size // 4096 // 2) * 4096)
        f.write(os.urandom(4096 * 4))
    with pytest.raises(StoreDamaged, match="damaged"):
        Store(store.path).open("Hub")
    # The lock is released on refusal: a fixed (reset) store opens in the same process.
    fresh = Store(store.path)
    fresh.open("Hub", reset=True)
    fresh.close()


def test_garbage_header_is_refused(tmp_path: Path) -> None:
    store = _made_store(tmp_path, rows=10)
    with store.path.open("r+b") as f:
        f.write(os.urandom(100))
    with pytest.raises(StoreDamaged):
        Store(store.path).open("Hub")


def _set_schema_version(store: Store, value: str) -> None:
    db = sqlite3.connect(store.path)
    with db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (value,))
    db.close()


def test_a_store_written_by_a_newer_devhost_is_refused_naming_both_versions(tmp_path: Path) -> None:
    store = _made_store(tmp_path, rows=3)
    _set_schema_version(store, str(SCHEMA_VERSION + 1))
    with pytest.raises(
        StoreDamaged, match=rf"schema version {SCHEMA_VERSION + 1}.*reads version {SCHEMA_VERSION}"
    ) as info:
        Store(store.path).open("Hub")
    assert "a newer devhost wrote it" in str(info.value) and "--reset-store" in str(info.value)
    _set_schema_version(store, "banana")
    with pytest.raises(StoreDamaged, match="schema version banana"):
        Store(store.path).open("Hub")


def test_an_older_store_is_migrated_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _made_store(tmp_path, rows=3)
    _set_schema_version(store, "0")
    seen: list[int] = []

    def from_zero(db: sqlite3.Connection) -> int:
        seen.append(0)
        return 1

    monkeypatch.setattr(store_module, "MIGRATIONS", {**store_schema.MIGRATIONS, 0: from_zero})
    again = Store(store.path)
    again.open("Hub")
    version = again.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    again.close()
    assert seen == [0] and version == str(SCHEMA_VERSION)
    monkeypatch.setattr(store_module, "MIGRATIONS", {})
    _set_schema_version(store, "0")
    with pytest.raises(StoreDamaged, match="no migration exists"):
        Store(store.path).open("Hub")


def test_serve_refuses_a_damaged_store_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine_dir = data

    async def make() -> Path:
        engine = Engine(load_app(BASIC_APP), engine_dir)
        await engine.start()
        await engine.stop()
        return engine.db_path

    db_path = asyncio.run(make())
    db_path.write_bytes(b"")
    cmd = [sys.executable, "-m", "devhost", "serve", "--app", str(BASIC_APP), "--data", str(data), "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "empty (0 bytes)" in errors[0] and "--reset-store" in errors[0], done.stderr
    assert db_path.stat().st_size == 0  # refused, not silently recreated


# ----------------------------------------------------------------------------- a real full disk (tmpfs)
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs mounted for this test (skipped where this process may not mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(path: Path) -> None:
    """Write until the file system is full (unbuffered: nothing is left to flush, and fail, at close)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for size in (65536, 4096, 512):  # then smaller pieces, so the last free blocks are taken too
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while os.write(fd, chunk) > 0:
                    pass
    finally:
        os.close(fd)


def test_real_disk_full_host_reports_refuses_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    # A reserve taken before the host writes anything: under load the host's own writes (its WAL checkpoints
    # lag) may fill the disk before _fill runs, and freeing the reserve with the filler gives space back anyway.
    filler, reserve = small_disk / "filler", small_disk / "reserve"
    filler.touch()
    reserve.write_bytes(b"\0" * (24 << 20))
    host = DevHostProcess(APPS_DIR / "http_client", small_disk / "data", log_path=tmp_path / "host.log")
    host.start()
    try:
        c = host.client
        start_url = host.webhook("orchestrators/greet_chain")
        padding = "p" * 100_000  # big inputs: the WAL must grow to take them

        def submit(k: int) -> httpx.Response:
            return c.post(start_url, params=host.system_code, json={"names": [f"n{k}"], "pad": padding})

        ids: dict[int, str] = {}
        for k in range(5):
            resp = submit(k)
            assert resp.status_code == 202, resp.text
            ids[k] = resp.json()["id"]
        _fill(filler)
        refused: list[int] = []
        states: set[str] = set()
        trigger_codes: set[tuple[int, str]] = set()
        for k in range(5, 40):
            for _ in range(3000):
                resp = submit(k)
                if resp.status_code == 202:
                    ids[k] = resp.json()["id"]
                    break
                assert resp.status_code == 503, resp.text
                assert resp.json()["ErrorCode"] == "STORE_UNAVAILABLE"
                refused.append(k)
                status = c.get("/admin/host/status", headers=host.admin_headers).json()
                states.add(status["state"])
                # The app's own trigger too (another orchestrator, so the count below stays exact).
                app = c.post("/api/client/start/echo_input", params={"code": DEFAULT_KEYS.function}, json=["x"])
                if app.status_code == 503:
                    trigger_codes.add((app.status_code, app.json()["error"]["code"]))
                if len(refused) >= 5 and filler.exists():
                    filler.unlink()  # space is freed while clients keep retrying
                    reserve.unlink()
                time.sleep(0.02)
            else:
                raise AssertionError("the host never accepted the submit again")
        assert refused, "the full disk was never noticed"
        assert "Error" in states, states
        assert trigger_codes == {(503, "STORE_UNAVAILABLE")}, trigger_codes
        for _ in range(3000):
            if c.get("/admin/host/status", headers=host.admin_headers).json()["state"] == "Running":
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the host never reported Running again")
        for k, iid in ids.items():
            status = host.wait_status(iid)
            assert status["runtimeStatus"] == "Completed" and status["output"] == [f"Hello n{k}!"], status
        listed = c.get(host.webhook("instances"), params={**host.system_code, "top": "1000"}).json()
        names = sorted(str(s["input"]["names"][0]) for s in listed if s["name"] == "greet_chain" and s["input"])
        assert names == sorted(f"n{k}" for k in range(40)), "an instance was lost or duplicated"
    finally:
        host.stop()
