"""The runner inside the sandbox: reads one request on stdin, runs its code, writes one envelope on a fd.

Runs as ``python -I -S -B -X utf8 bootstrap.py <envelope fd> <uid or ->`` under bubblewrap (see local.py) and imports
only the standard library at start. It is trusted code running next to untrusted code in one process, so
everything it sends back is still treated as untrusted by the parent (which re-checks every cap). Its own
failures never print: stdout and stderr belong to the user's code.

Order matters: drop to the run's own uid (when started as root) before reading the request, set the
resource limits, and only then build the inputs and run the code. Imports are kept to what every run
needs (the start-up time is the sandbox's overhead): traceback and linecache only when the code failed.
"""

from __future__ import annotations

import binascii
import errno
import json
import math
import os
import resource
import signal
import sys
from typing import Any

CODE_FILENAME = "<code>"
OUT_DIR = "/tmp/out"
LIB_DIR = "/sandbox/lib"
# matplotlib's font list, built once by `make sandbox`: copied in so no run rebuilds it (a second and more).
MPL_CACHE = "/sandbox/mplconfig"
TRACEBACK_LINES = 12
ERROR_CHARS = 2000


def _drop_privileges(uid: int) -> None:
    """Become ``uid`` for good (root mode); the run stops if that cannot be proven."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise SystemExit("could not drop privileges")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("privileges could be regained")


def _set_limits(limits: dict[str, Any]) -> None:
    """Apply the run's limits; lowered here, they cannot be raised again by the code (no CAP_SYS_RESOURCE)."""
    cpu = max(1, math.ceil(float(limits["cpu_seconds"])))
    # SIGXCPU at the soft limit (the bootstrap is pid 1 of its namespace: without a handler the kernel
    # would ignore it), SIGKILL one second later for code that replaces the handler.
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(128 + signal.SIGXCPU))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    nproc = int(limits["max_processes"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    fsize = max(1, int(limits["max_file_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _is_table(value: Any) -> bool:
    """A SQL result as the executors hand it over: ``{"columns": [str...], "rows": [[...]...]}``."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("columns"), list)
        and isinstance(value.get("rows"), list)
        and all(isinstance(c, str) for c in value["columns"])
        and all(isinstance(r, list) for r in value["rows"])
    )


def _table(value: dict[str, Any]) -> Any:
    """A table input as a pandas DataFrame when pandas is there, else a list of dicts."""
    columns, rows = value["columns"], value["rows"]
    try:
        import pandas  # noqa: PLC0415 - loaded only when a table arrives (it costs ~0.3 s)
    except ImportError:
        return [dict(zip(columns, row, strict=False)) for row in rows]
    return pandas.DataFrame(rows, columns=columns)


def _namespace(inputs: dict[str, Any]) -> dict[str, Any]:
    """The script's globals: every input by name (when a valid identifier) and in ``inputs``."""
    built = {name: _table(v) if _is_table(v) else v for name, v in inputs.items()}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    namespace.update({k: v for k, v in built.items() if k.isidentifier() and not k.startswith("__")})
    namespace.update({"inputs": built, "OUT_DIR": OUT_DIR, "result": None})
    return namespace


def _user_traceback(exc: BaseException, code: str) -> str:
    """The last lines of the traceback, from the user's code only (the bootstrap's frames dropped)."""
    import linecache  # noqa: PLC0415 - only a failed run pays for it
    import traceback  # noqa: PLC0415

    # The traceback then quotes the code's own lines.
    linecache.cache[CODE_FILENAME] = (len(code), None, code.splitlines(keepends=True), CODE_FILENAME)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CODE_FILENAME:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    text = "".join(lines).rstrip().splitlines()
    return "\n".join(text[-TRACEBACK_LINES:])[-ERROR_CHARS:]


def _classify(exc: BaseException, code: str, limits: dict[str, Any]) -> tuple[str, str]:
    """Map an exception out of the code to (status, error); hitting a limit says which one."""
    detail = _user_traceback(exc, code)
    if isinstance(exc, MemoryError):
        return "limit", f"memory limit of {limits['memory_mb']} MB reached\n{detail}"
    if _process_limit(exc, detail):
        return "limit", f"process limit of {limits['max_processes']} reached\n{detail}"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "limit", f"file size limit of {limits['max_file_bytes']} bytes reached\n{detail}"
    return "error", detail


def _process_limit(exc: BaseException, detail: str) -> bool:
    """Whether starting a process or thread failed for want of room (RLIMIT_NPROC counts both)."""
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return True
    if not (isinstance(exc, OSError) and exc.errno == errno.EAGAIN):
        return False
    return any(word in detail.lower() for word in ("fork", "spawn", "popen", "thread"))


def _jsonable(value: Any) -> Any:
    """A JSON-ready copy of ``result``: numpy scalars and arrays, DataFrames and non-finite floats made plain."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a DataFrame: the same shape as the inputs
        return {"columns": [str(c) for c in value.columns], "rows": _jsonable(value.values.tolist())}
    if hasattr(value, "to_dict") and hasattr(value, "index"):  # a Series: its index as the keys
        return _jsonable(value.to_dict())
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _jsonable(value.tolist())
    if hasattr(value, "isoformat"):  # dates, datetimes, pandas Timestamps
        return str(value.isoformat())
    raise TypeError(f"result is not JSON-serialisable ({type(value).__name__})")


def _walk(root: str) -> list[str]:
    """Relative names of the regular files under ``root`` (symlinks never followed nor returned), sorted."""
    names = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.path.isfile(path):
                names.append(os.path.relpath(path, root))
    return sorted(names)


def _files(limits: dict[str, Any]) -> list[dict[str, Any]]:
    """The files written under the out dir, at most one past each cap so the parent sees the excess."""
    found: list[dict[str, Any]] = []
    total = 0
    for name in _walk(OUT_DIR):
        path = os.path.join(OUT_DIR, name)
        size = os.path.getsize(path)
        total += size
        entry: dict[str, Any] = {"name": name, "size": size}
        if total <= int(limits["max_file_bytes"]):
            with open(path, "rb") as f:
                entry["data_b64"] = binascii.b2a_base64(f.read(), newline=False).decode("ascii")
        found.append(entry)
        if len(found) > int(limits["max_files"]) or total > int(limits["max_file_bytes"]):
            break
    return found


def _copy_tree(source: str, target: str) -> None:
    """Copy the files of ``source`` into ``target`` (flat: matplotlib's cache dir holds files only)."""
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        path = os.path.join(source, name)
        if os.path.isfile(path):
            with open(path, "rb") as src, open(os.path.join(target, name), "wb") as dst:
                dst.write(src.read())


def _run(request: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    """Run the code and describe the outcome; any exception from the code becomes an error status."""
    code = request["code"]
    namespace: dict[str, Any] = {}
    try:
        # Inside the try: building a DataFrame is under the run's limits too (pandas alone is ~100 MB).
        namespace = _namespace(request.get("inputs") or {})
        exec(compile(code, CODE_FILENAME, "exec"), namespace)  # noqa: S102 - the sandbox's purpose
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return {"status": "error", "error": f"SystemExit: {exc.code}"[:ERROR_CHARS]}
    except BaseException as exc:  # noqa: BLE001 - everything the code raises is its own failure
        if isinstance(exc, MemoryError):
            namespace.clear()  # free what the code held, so reporting the error has memory to work with
        status, error = _classify(exc, code, limits)
        return {"status": status, "error": error}
    try:
        result = _jsonable(namespace.get("result"))
    except (TypeError, RecursionError, ValueError) as exc:
        return {"status": "error", "error": str(exc)[:ERROR_CHARS]}
    return {"status": "ok", "result": result}


def main(argv: list[str]) -> int:
    """Read the request, run it, write the envelope; returns the process exit code."""
    envelope_fd = int(argv[1])
    if argv[2] != "-":
        _drop_privileges(int(argv[2]))
    request = json.loads(sys.stdin.buffer.read())
    limits = request["limits"]
    # The bootstrap's own files first: the file size limit is for the code's.
    if os.path.isdir(MPL_CACHE):
        _copy_tree(MPL_CACHE, os.environ.get("MPLCONFIGDIR", "/tmp/.matplotlib"))
    os.makedirs(OUT_DIR, exist_ok=True)
    os.chdir(OUT_DIR)
    _set_limits(limits)
    sys.path.append(LIB_DIR)
    me = os.getpid()
    try:
        outcome = _run(request, limits)
        files = _files(limits)
    finally:
        # A process the code forked runs this too: only the original writes an envelope.
        if os.getpid() != me:
            os._exit(0)
    outcome["files"] = files
    with os.fdopen(envelope_fd, "w", encoding="utf-8") as out:
        json.dump(outcome, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
