"""The SQLite sample database: built lazily from the committed SQL in ``data/sql/``.

``ensure_sample_db()`` returns the path of an up-to-date database file. It builds the file on first
use and rebuilds it when the SQL sources change (their content hash is stored in the database's
``PRAGMA user_version``). Building writes a temporary file in the same directory and renames it into
place, so concurrent callers (threads or processes) never see a half-built file; the last rename
wins and every build is identical.

The tables the catalog marks sensitive (``customer_contacts``) do not live in that file: they go to a
second file beside it, ``<name>-sensitive.db`` (``sensitive_db_path()``), which the SQLite provider
ATTACHes read-only only for a statement a human approved. That is the database-level barrier: a
query on the main file cannot name a sensitive table, whatever the guard or the orchestrator let
through. The sensitive file is renamed into place before the main file, so a main file at the
current version always has its sensitive partner.

CLI: ``python -m shared.providers.sql.sampledata [--path P] [--force]`` rebuilds explicitly.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

from shared.runtime.settings import DATA_DIR

SQL_DIR = DATA_DIR / "sql"
SQLITE_SCHEMA = SQL_DIR / "schema.sqlite.sql"
TSQL_SCHEMA = SQL_DIR / "schema.tsql.sql"
POSTGRES_SCHEMA = SQL_DIR / "schema.postgres.sql"
DATA_SQL = SQL_DIR / "data.sql"
DEFAULT_SAMPLE_DB = DATA_DIR / "sample.db"

_lock = threading.Lock()
# Paths already verified in this process, keyed by the sources' (mtime_ns, size) to skip re-hashing.
_verified: dict[Path, tuple[tuple[int, int], ...]] = {}


class SampleDataError(RuntimeError):
    """The sample database could not be built (missing or broken SQL sources, unwritable path)."""


def _sources() -> list[Path]:
    return [SQLITE_SCHEMA, DATA_SQL]


def sensitive_db_path(path: Path) -> Path:
    """Where the sensitive tables of the database at ``path`` live: ``<stem>-sensitive<suffix>`` beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}-sensitive{path.suffix or '.db'}")


def sensitive_tables() -> frozenset[str]:
    """The tables the catalog marks sensitive (lower-case): they are kept out of the main file."""
    from shared.providers.sql.catalog import load_catalog

    return frozenset(name.lower() for name in load_catalog().sensitive_tables())


def source_version() -> int:
    """A 31-bit content hash of the SQL sources, stored as the database's user_version."""
    digest = hashlib.sha256()
    for path in _sources():
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            raise SampleDataError(f"sample SQL source missing: {path} ({exc})") from exc
        digest.update(b"\0")
    # Moving a table between the files is a different build, even with the same SQL.
    digest.update(",".join(sorted(sensitive_tables())).encode())
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
    """Build the database at ``path`` and its sensitive partner from the SQL sources (temp files + rename)."""
    version = source_version()
    hidden = sorted(sensitive_tables())
    path.parent.mkdir(parents=True, exist_ok=True)
    partner = sensitive_db_path(path)
    tmp = _temp_beside(path)
    tmp_partner = _temp_beside(partner)
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
        # Same schema, same rows: the partner starts as a copy; each file then drops what it must not hold.
        shutil.copyfile(tmp, tmp_partner)
        _keep_only(tmp_partner, keep=set(hidden))
        _drop(tmp, hidden)
        for file in (tmp, tmp_partner):
            os.chmod(file, 0o644)
        os.replace(tmp_partner, partner)
        os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        tmp.unlink(missing_ok=True)
        tmp_partner.unlink(missing_ok=True)
        raise SampleDataError(f"could not build the sample database at {path}: {exc}") from exc
    return path


def _temp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    return [str(r[0]) for r in rows]


def _drop(file: Path, tables: list[str]) -> None:
    conn = sqlite3.connect(file)
    try:
        present = {t.lower(): t for t in _tables(conn)}
        for name in tables:
            if name.lower() in present:
                conn.execute(f'DROP TABLE "{present[name.lower()]}"')
        # Statistics of dropped tables go with them; VACUUM returns their pages, so no deleted row lingers.
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()


def _keep_only(file: Path, keep: set[str]) -> None:
    conn = sqlite3.connect(file)
    try:
        dropped = [t for t in _tables(conn) if t.lower() not in keep]
    finally:
        conn.close()
    _drop(file, dropped)


def postgres_load_sql() -> str:
    """The same sample for PostgreSQL: its schema, then the portable data, in one transaction (run as the owner)."""
    schema = POSTGRES_SCHEMA.read_text(encoding="utf-8")
    data = DATA_SQL.read_text(encoding="utf-8")
    return f"BEGIN;\n{schema}\n{data}\nCOMMIT;\nANALYZE;\n"


def ensure_sample_db(path: Path | None = None, *, force: bool = False) -> Path:
    """Return the path of an up-to-date sample database, building it if missing or stale."""
    if path is None:
        from shared.runtime.settings import get_settings

        path = get_settings().sqlite_database_path
    path = Path(path)
    key = _stat_key()
    partner = sensitive_db_path(path)
    if not force and _verified.get(path) == key and path.exists() and partner.exists():
        return path
    with _lock:
        key = _stat_key()
        if not force and _verified.get(path) == key and path.exists() and partner.exists():
            return path
        version = source_version()
        if force or _db_version(path) != version or _db_version(partner) != version:
            build_sample_db(path)
        _verified[path] = key
    return path


def main(argv: list[str] | None = None) -> int:
    """CLI: rebuild the sample database."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.providers.sql.sampledata", description="Build the SQLite sample DB."
    )
    parser.add_argument("--path", type=Path, default=None, help="database file (default: SQLITE_DATABASE_PATH)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    path = ensure_sample_db(args.path, force=args.force)
    for file in (path, sensitive_db_path(path)):
        with sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
        print(f"{file}: " + ", ".join(f"{t}={n}" for t, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
