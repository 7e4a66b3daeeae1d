"""Escape and abuse attempts: each must end as a result (error, limit or timeout) with a clear error, the
host untouched and no process left behind (the ``run`` fixture checks the last after every test)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from shared.sandbox.base import SandboxLimits
from shared.sandbox.local import REPO_ROOT
from tests.sandbox.conftest import Runner

pytestmark = pytest.mark.slow

SHORT = SandboxLimits(cpu_seconds=2, wall_seconds=20)


def test_loopback_is_unreachable_from_inside(run: Runner) -> None:
    """A socket listening on the host's 127.0.0.1 cannot be reached: the sandbox has its own, empty network."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = "import socket\nsocket.create_connection(('127.0.0.1', port), timeout=5)\nresult = 'connected'"
        result = run(code, SHORT, port=port)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert result.status == "error"
    # 127.0.0.1 inside is the namespace's own loopback, where nothing listens.
    assert "ConnectionRefusedError" in (result.error or "") or "Network is unreachable" in (result.error or "")
    assert result.result is None


def test_no_network_interface_but_its_own_loopback(run: Runner) -> None:
    """The only interface inside is the namespace's own loopback: no route leads anywhere else."""
    code = "import socket\nresult = [name for _, name in socket.if_nameindex()]"
    result = run(code, SHORT)
    assert result.status == "ok", result.error
    assert result.result == ["lo"]
    # An address off loopback has no route at all (nothing is sent: there is no interface to send it on).
    blocked = run("import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=2)", SHORT)
    assert blocked.status == "error"
    assert "Network is unreachable" in (blocked.error or "")


@pytest.mark.parametrize(
    "path",
    [
        str(REPO_ROOT / "function_app.py"),
        str(REPO_ROOT / "local.settings.example.json"),
        str(REPO_ROOT / "shared" / "runtime" / "settings.py"),
        str(REPO_ROOT / ".devhost"),
        "/work",
        "/etc/shadow",
        "/etc/passwd",
        "/root/.bash_history",
        "/var/run/docker.sock",
    ],
)
def test_app_and_host_files_are_not_there(run: Runner, path: str) -> None:
    """The app's files, its settings, the Durable store and the host's /etc are absent inside."""
    code = "import os\nresult = os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read().decode('latin-1')\n"
    code += "if not os.path.exists(p): raise FileNotFoundError(p)"
    result = run(code, SHORT, p=path)
    assert result.status == "error"
    assert "FileNotFoundError" in (result.error or "") or "PermissionError" in (result.error or "")
    assert result.result is None


def test_parent_environment_does_not_leak(run: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret in the parent's environment is in neither os.environ nor any /proc environ inside."""
    secret = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("SANDBOX_TEST_SECRET", secret)
    monkeypatch.setenv("AzureWebJobsStorage", secret)
    code = (
        "import os\n"
        "seen = [repr(dict(os.environ))]\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n"
        "        seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1'))\n"
        "    except OSError as exc:\n"
        "        seen.append(type(exc).__name__)\n"
        "result = {'environ': dict(os.environ), 'seen': seen}\n"
    )
    result = run(code, SHORT)
    assert result.status == "ok", result.error
    assert secret not in repr(result.result)
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "PWD"}
    assert set(result.result["environ"]) <= allowed | {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}


def test_host_processes_are_invisible(run: Runner) -> None:
    """Own pid namespace: the code is pid 1, its parent is outside (0) and /proc lists only itself."""
    code = "import os\nresult = [os.getpid(), os.getppid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]"
    result = run(code, SHORT)
    assert result.status == "ok", result.error
    assert result.result == [1, 0, [1]]


@pytest.mark.parametrize(
    "path",
    ["/usr/evil", "/sandbox/lib/evil.py", "/sandbox/bootstrap.py", "/evil", "/dev/evil", "/proc/sys/kernel/hostname"],
)
def test_writing_outside_tmp_fails(run: Runner, path: str) -> None:
    """Everything but /tmp is read-only (or not the code's to write)."""
    result = run("open(p, 'w').write('x')", SHORT, p=path)
    assert result.status == "error"
    assert any(word in (result.error or "") for word in ("Read-only file system", "PermissionError", "denied"))
    assert not Path(path).exists() or path.startswith("/proc")


