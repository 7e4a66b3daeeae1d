"""The ``durable_limits`` SQLite extension: resource limits and a sealing authorizer per connection.

``durable_limits.c`` (beside this file) is compiled with gcc into ``.build/sqlite_limits/`` (ignored
by git) by ``make install`` or lazily on the first query, and the SQLite provider loads it on every
connection (the ODBC driver's ``LoadExt=`` option). The file name carries a hash of the C source,
so a changed source is never served by a stale build; the build writes a temporary file and renames
it into place, so concurrent builders never load a half-written library.

Nothing runs without it: when the extension cannot be built (no compiler, no ``sqlite3ext.h``),
``extension_path()`` raises ``ProviderError(CONFIG_ERROR)`` naming the fix.

CLI: ``python -m shared.providers.sql.sqlite_limits`` builds it and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from shared.jobs.contracts import ErrorCode, ProviderError

SOURCE = Path(__file__).with_name("durable_limits.c")
REPO_ROOT = Path(__file__).resolve().parents[4]
BUILD_DIR = REPO_ROOT / ".build" / "sqlite_limits"
INSTALL_HINT = (
    "install gcc and libsqlite3-dev (scripts/install-system-deps.sh) and run `make install` "
    "(or `python -m shared.providers.sql.sqlite_limits`)"
)
# Characters the ODBC driver's connection-string parser would split or misread in a LoadExt path.
_UNSAFE_PATH = re.compile(r"[;,{}=\s]")

_lock = threading.Lock()
_built: dict[str, Path] = {}


def _source_text() -> str:
    try:
        return SOURCE.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"the SQLite limits extension source is missing: {exc}") from exc


def expected_version() -> str:
    """The version string ``durable_seal()`` returns for the current C source."""
    match = re.search(r'#define DURABLE_LIMITS_VERSION "([^"]+)"', _source_text())
    if match is None:
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"{SOURCE} defines no DURABLE_LIMITS_VERSION")
    return match.group(1)


def max_length() -> int:
    """The per-value byte limit (``SQLITE_LIMIT_LENGTH``) the C source sets."""
    match = re.search(r"#define DURABLE_MAX_LENGTH (\d+)", _source_text())
    if match is None:
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"{SOURCE} defines no DURABLE_MAX_LENGTH")
    return int(match.group(1))


def _library_name(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    return f"durable_limits-{digest}.so"


def _build_dirs() -> list[Path]:
    # The checkout first; a read-only deployment (run-from-package) falls back to the temp dir.
    return [BUILD_DIR, Path(tempfile.gettempdir()) / "durable-ai-jobs" / "sqlite_limits"]


def extension_path() -> Path:
    """The path of an up-to-date build of the extension, compiling it first when needed."""
    source = _source_text()
    name = _library_name(source)
    cached = _built.get(name)
    if cached is not None and cached.exists():
        return cached
    with _lock:
        for directory in _build_dirs():
            candidate = directory / name
            if candidate.exists() and not _UNSAFE_PATH.search(str(candidate)):
                _built[name] = candidate
                return candidate
        errors: list[str] = []
        for directory in _build_dirs():
            if _UNSAFE_PATH.search(str(directory)):
                errors.append(f"{directory}: path has characters the ODBC connection string cannot carry")
                continue
            try:
                path = _compile(directory / name)
            except _BuildError as exc:
                errors.append(str(exc))
                if exc.fatal:
                    break
                continue
            _built[name] = path
            return path
    raise ProviderError(
        ErrorCode.CONFIG_ERROR,
        f"the SQLite limits extension is not built and could not be built ({'; '.join(errors)}): {INSTALL_HINT}"[:2000],
    )


class _BuildError(Exception):
    def __init__(self, message: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


def _compile(target: Path) -> Path:
    # gcc from PATH (scripts/install-system-deps.sh installs it); settings are read only through Settings.
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not compiler:
        raise _BuildError("no C compiler (gcc) found", fatal=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise _BuildError(f"{target.parent} is not writable ({exc})", fatal=False) from exc
    tmp = Path(tmp_name)
    try:
        result = subprocess.run(
            [compiler, "-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-o", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            # A missing sqlite3ext.h is the usual cause; say so plainly.
            raise _BuildError(f"gcc failed: {' '.join(detail[:3])}"[:600], fatal=True)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
        for stale in target.parent.glob("durable_limits-*.so"):
            if stale != target:  # builds of an older source are never loaded again
                stale.unlink(missing_ok=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _BuildError(f"could not run {compiler}: {exc}", fatal=False) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return target


def main() -> int:
    """CLI: build the extension (no-op when up to date) and print its path."""
    try:
        print(extension_path())
    except ProviderError as exc:
        print(exc.message)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
