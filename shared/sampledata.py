"""The SQLite sample database: built lazily from the committed SQL in ``data/sql/``.

``ensure_sample_db()`` returns the path of an up-to-date database file. It builds the file on first
use and rebuilds it when the SQL sources change (their content hash is stored in the database's
``PRAGMA user_version``). Building writes a temporary file in the same directory and renames it into
place, so concurrent callers (threads or processes) never see a half-built file; the last rename
wins and every build is identical.

CLI: ``python -m shared.sampledata [--path P] [--force]`` rebuilds explicitly.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import tempfile
import threading
from pathlib import Path

from shared.settings import DATA_DIR

SQL_DIR = DATA_DIR / "sql"
SQLITE_SCHEMA = SQL_DIR / "schema.sqlite.sql"
TSQL_SCHEMA = SQL_DIR / "schema.tsql.sql"
DATA_SQL = SQL_DIR / "data.sql"
DEFAULT_SAMPLE_DB = DATA_DIR / "sample.db"

_lock = threading.Lock()
# Paths already verified in this process, keyed by the sources' (mtime_ns, size) to skip re-hashing.
_verified: dict[Path, tuple[tuple[int, int], ...]] = {}


class SampleDataError(RuntimeError):
    """The sample database could not be built (missing or broken SQL sources, unwritable path)."""


def _sources() -> list[Path]:
    return [SQLITE_SCHEMA, DATA_SQL]


def source_version() -> int:
    """A 31-bit content hash of the SQL sources, stored as the database's user_version."""
    digest = hashlib.sha256()
    for path in _sources():
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            raise SampleDataError(f"sample SQL source missing: {path} ({exc})") from exc
        digest.update(b"\0")
    return int.from_bytes(digest.digest()[:4], "big") & 0x7FFFFFFF


def _stat_key() -> tuple[tuple[int, int], ...]:
    keys = []
    for path in _sources():
        try:
            st = path.stat()
        except OSError as exc:
            raise SampleDataError(f"sample SQL source missing: {path} ({exc})") from exc
        keys.append((st.st_mtime_ns, st.st_size))
    return tuple(keys)


def _db_version(path: Path) -> int | None:
    if not path.exists():
        return None
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with sqlite3.connect(uri, uri=True) as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return None


def build_sample_db(path: Path) -> Path:
    """Build the database at ``path`` from the SQL sources (temp file + atomic rename)."""
    version = source_version()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.executescript(SQLITE_SCHEMA.read_text(encoding="utf-8"))
            conn.executescript("BEGIN;\n" + DATA_SQL.read_text(encoding="utf-8") + "\nCOMMIT;")
            conn.execute("ANALYZE")
            conn.execute(f"PRAGMA user_version = {version}")
            conn.commit()
        finally:
            conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        tmp.unlink(missing_ok=True)
        raise SampleDataError(f"could not build the sample database at {path}: {exc}") from exc
    return path


def ensure_sample_db(path: Path | None = None, *, force: bool = False) -> Path:
    """Return the path of an up-to-date sample database, building it if missing or stale."""
    if path is None:
        from shared.settings import get_settings

        path = get_settings().sqlite_database_path
    path = Path(path)
    key = _stat_key()
    if not force and _verified.get(path) == key and path.exists():
        return path
    with _lock:
        key = _stat_key()
        if not force and _verified.get(path) == key and path.exists():
            return path
        if force or _db_version(path) != source_version():
            build_sample_db(path)
        _verified[path] = key
    return path


def main(argv: list[str] | None = None) -> int:
    """CLI: rebuild the sample database."""
    parser = argparse.ArgumentParser(prog="python -m shared.sampledata", description="Build the SQLite sample DB.")
    parser.add_argument("--path", type=Path, default=None, help="database file (default: SQLITE_DATABASE_PATH)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    path = ensure_sample_db(args.path, force=args.force)
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
    print(f"{path}: " + ", ".join(f"{t}={n}" for t, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
