"""SQLite (WAL) persistence for one Durable task hub.

Tables: ``instances`` (one row per instance id, current execution only), ``history`` (pre-rendered
event JSON of the current execution), ``inbox`` (durable orchestrator messages: external events,
sub-orchestration results, suspend/resume/rewind markers), ``activities`` (scheduled activity work
items, deleted when the episode that consumes the result commits) and ``timers`` (armed durable
timers, deleted when the episode that consumes the TimerFired commits), ``entities`` (one row per existing
Durable Entity: its state and last operation time) and ``entity_ops`` (operations sent to an entity and not
yet run, deleted when the batch that runs them commits).

The store is used from the engine's event-loop thread only. The engine opens a transaction with
``begin()``, issues statements and calls ``commit()`` without awaiting in between, so a crash (even
``kill -9``) leaves either the whole episode or none of it.

The schema, its migrations and the row type are in ``store_schema``. WAL checkpoints run on a background
thread with its own connection (``checkpoint.Checkpointer``), so the checkpoint's ``fsync`` calls never stall
the event loop inside a commit; the engine's connection only checkpoints itself as a backstop when the WAL
grows past ``BACKSTOP_CHECKPOINT_PAGES``. Commits are unchanged (same WAL, same ``synchronous`` level), so
durability is the same as with SQLite's automatic checkpoints; the checkpoint connection uses the same
``synchronous`` level, so it syncs the WAL before copying it into the database exactly as an automatic
checkpoint would.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from devhost.durable.checkpoint import BACKSTOP_CHECKPOINT_PAGES, WAL_SIZE_LIMIT_BYTES, Checkpointer
from devhost.durable.store_schema import (
    ENTITY_SCHEMA,
    INSTANCE_COLUMNS,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    InstanceRow,
    StoreDamaged,
    StoreFault,
)

# The write probe (probe_write) needs this many bytes of new pages, so it fails while the disk is full.
PROBE_BYTES = 64 * 1024
# The file a devhost data folder holds once a store was created in it (see check_data_folder).
USED_MARKER = ".devhost-store-used"

log = logging.getLogger("devhost.durable")


class Store:
    """A task hub in one SQLite file."""

    def __init__(self, path: Path, *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = path
        self._synchronous = synchronous.upper()
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._tx_wanted = False
        self.checkpointer = Checkpointer(path, self._synchronous)

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (raises when closed)."""
        if self._db is None:
            raise RuntimeError("The durable store is not open.")
        return self._db

    @property
    def used_marker(self) -> Path:
        """The file that records that this store was created (an empty store after it is refused)."""
        return self.path.with_name(self.path.name + ".used")

    def open(self, hub_name: str, *, reset: bool = False) -> None:
        """Open (creating if needed) the database and its schema; one engine per file at a time.

        Raises StoreDamaged when the file fails ``PRAGMA quick_check`` or when a store that existed
        (its marker file says so) is now empty or missing, unless ``reset`` starts a new, empty store.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self._open_checked(hub_name, reset=reset)
        except BaseException:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            raise
        self.checkpointer.start()

    def _open_checked(self, hub_name: str, *, reset: bool) -> None:
        if reset:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            log.warning("Starting a new, empty durable store %s (--reset-store).", self.path)
        elif self.used_marker.exists():
            size = self.path.stat().st_size if self.path.exists() else None
            if not size:
                state = "is missing" if size is None else "is empty (0 bytes)"
                raise StoreDamaged(
                    f"The durable store {self.path} {state}, but this data folder held a store before: "
                    "its jobs would be silently gone. Restore the file, or start over with `serve --reset-store`."
                )
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreDamaged(f"The durable store {self.path} cannot be opened: {exc}.") from exc
        try:
            self._prepare(db, hub_name)
        except BaseException:
            db.close()
            raise
        self._db = db
        # Written once the schema is committed: from now on an empty file here means lost jobs.
        self.used_marker.write_text("devhost durable store created here; see devhost/README.md\n")

    def _prepare(self, db: sqlite3.Connection, hub_name: str) -> None:
        try:
            problems = [str(r[0]) for r in db.execute("PRAGMA quick_check(5)").fetchall()]
        except sqlite3.DatabaseError as exc:
            raise StoreDamaged(
                f"The durable store {self.path} is damaged ({exc}); restore it from a backup, "
                "or start over with `serve --reset-store`."
            ) from exc
        if problems != ["ok"]:
            raise StoreDamaged(
                f"The durable store {self.path} is damaged ({'; '.join(problems)}); restore it from a backup, "
                "or start over with `serve --reset-store`."
            )
        # Takes effect only in a new (empty) file: then purged history can be handed back (reclaim_space).
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={self._synchronous}")
        db.execute("PRAGMA temp_store=MEMORY")
        db.execute("PRAGMA busy_timeout=5000")
        db.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_PAGES}")
        db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        db.executescript(SCHEMA)
        self._check_schema_version(db)
        db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('hub_name', ?)", (hub_name,))

    def _check_schema_version(self, db: sqlite3.Connection) -> None:
        """A new store gets today's version; an older one is migrated step by step; anything else is refused."""
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            db.executescript(ENTITY_SCHEMA)
            db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            return
        found = int(row[0]) if str(row[0]).isdigit() else -1
        while found in MIGRATIONS and found < SCHEMA_VERSION:
            found = MIGRATIONS[found](db)
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(found),))
        if found == SCHEMA_VERSION:
            return
        why = "a newer devhost wrote it" if found > SCHEMA_VERSION else "no migration exists from that version"
        raise StoreDamaged(
            f"The durable store {self.path} has schema version {row[0]}, but this devhost reads version "
            f"{SCHEMA_VERSION} ({why}); run the devhost that wrote it, or start over with `serve --reset-store`."
        )

    def close(self) -> None:
        """Close the connection (rolls back an unfinished transaction) and release the file lock."""
        self.checkpointer.stop()
        if self._db is not None:
            self.rollback()
            self._db.close()
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def synchronous_level(self) -> str:
        """The ``PRAGMA synchronous`` level in effect on the engine's connection."""
        level = int(self.db.execute("PRAGMA synchronous").fetchone()[0])
        return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))

    def _acquire_lock(self) -> None:
        """Take an exclusive advisory lock on ``<db>.lock`` (released by the OS even after kill -9)."""
        try:
            import fcntl  # noqa: PLC0415 - POSIX only; elsewhere the lock is skipped
        except ImportError:
            return
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(
                f"The durable store {self.path} is in use by another devhost engine; "
                "stop it or use another data directory."
            ) from None
        self._lock_fd = fd

    # -- transactions -------------------------------------------------------------------------
    @property
    def in_tx(self) -> bool:
        """Whether SQLite has a transaction open (it may roll one back by itself, e.g. on SQLITE_FULL)."""
        return self._db is not None and self._db.in_transaction

    def begin(self) -> None:
        """Start a write transaction unless one is open."""
        if not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")
        self._tx_wanted = True

    def commit(self) -> None:
        """Commit the transaction ``begin()`` opened; raises StoreFault (after rolling back) when it fails.

        A transaction SQLite already rolled back by itself (disk full, I/O error) counts as failed:
        statements after it ran one by one, so nothing of it may be taken as committed.
        """
        wanted, self._tx_wanted = self._tx_wanted, False
        db = self.db
        if not db.in_transaction:
            if wanted:
                raise StoreFault("the durable store rolled the transaction back (disk full or I/O error)")
            return
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreFault(f"committing to the durable store failed: {exc}") from exc
        self.checkpointer.committed()

    def rollback(self) -> None:
        """Roll back the open transaction, if any (errors while rolling back are logged, not raised)."""
        self._tx_wanted = False
        if self._db is not None and self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.warning("Rolling back the durable store's transaction failed: %s", exc)

    def probe_write(self) -> None:
        """Write and delete a few pages in one transaction: raises StoreFault while the store cannot grow."""
        try:
            self.begin()
            self.db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('write_probe', zeroblob(?))", (PROBE_BYTES,)
            )
            self.db.execute("DELETE FROM meta WHERE key='write_probe'")
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreFault(f"the durable store cannot write: {exc}") from exc
        self.commit()

    # -- instances ----------------------------------------------------------------------------
    def insert_instance(self, row: InstanceRow) -> None:
        """Insert a new instance row (the id must not exist)."""
        self.db.execute(
            f"INSERT INTO instances ({INSTANCE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                row.instance_id,
                row.name,
                row.version,
                row.execution_id,
                row.status,
                row.input,
                row.output,
                row.custom_status,
                row.created,
                row.updated,
                row.parent_id,
                row.parent_execution,
                row.parent_seq,
                row.parent_name,
                row.estate,
            ),
        )

    def update_instance(
        self,
        instance_id: str,
        *,
        execution_id: str,
        status: str,
        input_text: str | None,
        output: str | None,
        custom_status: str | None,
        updated: float,
        estate: str | None,
    ) -> None:
        """Update the mutable columns of an instance."""
        self.db.execute(
            "UPDATE instances SET execution_id=?, status=?, input=?, output=?, custom_status=?, updated=?, estate=? "
            "WHERE instance_id=?",
            (execution_id, status, input_text, output, custom_status, updated, estate, instance_id),
        )

    def get_instance(self, instance_id: str) -> InstanceRow | None:
        """One instance row, or None."""
        cur = self.db.execute(f"SELECT {INSTANCE_COLUMNS} FROM instances WHERE instance_id=?", (instance_id,))
        found = cur.fetchone()
        return InstanceRow(*found) if found else None

    def instances_with_status(self, statuses: Sequence[str]) -> list[InstanceRow]:
        """All instance rows whose status is one of ``statuses``."""
        marks = ",".join("?" * len(statuses))
        cur = self.db.execute(
            f"SELECT {INSTANCE_COLUMNS} FROM instances WHERE status IN ({marks}) ORDER BY ord", tuple(statuses)
        )
        return [InstanceRow(*r) for r in cur.fetchall()]

    def query_instances(
        self,
        *,
        created_from: float | None,
        created_to: float | None,
        statuses: Sequence[str] | None,
        prefix: str | None,
        after_ord: int,
        limit: int,
    ) -> list[tuple[int, InstanceRow]]:
        """Instance rows matching the filters in insertion order, after the ``after_ord`` cursor."""
        where, args = _instance_filters(created_from, created_to, statuses, prefix)
        where.insert(0, "ord > ?")
        args.insert(0, after_ord)
        args.append(limit)
        cur = self.db.execute(
            f"SELECT ord, {INSTANCE_COLUMNS} FROM instances WHERE {' AND '.join(where)} ORDER BY ord LIMIT ?",
            args,
        )
        return [(r[0], InstanceRow(*r[1:])) for r in cur.fetchall()]

    def delete_instance(self, instance_id: str) -> int:
        """Delete an instance and everything that belongs to it; returns 1 if it existed."""
        db = self.db
        count = db.execute("DELETE FROM instances WHERE instance_id=?", (instance_id,)).rowcount
        for table in ("history", "inbox", "activities", "timers"):
            db.execute(f"DELETE FROM {table} WHERE instance_id=?", (instance_id,))
        return count

    # -- history ------------------------------------------------------------------------------
    def append_history(self, instance_id: str, start_idx: int, bodies: Sequence[str]) -> None:
        """Append rendered events at positions ``start_idx``…"""
        self.db.executemany(
            "INSERT INTO history (instance_id, idx, body) VALUES (?,?,?)",
            [(instance_id, start_idx + i, body) for i, body in enumerate(bodies)],
        )

    def replace_history(self, instance_id: str, bodies: Sequence[str]) -> None:
        """Replace the whole stored history of an instance."""
        self.db.execute("DELETE FROM history WHERE instance_id=?", (instance_id,))
        self.append_history(instance_id, 0, bodies)

    def history(self, instance_id: str) -> list[str]:
        """The stored events of the instance's current execution, in order."""
        cur = self.db.execute("SELECT body FROM history WHERE instance_id=? ORDER BY idx", (instance_id,))
        return [r[0] for r in cur.fetchall()]

    # -- inbox --------------------------------------------------------------------------------
    def insert_inbox(self, instance_id: str, execution_id: str | None, body: str) -> int:
        """Persist one orchestrator message; returns its id."""
        cur = self.db.execute(
            "INSERT INTO inbox (instance_id, execution_id, body) VALUES (?,?,?)", (instance_id, execution_id, body)
        )
        return int(cur.lastrowid or 0)

    def delete_inbox(self, ids: Iterable[int]) -> None:
        """Delete consumed messages."""
        self.db.executemany("DELETE FROM inbox WHERE id=?", [(i,) for i in ids])

    def inbox(self, instance_id: str) -> list[tuple[int, str | None, str]]:
        """Pending messages of one instance: (id, execution id, body)."""
        cur = self.db.execute(
            "SELECT id, execution_id, body FROM inbox WHERE instance_id=? ORDER BY id", (instance_id,)
        )
        return list(cur.fetchall())

    def delete_instance_work(self, instance_id: str, *, inbox: bool = True) -> None:
        """Delete pending activities, timers (and optionally inbox messages) of an instance."""
        db = self.db
        db.execute("DELETE FROM activities WHERE instance_id=?", (instance_id,))
        db.execute("DELETE FROM timers WHERE instance_id=?", (instance_id,))
        if inbox:
            db.execute("DELETE FROM inbox WHERE instance_id=?", (instance_id,))

    # -- activities ---------------------------------------------------------------------------
    def insert_activity(self, instance_id: str, execution_id: str, seq: int, name: str, input_text: str | None) -> int:
        """Persist a scheduled activity; returns its work id."""
        cur = self.db.execute(
            "INSERT INTO activities (instance_id, execution_id, seq, name, input) VALUES (?,?,?,?,?)",
            (instance_id, execution_id, seq, name, input_text),
        )
        return int(cur.lastrowid or 0)

    def delete_activities(self, ids: Iterable[int]) -> None:
        """Delete activity work items whose results were consumed (or discarded)."""
        self.db.executemany("DELETE FROM activities WHERE id=?", [(i,) for i in ids])

    def activities(self) -> list[tuple[int, str, str, int, str, str | None]]:
        """All pending activity work items: (id, instance, execution, seq, name, input)."""
        return list(
            self.db.execute("SELECT id, instance_id, execution_id, seq, name, input FROM activities ORDER BY id")
        )

    # -- timers -------------------------------------------------------------------------------
    def insert_timer(self, instance_id: str, execution_id: str, seq: int, fire_at: float, fire_text: str) -> int:
        """Persist an armed timer; returns its id."""
        cur = self.db.execute(
            "INSERT INTO timers (instance_id, execution_id, seq, fire_at, fire_text) VALUES (?,?,?,?,?)",
            (instance_id, execution_id, seq, fire_at, fire_text),
        )
        return int(cur.lastrowid or 0)

    def delete_timers(self, ids: Iterable[int]) -> None:
        """Delete fired or cancelled timers."""
        self.db.executemany("DELETE FROM timers WHERE id=?", [(i,) for i in ids])

    def delete_timer_seq(self, instance_id: str, execution_id: str, seq: int) -> None:
        """Delete the timer with a given sequence id (cancellation)."""
        self.db.execute(
            "DELETE FROM timers WHERE instance_id=? AND execution_id=? AND seq=?", (instance_id, execution_id, seq)
        )

    def timers(self) -> list[tuple[int, str, str, int, float, str]]:
        """All armed timers: (id, instance, execution, seq, fire_at, fire_text)."""
        return list(
            self.db.execute("SELECT id, instance_id, execution_id, seq, fire_at, fire_text FROM timers ORDER BY id")
        )

    # -- entities -----------------------------------------------------------------------------
    def get_entity(self, entity_id: str) -> tuple[str | None, float] | None:
        """An existing entity's (state, last operation time), or None when it does not exist."""
        found = self.db.execute("SELECT state, last_op FROM entities WHERE entity_id=?", (entity_id,)).fetchone()
        return (found[0], float(found[1])) if found else None

    def put_entity(self, entity_id: str, state: str | None, last_op: float) -> None:
        """Create or update an entity's state."""
        self.db.execute(
            "INSERT INTO entities (entity_id, state, last_op) VALUES (?,?,?) "
            "ON CONFLICT(entity_id) DO UPDATE SET state=excluded.state, last_op=excluded.last_op",
            (entity_id, state, last_op),
        )

    def delete_entity(self, entity_id: str) -> int:
        """Delete an entity's state; returns 1 if it existed."""
        return self.db.execute("DELETE FROM entities WHERE entity_id=?", (entity_id,)).rowcount

    def query_entities(
        self, *, prefix: str | None, op_from: float | None, op_to: float | None, after: str | None, limit: int
    ) -> list[tuple[str, str | None, float]]:
        """Existing entities (id, state, last operation time) in id order, after the ``after`` id."""
        where, args = _entity_filters(prefix, op_from, op_to)
        if after is not None:
            where.append("entity_id > ?")
            args.append(after)
        args.append(limit)
        cur = self.db.execute(
            f"SELECT entity_id, state, last_op FROM entities WHERE {' AND '.join(where) or '1'} "
            "ORDER BY entity_id LIMIT ?",
            args,
        )
        return [(r[0], r[1], float(r[2])) for r in cur.fetchall()]

    def insert_entity_op(self, entity_id: str, body: str) -> int:
        """Persist an operation sent to an entity; returns its id (ids give the order operations run in)."""
        cur = self.db.execute("INSERT INTO entity_ops (entity_id, body) VALUES (?,?)", (entity_id, body))
        return int(cur.lastrowid or 0)

    def delete_entity_ops(self, ids: Iterable[int]) -> None:
        """Delete operations whose batch ran."""
        self.db.executemany("DELETE FROM entity_ops WHERE id=?", [(i,) for i in ids])

    def entity_ops(self) -> list[tuple[int, str, str]]:
        """All pending entity operations in the order they were sent: (id, entity id, body)."""
        return list(self.db.execute("SELECT id, entity_id, body FROM entity_ops ORDER BY id"))

    def pending_entity_ops(self, entity_id: str) -> int:
        """How many operations wait for one entity."""
        return int(self.db.execute("SELECT count(*) FROM entity_ops WHERE entity_id=?", (entity_id,)).fetchone()[0])

    def purge_terminal(self, created_from: float, created_to: float | None, statuses: Sequence[str]) -> list[str]:
        """Delete instances in the given (terminal) statuses created in the range; returns their ids."""
        args: list[Any] = [created_from]
        where = "created >= ?"
        if created_to is not None:
            where += " AND created <= ?"
            args.append(created_to)
        where += f" AND status IN ({','.join('?' * len(statuses))})"
        args.extend(statuses)
        ids = [r[0] for r in self.db.execute(f"SELECT instance_id FROM instances WHERE {where}", args)]
        for instance_id in ids:
            self.delete_instance(instance_id)
        return ids

    # -- listing by created time and purging (GET/DELETE instances/) ---------------------------
    def query_by_created(
        self,
        *,
        created_from: float | None,
        created_to: float | None,
        statuses: Sequence[str] | None,
        prefix: str | None,
        after: tuple[float, int] | None,
        limit: int,
    ) -> list[tuple[float, int, InstanceRow]]:
        """Instance rows matching the filters in created-time order, after the ``(created, ord)`` cursor.

        The ``instances_created`` index holds (created, ord) and ``instances_status_created`` (status,
        created, ord), so a created-time window costs its own rows plus a seek, however many instances
        the store holds (with several statuses, the window's rows are sorted).
        """
        where, args = _instance_filters(created_from, created_to, statuses, prefix)
        if after is not None:
            where.insert(0, "(created > ? OR (created = ? AND ord > ?))")
            args[:0] = [after[0], after[0], after[1]]
        args.append(limit)
        # (status, created) serves a one-status filter in order (an index entry ends with ord); else (created).
        index = "instances_status_created" if statuses else "instances_created"
        cur = self.db.execute(
            f"SELECT created, ord, {INSTANCE_COLUMNS} FROM instances INDEXED BY {index} "
            f"WHERE {' AND '.join(where) or '1'} ORDER BY created, ord LIMIT ?",
            args,
        )
        return [(r[0], r[1], InstanceRow(*r[2:])) for r in cur.fetchall()]

    def purge_batch(self, created_from: float, created_to: float | None, statuses: Sequence[str], limit: int) -> int:
        """Delete up to ``limit`` instances in the given (terminal) statuses created in the range; returns how many."""
        args: list[Any] = [created_from]
        where = "created >= ?"
        if created_to is not None:
            where += " AND created <= ?"
            args.append(created_to)
        where += f" AND status IN ({','.join('?' * len(statuses))})"
        args.extend(statuses)
        args.append(limit)
        ids = [r[0] for r in self.db.execute(f"SELECT instance_id FROM instances WHERE {where} LIMIT ?", args)]
        for instance_id in ids:
            self.delete_instance(instance_id)
        return len(ids)

    def reclaim_space(self, max_pages: int) -> int:
        """Return up to ``max_pages`` free pages to the file system (incremental vacuum); returns how many are left.

        Only stores created with ``auto_vacuum=INCREMENTAL`` shrink; in others SQLite reuses the free
        pages for new instances, so the file stops growing once retention purges as much as is added.
        """
        db = self.db
        if int(db.execute("PRAGMA auto_vacuum").fetchone()[0]) != 2:
            return 0
        db.execute(f"PRAGMA incremental_vacuum({int(max_pages)})").fetchall()
        return int(db.execute("PRAGMA freelist_count").fetchone()[0])

    def file_bytes(self) -> int:
        """Bytes the store occupies on disk (database and WAL)."""
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(f"{self.path}{suffix}")
        return total


