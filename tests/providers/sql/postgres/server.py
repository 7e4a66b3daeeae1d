"""A real PostgreSQL server from Debian's packages, started by the tests themselves on loopback.

``initdb`` into a fresh temporary directory, ``pg_ctl start`` on a free 127.0.0.1 port (the Unix socket in
the same directory), ``pg_ctl stop`` at the end. PostgreSQL refuses to run as root: under root (CI) the
server runs as the ``postgres`` user that Debian's package creates (``runuser``), in a directory it owns.
The superuser reaches the server over the Unix socket (trust); every other role logs in over TCP with a
password (SCRAM), as the app would.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

INSTALL_HINT = "install Debian's 'postgresql' package (make install / scripts/install-system-deps.sh do)"


def find_bindir() -> Path | None:
    """The directory of initdb and pg_ctl: Debian keeps them under /usr/lib/postgresql/<version>/bin."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One throw-away PostgreSQL cluster; ``start()`` then ``stop()``."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="durable-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = 0
        self.superuser = "postgres"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            # PostgreSQL will not run as root: hand the directory to the unprivileged postgres user.
            account = pwd.getpwnam("postgres")
            os.chown(self.base, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as_user, *args], capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log}")

    def start(self) -> PostgresServer:
        """initdb, then start on a free loopback port (a few tries: the port may be taken meanwhile)."""
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.superuser, "-E", "UTF8", "--no-locale",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync",
        )  # fmt: skip
        for attempt in range(3):
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c shared_buffers=16MB -c max_connections=30 -c logging_collector=off"
            )
            try:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                          "-o", options, "start")  # fmt: skip
                return self
            except RuntimeError:
                if attempt == 2:
                    raise
        return self

    def stop(self) -> None:
        """Stop the server at once and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)

    def admin(self, dbname: str = "postgres") -> Any:
        """A superuser connection over the Unix socket (autocommit)."""
        import psycopg

        return psycopg.connect(host=str(self.base), port=self.port, user=self.superuser, dbname=dbname,
                               autocommit=True)  # fmt: skip


def new_password() -> str:
    """A random password made at run time (no secret is stored in the repository)."""
    return secrets.token_urlsafe(18)
