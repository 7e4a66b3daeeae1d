"""WAL checkpoints of the durable store on a background thread, so their ``fsync`` never stalls the event loop."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from pathlib import Path

# A checkpoint runs after this many commits, or CHECKPOINT_IDLE_S after the last commit.
CHECKPOINT_EVERY_COMMITS = 100
CHECKPOINT_IDLE_S = 1.0
CHECKPOINT_RETRY_S = 0.05
# Under a steady stream of commits a concurrent checkpoint never catches up completely, and SQLite
# rewinds the WAL only when it has: the engine's own connection then checkpoints (the few frames the
# background thread has not copied yet) once the WAL reaches this many pages. SQLite's default
# automatic checkpoint is at 1000 pages (all of them copied and synced inside a commit).
BACKSTOP_CHECKPOINT_PAGES = 4000
# After the WAL is rewound, SQLite truncates the file to this size if it grew larger.
WAL_SIZE_LIMIT_BYTES = 32 * 1024 * 1024

log = logging.getLogger("devhost.durable")


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a background thread with its own connection.

    A passive checkpoint never blocks the engine's writers and holds no Python lock while SQLite
    copies pages and syncs files (the sqlite3 module releases the GIL around each statement).
    """

    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
        self._synchronous = synchronous
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.commits = 0  # bumped by the engine's thread; read here (a plain int under the GIL)
        self._baseline = 0
        self.checkpoints = 0
        self.last_result: tuple[int, int, int] | None = None

    def start(self) -> None:
        """Start the checkpoint thread."""
        self._stopping = False
        # Read here, not on the new thread: commits made before it gets going must still count.
        self._baseline = self.commits
        self._thread = threading.Thread(target=self._run, name="devhost-wal-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """Count one commit; every CHECKPOINT_EVERY_COMMITS-th wakes the thread."""
        self.commits += 1
        if self.commits % CHECKPOINT_EVERY_COMMITS == 0:
            self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (after a checkpoint in progress finishes)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping = True
        self._wake.set()
        thread.join(timeout_s)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            log.warning("WAL checkpoint thread cannot open %s; the engine checkpoints itself.", self._path)
            return
        try:
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            done = self._baseline
            wait_s = CHECKPOINT_IDLE_S
            while not self._stopping:
                self._wake.wait(wait_s)
                self._wake.clear()
                if self._stopping:
                    break
                seen = self.commits
                wait_s = CHECKPOINT_IDLE_S
                if seen == done:
                    continue
                try:
                    row = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    log.warning("WAL checkpoint failed (retried later): %s", exc)
                    continue
                self.last_result = (int(row[0]), int(row[1]), int(row[2])) if row else None
                self.checkpoints += 1
                done = seen
                if self.last_result is not None and self.last_result[2] < self.last_result[1]:
                    # Commits landed while copying: SQLite rewinds the WAL only once every frame is
                    # copied, so catch up soon (in the next pause between commits).
                    wait_s = CHECKPOINT_RETRY_S
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()
