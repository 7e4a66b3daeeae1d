"""Azurite, the local Azure Storage emulator (npm), on loopback: start, wait until ready, stop.

``Azurite(location).start()`` runs the pinned npm package (``tools/azurite``, installed by ``make install``)
on free loopback ports for blob, queue and table, keeps its data under ``location`` and its output in
``location/azurite.log``, and waits until the three services listen. ``connection_string`` is the well-known
development account (devstoreaccount1) at those ports. Azurite runs in its own process group, which
``stop()`` ends (SIGTERM, then SIGKILL); on Linux the kernel also sends it SIGTERM when the process that
started it dies (kill -9 included), so no emulator outlives its host and it still saves its data on the way
out. Usable as a context manager.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# The development account every Azure Storage emulator accepts (documented, public, not a secret).
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
ENV_BINARY = "DEVHOST_AZURITE"
LOG_NAME = "azurite.log"
SERVICES = ("blob", "queue", "table")
_REPO_BINARY = Path(__file__).resolve().parents[2] / "tools" / "azurite" / "node_modules" / ".bin" / "azurite"
_LISTENING = re.compile(r"Azurite (Blob|Queue|Table) service is successfully listening at https?://[^\s:]+:(\d+)")
_PR_SET_PDEATHSIG = 1


class AzuriteError(RuntimeError):
    """Azurite is not installed, did not start, or exited; the message says which and how to fix it."""


@dataclass(frozen=True)
class AzuriteEndpoints:
    """The ports Azurite listens on and the connection string of the development account there."""

    host: str
    blob_port: int
    queue_port: int
    table_port: int
    scheme: str = "http"

    def url(self, service: str) -> str:
        """The account URL of one service (``blob``, ``queue`` or ``table``), path-style as Azurite serves it."""
        port = {"blob": self.blob_port, "queue": self.queue_port, "table": self.table_port}[service]
        return f"{self.scheme}://{self.host}:{port}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        """The development account's connection string at these ports."""
        return (
            f"DefaultEndpointsProtocol={self.scheme};AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.url('blob')};QueueEndpoint={self.url('queue')};TableEndpoint={self.url('table')};"
        )


def find_binary() -> Path:
    """The Azurite executable: $DEVHOST_AZURITE, the repo's tools/azurite install, or ``azurite`` on PATH."""
    configured = os.environ.get(ENV_BINARY)
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise AzuriteError(f"{ENV_BINARY}={configured} is not an executable file.")
        return path
    if _REPO_BINARY.is_file():
        return _REPO_BINARY
    found = shutil.which("azurite")
    if found:
        return Path(found)
    raise AzuriteError(
        "Azurite (the local Azure Storage emulator) is not installed: run `make install` "
        "(npm ci in tools/azurite), `npm install -g azurite`, or point DEVHOST_AZURITE at its executable."
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the child when its parent dies: a killed host leaves no emulator behind, and
    SIGTERM (not SIGKILL) lets Azurite save its metadata (it writes it to disk only every 5 s otherwise)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Azurite:
    """One Azurite process on loopback, with its data under ``location``.

    ``tls=(cert, key)`` serves HTTPS (PEM files); ``oauth=True`` also accepts bearer tokens (Azurite's
    ``--oauth basic``: audience, issuer and lifetime are checked, the signature is not), which the SDKs
    send only over TLS.
    """

    def __init__(
        self,
        location: Path,
        *,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 60.0,
        tls: tuple[Path, Path] | None = None,
        oauth: bool = False,
    ) -> None:
        if oauth and tls is None:
            raise AzuriteError("Azurite accepts bearer tokens only over HTTPS: pass tls=(cert, key) with oauth.")
        self.location = Path(location)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.tls = tls
        self.oauth = oauth
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoints: AzuriteEndpoints | None = None

    @property
    def log_path(self) -> Path:
        """Where Azurite's own output goes."""
        return self.location / LOG_NAME

    @property
    def connection_string(self) -> str:
        """The development account's connection string (AzuriteError before start)."""
        return self._require_endpoints().connection_string

    def url(self, service: str) -> str:
        """The account URL of ``blob``, ``queue`` or ``table``."""
        return self._require_endpoints().url(service)

    def _require_endpoints(self) -> AzuriteEndpoints:
        if self.endpoints is None:
            raise AzuriteError("Azurite is not running.")
        return self.endpoints

    def command(self, binary: Path) -> list[str]:
        """The command line: free ports (0), data in ``location``, no telemetry, no access log."""
        return [
            str(binary),
            *(arg for service in SERVICES for arg in (f"--{service}Host", self.host, f"--{service}Port", "0")),
            "--location",
            str(self.location),
            "--skipApiVersionCheck",  # SDKs newer than the emulator send API versions it does not list yet
            "--loose",  # ignore headers the emulator does not implement instead of failing the request
            "--disableTelemetry",  # tests and devhost reach nothing beyond loopback
            "--silent",
            *(("--cert", str(self.tls[0]), "--key", str(self.tls[1])) if self.tls else ()),
            *(("--oauth", "basic") if self.oauth else ()),
        ]

    def start(self) -> Azurite:
        """Start Azurite and wait until blob, queue and table listen; AzuriteError with its output if not."""
        if self.proc is not None:
            return self
        binary = find_binary()
        self.location.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - our own argument list, no shell
                self.command(binary),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.location,
                start_new_session=True,  # its own process group: stop() ends it and anything it spawned
                # Only a prctl, safe between fork and exec. Linux ties it to the starting *thread*: start
                # Azurite from a thread that lives as long as the host (devhost and pytest use the main one).
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        atexit.register(self.stop)
        try:
            self.endpoints = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> AzuriteEndpoints:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            ports = self._listening_ports()
            if len(ports) == len(SERVICES):
                scheme = "https" if self.tls else "http"
                return AzuriteEndpoints(self.host, ports["blob"], ports["queue"], ports["table"], scheme)
            if self.proc.poll() is not None:
                raise AzuriteError(f"Azurite exited with code {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AzuriteError(f"Azurite did not listen within {self.startup_timeout_s:.0f}s:\n{self.output()}")
            time.sleep(0.05)

    def _listening_ports(self) -> dict[str, int]:
        return {m.group(1).lower(): int(m.group(2)) for m in _LISTENING.finditer(self.output())}

    def output(self) -> str:
        """What Azurite printed so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the process group (SIGTERM, then SIGKILL after ``timeout_s``) and wait; idempotent."""
        proc, self.proc = self.proc, None
        self.endpoints = None
        atexit.unregister(self.stop)
        if proc is None:
            return
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