def test_the_code_never_runs_as_root(run: Runner) -> None:
    """Not uid 0 inside (root mode: a per-run uid; otherwise the caller's own), and no way back to it."""
    result = run("import os\nresult = os.getuid()\nos.setuid(0)", SHORT)
    assert result.status == "error"
    assert "PermissionError" in (result.error or "")
    if os.geteuid() == 0:
        ok = run("import os\nresult = [os.getuid(), os.getgid(), os.getgroups()]", SHORT)
        assert ok.result is not None and ok.result[0] != 0 and ok.result[1] != 0 and ok.result[2] == []


def test_fork_bomb_is_contained(run: Runner) -> None:
    """Forking forever hits the process limit; the run ends as a limit and every fork dies with it."""
    result = run(
        "import os\nwhile True:\n    os.fork()", SandboxLimits(cpu_seconds=5, wall_seconds=30, max_processes=16)
    )
    assert result.status == "limit"
    assert "process limit of 16" in (result.error or "")


def test_thread_bomb_is_contained(run: Runner) -> None:
    """Threads count as processes: starting them forever hits the same limit."""
    code = (
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()"
    )
    result = run(code, SandboxLimits(cpu_seconds=5, wall_seconds=30, max_processes=16))
    assert result.status == "limit"
    assert "process limit" in (result.error or "")


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(4 * 1024 ** 3)",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
        "import numpy\nx = numpy.ones(10 ** 10)",
    ],
)
def test_memory_bomb_is_contained(run: Runner, code: str) -> None:
    """Allocating past the memory limit fails inside the sandbox (RLIMIT_AS), never on the host."""
    result = run(code, SandboxLimits(cpu_seconds=10, wall_seconds=60, memory_mb=256))
    assert result.status == "limit"
    assert "memory limit of 256 MB" in (result.error or "")


def test_filling_tmp_is_contained(run: Runner) -> None:
    """A file may not grow past the file limit (and /tmp itself is a size-limited tmpfs)."""
    code = "with open('/tmp/big', 'wb') as f:\n    while True:\n        f.write(b'x' * 1_000_000)"
    result = run(code, SandboxLimits(cpu_seconds=10, wall_seconds=30, max_file_bytes=2_000_000))
    assert result.status == "limit"
    assert "file size limit" in (result.error or "")


def test_cpu_loop_hits_the_cpu_limit(run: Runner) -> None:
    """A busy loop ends at its CPU time, counted for the whole run."""
    result = run("while True:\n    pass", SandboxLimits(cpu_seconds=1, wall_seconds=60))
    assert result.status == "limit"
    assert "CPU time limit of 1 s" in (result.error or "")
    # Counted for the run (the kernel's usage figures sample: a little under the limit is normal).
    assert result.cpu_ms >= 500


def test_cpu_loop_ignoring_sigxcpu_is_killed(run: Runner) -> None:
    """Ignoring SIGXCPU does not help: the hard limit one second later kills."""
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = run(code, SandboxLimits(cpu_seconds=1, wall_seconds=60))
    assert result.status == "limit"
    assert "CPU time limit" in (result.error or "")


def test_sleeping_forever_hits_the_wall_time(run: Runner) -> None:
    """Sleeping uses no CPU: the wall time ends it, and the whole sandbox is killed."""
    result = run("import time\ntime.sleep(3600)", SandboxLimits(wall_seconds=2))
    assert result.status == "timeout"
    assert "wall time limit of 2 s" in (result.error or "")


def test_closing_its_pipes_does_not_escape_the_wall_time(run: Runner) -> None:
    """A run that closes stdout, stderr and the envelope fd and lives on is still killed at its wall time."""
    code = (
        "import os, time\nfor fd in range(1, 20):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
    )
    result = run(code + "time.sleep(3600)", SandboxLimits(wall_seconds=2))
    assert result.status == "timeout"