def _entity_filters(prefix: str | None, op_from: float | None, op_to: float | None) -> tuple[list[str], list[Any]]:
    """WHERE terms and arguments of the entity query (id prefix, last operation time range)."""
    where: list[str] = []
    args: list[Any] = []
    if prefix:
        where.append("entity_id >= ? AND entity_id < ?")
        args.extend([prefix, prefix + "\U0010ffff"])
    if op_from is not None:
        where.append("last_op >= ?")
        args.append(op_from)
    if op_to is not None:
        where.append("last_op <= ?")
        args.append(op_to)
    return where, args


def _instance_filters(
    created_from: float | None, created_to: float | None, statuses: Sequence[str] | None, prefix: str | None
) -> tuple[list[str], list[Any]]:
    """WHERE terms and arguments shared by the instance queries (created range, statuses, id prefix)."""
    where: list[str] = []
    args: list[Any] = []
    if created_from is not None:
        where.append("created >= ?")
        args.append(created_from)
    if created_to is not None:
        where.append("created <= ?")
        args.append(created_to)
    if statuses:
        where.append(f"status IN ({','.join('?' * len(statuses))})")
        args.extend(statuses)
    if prefix:
        # Range scan instead of LIKE so '%'/'_' in ids match literally.
        where.append("instance_id >= ? AND instance_id < ?")
        args.extend([prefix, prefix + "\U0010ffff"])
    return where, args
