"""Run ``python -m devhost serve`` as a real subprocess for end-to-end tests.

``DevHostProcess`` starts the host on a free port (``--port 0``; the port is read from the startup
banner, so there is no race on picking a port), waits until ``/admin/host/status`` answers (master key), and offers
an httpx client plus the pinned keys. ``stop()`` sends SIGTERM and waits; ``kill()`` is SIGKILL for
crash tests. Everything the host prints goes to a log file that ``output()`` returns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
APPS_DIR = REPO_ROOT / "tests" / "apps"
_BANNER = re.compile(r"Host started on http://[^:\s]+:(\d+)")


@dataclass(frozen=True)
class Keys:
    """Keys the test host runs with (pinned through the DEVHOST_* environment variables)."""

    master: str
    function: str
    system: str


DEFAULT_KEYS = Keys(
    master="test-master-key-0123456789abcdef",
    function="test-function-key-0123456789abcdef",
    system="test-system-key-0123456789abcdef",
)


class HostStartError(RuntimeError):
    """The host exited or did not become ready; the message carries its output."""


class DevHostProcess:
    """One devhost subprocess."""

    def __init__(
        self,
        app_dir: Path,
        data_dir: Path,
        *,
        log_path: Path | None = None,
        keys: Keys | None = DEFAULT_KEYS,
        no_auth: bool = False,
        extra_args: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        grace_s: float | None = None,
        default_storage: bool = False,
    ) -> None:
        self.app_dir = Path(app_dir)
        self.data_dir = Path(data_dir)
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}.log"
        self.keys = keys
        self.no_auth = no_auth
        self.extra_args = list(extra_args or [])
        self.extra_env = dict(env or {})
        self.grace_s = grace_s
        # devhost gives an app with no AzureWebJobsStorage development storage (Azurite, ~1-2 s per start). Tests
        # whose app uses no storage skip it; default_storage=True keeps what a fresh clone gets.
        self.default_storage = default_storage
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self._client: httpx.Client | None = None
        self._log_file: Any = None

    # ----- lifecycle ----------------------------------------------------------------------

    def command(self) -> list[str]:
        """The command line used to start the host."""
        cmd = [sys.executable, "-m", "devhost", "serve", "--app", str(self.app_dir), "--port", "0"]
        cmd += ["--data", str(self.data_dir)]
        if self.no_auth:
            cmd.append("--no-auth")
        if self.grace_s is not None:
            cmd += ["--grace", str(self.grace_s)]
        if not self.default_storage and not self._asks_for_storage():
            cmd.append("--no-azurite")
        return cmd + self.extra_args

    def _asks_for_storage(self) -> bool:
        """Whether the environment or the app's local.settings.json names any storage (then devhost decides)."""
        settings = {**os.environ, **self.extra_env}
        if any("AzureWebJobsStorage" in k or "UseDevelopmentStorage" in v for k, v in settings.items()):
            return True
        local = self.app_dir / "local.settings.json"
        # Read as bytes: a test may hand devhost a file it must refuse (not UTF-8, not JSON).
        raw = local.read_bytes() if local.is_file() else b""
        return b"AzureWebJobsStorage" in raw or b"UseDevelopmentStorage" in raw

    def environment(self) -> dict[str, str]:
        """Environment for the subprocess: keys pinned, repo importable, unbuffered output."""
        env = dict(os.environ)
        for name in ("DEVHOST_MASTER_KEY", "DEVHOST_FUNCTION_KEY", "DEVHOST_SYSTEM_KEY"):
            env.pop(name, None)
        if self.keys is not None:
            env["DEVHOST_MASTER_KEY"] = self.keys.master
            env["DEVHOST_FUNCTION_KEY"] = self.keys.function
            env["DEVHOST_SYSTEM_KEY"] = self.keys.system
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def launch(self) -> None:
        """Start the process without waiting for readiness."""
        self.port = None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._log_offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.command(),
            cwd=REPO_ROOT,
            env=self.environment(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def start(self, timeout_s: float = 60.0) -> DevHostProcess:
        """Start the host and wait until ``/admin/host/status`` reports Running."""
        self.launch()
        deadline = time.monotonic() + timeout_s
        while self.port is None:
            match = _BANNER.search(self.output(since_launch=True))
            if match:
                self.port = int(match.group(1))
                break
            self._fail_if_exited()
            if time.monotonic() > deadline:
                self.kill()
                raise HostStartError(f"devhost did not print its banner within {timeout_s}s:\n{self.output()}")
            time.sleep(0.05)
        while True:
            try:
                resp = httpx.get(f"{self.base_url}/admin/host/status", headers=self.admin_headers, timeout=5)
                if resp.status_code == 200 and resp.json().get("state") == "Running":
                    return self
            except httpx.TransportError:
                pass
            self._fail_if_exited()
            if time.monotonic() > deadline:
                self.kill()
                raise HostStartError(f"devhost did not become ready within {timeout_s}s:\n{self.output()}")
            time.sleep(0.05)

    def _fail_if_exited(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self._reap()
            raise HostStartError(f"devhost exited with code {code} during start:\n{self.output()}")

    def run_to_exit(self, timeout_s: float = 60.0) -> tuple[int, str]:
        """Run the host expecting it to exit by itself (broken apps); returns (exit code, output)."""
        self.launch()
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise HostStartError(f"devhost kept running for {timeout_s}s:\n{self.output()}") from None
        self._reap()
        return code, self.output()

    def stop(self, timeout_s: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM) and wait; returns the exit code (SIGKILL if it does not stop in time)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self._reap()
        return code

    def kill(self) -> int:
        """SIGKILL (simulated crash) and wait; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        code = self.proc.returncode
        self._reap()
        return code

    def restart(self, timeout_s: float = 60.0) -> DevHostProcess:
        """Stop (if running) and start again on a new port with the same data directory."""
        self.stop()
        return self.start(timeout_s)

    def _reap(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # ----- access ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self.port is not None, "host not started"
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> httpx.Client:
        """An httpx client with the host's base URL (no key attached)."""
        if self._client is None:
            self._client = httpx.Client(base_url=self.base_url, timeout=60)
        return self._client

    def output(self, *, since_launch: bool = False) -> str:
        """Everything the host printed (stdout and stderr)."""
        if not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()
        if since_launch:
            data = data[getattr(self, "_log_offset", 0) :]
        return data.decode("utf-8", errors="replace")

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers carrying the master key (admin APIs such as ``/admin/host/status``); empty without auth."""
        if self.no_auth:
            return {}
        if self.keys is not None:
            return {"x-functions-key": self.keys.master}
        stored = self.data_dir / "keys.json"  # keys generated by the host itself
        try:
            return {"x-functions-key": str(json.loads(stored.read_text(encoding="utf-8"))["masterKey"])}
        except (OSError, ValueError, KeyError):
            return {}

    @property
    def system_code(self) -> dict[str, str]:
        """Query parameters carrying the system key (for webhook calls)."""
        return {"code": self.keys.system} if self.keys else {}

    def webhook(self, path: str) -> str:
        """Absolute URL of a Durable webhook path (``instances/...``)."""
        return f"{self.base_url}/runtime/webhooks/durabletask/{path.lstrip('/')}"

    def rpc_base_url(self) -> str:
        """The loopback RPC base URL the host printed."""
        match = re.search(r"local RPC endpoint \(loopback, no key\): (\S+)", self.output())
        assert match, "RPC endpoint not printed"
        return match.group(1)

    def wait_status(
        self, instance_id: str, until: set[str] | None = None, timeout_s: float = 60.0, **params: Any
    ) -> dict[str, Any]:
        """Poll the webhook status endpoint until the runtime status is in ``until`` (default: terminal)."""
        wanted = until or {"Completed", "Failed", "Terminated", "Canceled"}
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            resp = self.client.get(
                f"/runtime/webhooks/durabletask/instances/{instance_id}", params={**self.system_code, **params}
            )
            if resp.status_code in (200, 202, 500):
                last = resp.json()
                if last.get("runtimeStatus") in wanted:
                    return dict(last)
            time.sleep(0.05)
        raise AssertionError(f"instance {instance_id} did not reach {wanted}; last status {json.dumps(last)}")


@contextmanager
def running_host(app_dir: Path, data_dir: Path, **kwargs: Any) -> Iterator[DevHostProcess]:
    """Context manager: a started host that is stopped (SIGTERM) on exit."""
    host = DevHostProcess(app_dir, data_dir, **kwargs)
    host.start()
    try:
        yield host
    finally:
        host.stop()


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 90.0) -> T:
    """Poll ``probe`` until it returns something truthy (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)