@pytest.mark.parametrize("code", ["print('x' * 10_000_000)", "while True:\n    print('y' * 1000)"])
def test_huge_output_is_cut_and_stopped(run: Runner, code: str) -> None:
    """Output past the cap is dropped, flagged, and the run is stopped as a limit."""
    result = run(code, SandboxLimits(wall_seconds=30, max_output_bytes=10_000))
    assert result.status == "limit"
    assert result.stdout_truncated
    assert len(result.stdout) <= 10_000
    assert "output limit of 10000 bytes" in (result.error or "")


def test_signals_cannot_reach_the_parent(run: Runner) -> None:
    """The parent's pid does not exist inside; its own parent (0) and every-process (-1) reach nothing."""
    code = (
        "import os, signal\n"
        "os.kill(os.getppid(), signal.SIGTERM)\n"  # getppid() is 0: its own group, where it is init
        "os.kill(-1, signal.SIGKILL)\n"
        "os.kill(host_pid, signal.SIGKILL)\n"
    )
    result = run(code, SHORT, host_pid=os.getpid())
    assert result.status == "error"
    assert "ProcessLookupError" in (result.error or "")
    os.kill(os.getpid(), 0)  # still here
    assert signal.getsignal(signal.SIGTERM) is not None


def test_too_many_files_is_a_limit(run: Runner) -> None:
    """Files past the count cap are not returned and the run says which limit it hit."""
    code = "for i in range(25):\n    open(f'f{i:02}.txt', 'w').write(str(i))\nresult = 'wrote'"
    result = run(code, SandboxLimits(max_files=20))
    assert result.status == "limit"
    assert "at most 20 files" in (result.error or "")
    assert len(result.files) == 20


def test_the_host_is_unaffected_after_abuse(run: Runner) -> None:
    """After a fork bomb and a memory bomb, a plain run still works."""
    run("import os\nwhile True:\n    os.fork()", SandboxLimits(cpu_seconds=3, wall_seconds=20))
    run("x = bytearray(8 * 1024 ** 3)", SHORT)
    result = run("result = sum(range(10))", SHORT)
    assert result.status == "ok"
    assert result.result == 45


NEW_USER_NAMESPACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
attempts = {
    "unshare": lambda: libc.unshare(CLONE_NEWUSER),
    "clone": lambda: libc.syscall(CLONE_SYSCALL, CLONE_NEWUSER | 17, 0, 0, 0, 0),
    "clone3": lambda: libc.syscall(435, 0, 0),
}
refused = {}
for name, attempt in attempts.items():
    rc = attempt()
    if rc == 0 and name == "clone":
        os._exit(0)  # the child of a clone that worked
    if rc != -1:
        raise RuntimeError(f"{name} made a user namespace")
    refused[name] = os.strerror(ctypes.get_errno())
raise PermissionError(str(refused))
"""


def test_no_user_namespaces_inside(run: Runner) -> None:
    """The code cannot make a user namespace (and with it mounts that no limit counts): seccomp refuses."""
    import platform  # noqa: PLC0415

    clone = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
    if clone is None:
        pytest.skip("the filter is written for x86_64 and aarch64")
    result = run(NEW_USER_NAMESPACE.replace("CLONE_SYSCALL", str(clone)), SHORT)
    assert result.status == "error"
    assert "PermissionError" in (result.error or ""), result.error
    assert "'unshare': 'Operation not permitted'" in (result.error or "")
    assert "'clone': 'Operation not permitted'" in (result.error or "")
    assert "'clone3': 'Function not implemented'" in (result.error or "")


def test_threads_and_subprocesses_still_work(run: Runner) -> None:
    """The filter leaves ordinary processes and threads alone (glibc falls back from clone3 to clone)."""
    code = (
        "import subprocess, threading\n"
        "out = []\n"
        "t = threading.Thread(target=out.append, args=('thread',))\n"
        "t.start(); t.join()\n"
        "out.append(subprocess.run(['/usr/bin/echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "seccomp = [line.split()[1] for line in open('/proc/self/status') if line.startswith('Seccomp:')]\n"
        "result = out + seccomp\n"
    )
    result = run(code, SHORT)
    assert result.status == "ok", result.error
    assert result.result == ["thread", "child", "2"]  # 2: a filter is on
