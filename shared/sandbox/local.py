"""The local sandbox: untrusted Python in its own process behind bubblewrap, never a bare ``exec``.

The boundary (one bwrap per run):
- namespaces: no network (a new net namespace: 127.0.0.1 inside is its own, nothing reaches the host), a new
  pid namespace with its own /proc (the code is pid 1; the host's processes and the parent are invisible),
  new IPC/UTS/cgroup ones;
- files: a read-only root made of /usr (and the /lib*, /bin links), the interpreter's prefix, the sandbox
  venv's site-packages at /sandbox/lib and the bootstrap, a read-only /dev, plus a private size-limited
  tmpfs at /tmp (the only writable place; the out dir is /tmp/out). No /etc, no /work, no app settings, no
  Durable store;
- environment: cleared (bwrap itself is started with an empty one);
- session: --new-session (no TIOCSTI into the caller's terminal), --die-with-parent;
- system calls: a seccomp filter (seccomp.py) refuses new user namespaces;
- limits, set by the bootstrap before the code runs: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE;
  the wall time and the output size are enforced here (the whole sandbox killed on excess).

Root bypasses RLIMIT_NPROC, so the code never runs as root: as root, bwrap keeps only CAP_SETUID/SETGID and
the bootstrap drops to a uid of this run's own before it reads anything (root mode); as another user, bwrap
makes a user namespace (no further ones allowed) and the limit counts that namespace's processes only.
If bwrap, the sandbox venv or the namespaces are missing, ``SandboxUnavailable`` says so: never a bare run.
The probe that finds out runs once per venv and process; its answer, a refusal included, is kept.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.sandbox import seccomp
from shared.sandbox.base import (
    SandboxFile,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
    SandboxUnavailable,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-sandbox"
BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
INSIDE_BOOTSTRAP = "/sandbox/bootstrap.py"
INSIDE_LIB = "/sandbox/lib"
INSIDE_MPLCONFIG = "/sandbox/mplconfig"
MEDIA_TYPES = {
    ".png": "image/png",
    ".csv": "text/csv",
    ".json": "application/json",
    ".txt": "text/plain",
    ".svg": "image/svg+xml",
}
# Room in /tmp beyond the files the code may return (matplotlib's cache, scratch files).
TMP_HEADROOM_BYTES = 32 * 1024 * 1024
# The envelope holds the result and base64 files: its cap follows the file cap, plus room for the result.
ENVELOPE_EXTRA_BYTES = 2 * 1024 * 1024
# Root mode: each run gets a uid of its own (none of them in /etc/passwd), so RLIMIT_NPROC counts one run.
RUN_UID_BASE = 1_500_000_000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
READ_CHUNK = 65536
# How long bwrap gets to reap a killed sandbox (and so report its CPU) before its whole group is killed.
KILL_GRACE_SECONDS = 2.0


def _run_uid() -> int:
    """A uid no other live run of this host uses (pid and a counter mixed into a private range)."""
    with _uid_lock:
        n = next(_uid_counter)
    return RUN_UID_BASE + ((os.getpid() & 0xFFFF) << 8) + (n & 0xFF)


@dataclass(frozen=True)
class _Runtime:
    """What a run binds and starts: found once per venv by ``_runtime``."""

    bwrap: str
    prefix: Path  # the interpreter's installation, bound read-only at the same path
    executable: Path
    site_packages: Path
    as_root: bool
    mplconfig: Path | None = None  # matplotlib's prebuilt font list, when `make sandbox` made one


def _read_pyvenv(venv: Path) -> dict[str, str]:
    """The key = value lines of a venv's pyvenv.cfg."""
    cfg = venv / "pyvenv.cfg"
    if not cfg.is_file():
        raise SandboxUnavailable(f"the sandbox venv {venv} is missing: run `make sandbox`")
    pairs = (line.split("=", 1) for line in cfg.read_text(encoding="utf-8").splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _locate(venv: Path) -> _Runtime:
    """Find bwrap, the interpreter behind the venv and its site-packages (no process started)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: the sandbox cannot isolate code")
    cfg = _read_pyvenv(venv)
    executable = Path(cfg.get("executable") or Path(cfg["home"]) / "python3").resolve()
    version = ".".join(cfg.get("version", "").split(".")[:2]) or "3"
    site_packages = venv / "lib" / f"python{version}" / "site-packages"
    if not executable.is_file() or not site_packages.is_dir():
        raise SandboxUnavailable(f"the sandbox venv {venv} is incomplete: run `make sandbox`")
    if os.geteuid() == 0 and not seccomp.supported():
        # Root mode relies on the filter to keep the code from making user namespaces (see seccomp.py).
        raise SandboxUnavailable("running as root, the sandbox needs its seccomp filter (x86_64, aarch64 only)")
    mplconfig = venv / "mplconfig"
    found = mplconfig if mplconfig.is_dir() else None
    return _Runtime(bwrap, executable.parent.parent, executable, site_packages, os.geteuid() == 0, found)


_runtimes: dict[Path, _Runtime | SandboxUnavailable] = {}
_runtimes_lock = threading.Lock()


def _runtime(venv: Path) -> _Runtime:
    """The runtime for ``venv``, probed once (a trivial run must succeed) and cached, failures included."""
    with _runtimes_lock:
        if venv not in _runtimes:
            _runtimes[venv] = _probe(venv)
        found = _runtimes[venv]
    if isinstance(found, SandboxUnavailable):
        raise SandboxUnavailable(str(found))
    return found


def _probe(venv: Path) -> _Runtime | SandboxUnavailable:
    """Locate the parts and prove isolation works on this machine with one trivial run."""
    try:
        runtime = _locate(venv)
    except SandboxUnavailable as exc:
        return exc
    probe = _execute(runtime, SandboxRequest(code="result = 1"), SandboxLimits(wall_seconds=20))
    if probe.status != "ok" or probe.result != 1:
        # bwrap's own complaint (say, "No permissions to create new namespace") arrives on the output.
        detail = " / ".join(part.strip() for part in (probe.stdout, probe.error or "") if part.strip())[-500:]
        return SandboxUnavailable(f"bubblewrap cannot isolate code on this machine (user namespaces?): {detail}")
    return runtime


def _root_binds() -> list[str]:
    """/usr read-only, and /lib, /lib64, /bin, /sbin as the links (or read-only dirs) the host has."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


def _mount_points(path: Path) -> list[str]:
    """Make ``path``'s parents traversable by the run's uid (bwrap would make them 0700, root's only)."""
    args: list[str] = []
    for parent in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _command(
    runtime: _Runtime, limits: SandboxLimits, fds: tuple[int, int | None], uid: int | None = None
) -> list[str]:
    """The bwrap command line for one run: ``fds`` are the envelope's (written by the bootstrap) and the
    seccomp program's; ``uid`` is the one the bootstrap drops to (root mode)."""
    envelope_fd, seccomp_fd = fds
    args = [runtime.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    # --as-pid-1: the bootstrap is bwrap's direct child, so wait4 on bwrap reports the CPU of the whole run.
    args += ["--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv"]
    if runtime.as_root:
        # Only what the bootstrap needs to drop to the run's uid; it loses both when it does.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns"]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/.matplotlib",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += _root_binds()
    if not runtime.prefix.is_relative_to("/usr"):
        args += _mount_points(runtime.prefix)
        args += ["--ro-bind", str(runtime.prefix), str(runtime.prefix)]
    args += [
        *_mount_points(Path(INSIDE_LIB)),
        "--ro-bind",
        str(runtime.site_packages),
        INSIDE_LIB,
        "--ro-bind",
        str(BOOTSTRAP),
        INSIDE_BOOTSTRAP,
    ]
    if runtime.mplconfig is not None:
        args += ["--ro-bind", str(runtime.mplconfig), INSIDE_MPLCONFIG]
    args += ["--proc", "/proc", "--dev", "/dev"]
    tmp_size = limits.max_file_bytes + TMP_HEADROOM_BYTES
    args += ["--perms", "1777", "--size", str(tmp_size), "--tmpfs", "/tmp"]
    # /dev is a tmpfs of its own: read-only, or it would be unbounded memory outside RLIMIT_AS.
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    python = [str(runtime.executable), "-I", "-S", "-B", "-X", "utf8"]
    return [*args, "--", *python, INSIDE_BOOTSTRAP, str(envelope_fd), str(uid if uid is not None else "-")]


@dataclass
class _Collected:
    """What the parent read from one run."""

    output: bytearray = field(default_factory=bytearray)
    envelope: bytearray = field(default_factory=bytearray)
    killed_for: str | None = None  # "timeout" or a limit's message
    output_over: bool = False


def _pump(
    proc: subprocess.Popen[bytes], envelope_r: int, stdin: bytes, deadline: float, limits: SandboxLimits
) -> _Collected:
    """Feed stdin, read output and envelope with caps; stop at the wall deadline, an excess or both EOFs."""
    assert proc.stdin is not None and proc.stdout is not None  # noqa: S101 - both are pipes by construction
    got = _Collected()
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
    sel.register(proc.stdout.fileno(), selectors.EVENT_READ, "output")
    sel.register(envelope_r, selectors.EVENT_READ, "envelope")
    pending = memoryview(stdin)
    try:
        while got.killed_for is None and _reading(sel):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                got.killed_for = "timeout"
                break
            for key, _ in sel.select(remaining):
                if key.data == "stdin":
                    pending = _write_some(sel, key.fd, pending)
                    if not pending:
                        proc.stdin.close()
                else:
                    _read_some(sel, key.fd, key.data, got, limits)
    finally:
        sel.close()
    return got


def _read_some(sel: selectors.BaseSelector, fd: int, which: str, got: _Collected, limits: SandboxLimits) -> None:
    """Read one chunk of output or envelope; flag the run for killing when a cap is passed."""
    chunk = os.read(fd, READ_CHUNK)
    if not chunk:
        sel.unregister(fd)
        return
    if which == "output":
        got.output += chunk
        if len(got.output) > limits.max_output_bytes:
            got.output_over = True
            got.killed_for = f"output limit of {limits.max_output_bytes} bytes (stdout + stderr) exceeded"
        return
    got.envelope += chunk
    cap = limits.max_file_bytes * 4 // 3 + ENVELOPE_EXTRA_BYTES
    if len(got.envelope) > cap:
        got.killed_for = f"result and files larger than {cap} bytes"


def _reading(sel: selectors.BaseSelector) -> bool:
    """Whether a read side (output or envelope) is still open."""
    return any(key.data != "stdin" for key in sel.get_map().values())


def _write_some(sel: selectors.BaseSelector, fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes; all is done (empty) once written or once the sandbox stopped reading."""
    try:
        written = os.write(fd, pending[:READ_CHUNK])
    except BrokenPipeError:
        written = len(pending)
    except BlockingIOError:
        return pending
    pending = pending[written:]
    if not pending:
        sel.unregister(fd)
    return pending


def _kill_inside(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's children (the bootstrap, with --as-pid-1): bwrap then reaps them and reports their CPU."""
    try:
        text = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text(encoding="ascii")
    except OSError:
        return
    for pid in (int(p) for p in text.split()):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _kill_all(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's process group; --die-with-parent and the pid namespace take everything inside along."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def _reap(proc: subprocess.Popen[bytes], deadline: float, kill: bool) -> tuple[int, int, bool]:
    """Wait for bwrap until ``deadline`` (killing it then), or kill at once; (exit code, CPU ms, timed out).

    A run that closed its pipes but lives on is still held to its wall time here.
    """
    timed_out = False
    if kill:
        _kill_inside(proc)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= deadline:
            timed_out = not kill
            _kill_all(proc)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, int((usage.ru_utime + usage.ru_stime) * 1000), timed_out


def _seccomp_fd() -> int | None:
    """A pipe's read end holding the seccomp program for bwrap (small enough never to block), if there is one."""
    if not seccomp.supported():
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, seccomp.program())
    finally:
        os.close(write_end)
    return read_end


def _spawn(runtime: _Runtime, limits: SandboxLimits, uid: int | None) -> tuple[subprocess.Popen[bytes], int]:
    """Start bwrap with an empty environment; returns the process and the envelope's read end."""
    envelope_r, envelope_w = os.pipe()
    filter_fd = _seccomp_fd()
    try:
        proc = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
            _command(runtime, limits, (envelope_w, filter_fd), uid),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={},
            start_new_session=True,
            pass_fds=(envelope_w,) if filter_fd is None else (envelope_w, filter_fd),
        )
    except BaseException:
        os.close(envelope_r)
        raise
    finally:
        os.close(envelope_w)
        if filter_fd is not None:
            os.close(filter_fd)
    return proc, envelope_r


class _EnvelopeFile(BaseModel):
    """A file as the bootstrap reports it (untrusted: re-checked here)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=255)
    size: int = Field(ge=0)
    data_b64: str | None = None


class _Envelope(BaseModel):
    """The bootstrap's report (untrusted: it shares a process with the code)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "error", "limit"]
    result: Any = None
    error: str | None = Field(default=None, max_length=4000)
    files: list[_EnvelopeFile] = Field(default_factory=list)


def _parse_envelope(raw: bytes) -> _Envelope | None:
    """The envelope, or None when there is none or it is not one (non-finite numbers read as null)."""
    if not raw:
        return None
    try:
        return _Envelope.model_validate(json.loads(raw, parse_constant=lambda _: None))
    except (ValueError, ValidationError, RecursionError):  # the code can write a forged, deeply nested one
        return None


def _died(exit_code: int, cpu_ms: int, limits: SandboxLimits) -> tuple[SandboxStatus, str]:
    """Why a run ended without an envelope: a CPU or memory limit's signal, or a plain exit."""
    code = exit_code - 128 if exit_code > 128 else -exit_code  # bwrap reports a signal as 128 + its number
    if code == signal.SIGXCPU or cpu_ms >= limits.cpu_seconds * 1000:
        return "limit", f"CPU time limit of {limits.cpu_seconds:g} s exceeded"
    if code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS):
        return "limit", f"the code was killed by signal {code} (memory limit of {limits.memory_mb} MB?)"
    return "error", f"the code ended without a result (exit code {exit_code})"


def _media_type(name: str) -> str | None:
    """The media type of a returned file by its extension; None for any other kind (not returned)."""
    if any(part in ("", ".", "..") for part in name.split("/")) or not name.isprintable():
        return None
    return MEDIA_TYPES.get(Path(name).suffix.lower())


def _files(reported: list[_EnvelopeFile], limits: SandboxLimits) -> tuple[list[SandboxFile], str | None]:
    """The files to return, checked against the caps here (sizes recounted from the decoded bytes)."""
    files: list[SandboxFile] = []
    total = 0
    for item in reported:
        total += item.size
        if len(files) >= limits.max_files or total > limits.max_file_bytes or item.data_b64 is None:
            return files, f"file limit exceeded: at most {limits.max_files} files, {limits.max_file_bytes} bytes"
        media_type = _media_type(item.name)
        if media_type is None:
            continue
        try:
            data = base64.b64decode(item.data_b64, validate=True)
        except ValueError:
            continue
        if len(data) != item.size:
            continue
        files.append(SandboxFile(name=item.name, media_type=media_type, size=len(data), data_b64=item.data_b64))
    return files, None


def _outcome(got: _Collected, exit_code: int, usage: tuple[int, int], limits: SandboxLimits) -> SandboxResult:
    """The result of one run from what was read and how the sandbox ended."""
    cpu_ms, wall_ms = usage
    common: dict[str, Any] = {
        "stdout": bytes(got.output[: limits.max_output_bytes]).decode("utf-8", errors="replace"),
        "stdout_truncated": got.output_over,
        "cpu_ms": cpu_ms,
        "wall_ms": wall_ms,
    }
    if got.killed_for == "timeout":
        return SandboxResult(status="timeout", error=f"wall time limit of {limits.wall_seconds:g} s exceeded", **common)
    if got.killed_for is not None:
        return SandboxResult(status="limit", error=got.killed_for, **common)
    envelope = _parse_envelope(bytes(got.envelope))
    if envelope is None:
        status, error = _died(exit_code, cpu_ms, limits)
        return SandboxResult(status=status, error=error, **common)
    files, over = _files(envelope.files, limits)
    if over is not None and envelope.status == "ok":
        return SandboxResult(status="limit", error=over, files=files, **common)
    return SandboxResult(status=envelope.status, result=envelope.result, error=envelope.error, files=files, **common)


def _execute(runtime: _Runtime, request: SandboxRequest, limits: SandboxLimits) -> SandboxResult:
    """One run: start the sandbox, feed it, collect, kill whatever is left, reap and describe."""
    uid = _run_uid() if runtime.as_root else None
    payload = {"code": request.code, "inputs": request.inputs, "limits": limits.model_dump()}
    try:
        stdin = json.dumps(payload).encode("utf-8")
    except (TypeError, ValueError) as exc:  # inputs are the caller's: say which part is not JSON
        return SandboxResult(status="error", error=f"the inputs are not JSON: {exc}")
    started = time.monotonic()
    try:
        proc, envelope_r = _spawn(runtime, limits, uid)
    except OSError as exc:
        raise SandboxUnavailable(f"bubblewrap could not be started: {exc}") from exc
    got = _Collected(killed_for="interrupted")
    try:
        got = _pump(proc, envelope_r, stdin, started + limits.wall_seconds, limits)
    finally:
        os.close(envelope_r)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        exit_code, cpu_ms, timed_out = _reap(proc, started + limits.wall_seconds, got.killed_for is not None)
    if timed_out:
        got.killed_for = "timeout"
    wall_ms = int((time.monotonic() - started) * 1000)
    return _outcome(got, exit_code, (cpu_ms, wall_ms), limits)


class LocalSandbox:
    """The local backend: each run in a fresh bubblewrap sandbox with the venv's libraries read-only."""

    def __init__(self, venv: Path | None = None) -> None:
        """Use ``venv`` (default: the repo's .venv-sandbox, built by `make sandbox`) for the libraries."""
        self.venv = (venv or DEFAULT_VENV).absolute()

    def available(self) -> bool:
        """Whether this machine can isolate (probed once per venv, then cached)."""
        try:
            _runtime(self.venv)
        except SandboxUnavailable:
            return False
        return True

    def run(self, request: SandboxRequest, limits: SandboxLimits) -> SandboxResult:
        """Run the request's code in a new sandbox; SandboxUnavailable when this machine cannot isolate."""
        return _execute(_runtime(self.venv), request, limits)
