"""devhost/azurite.py: Azurite from npm starts on free loopback ports, serves the development account, keeps
its data under its location, and leaves no process behind (stop, context exit, or its starter killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

from devhost.storage.azurite import ACCOUNT_NAME, Azurite, AzuriteError
from tests.devhost.hostproc import REPO_ROOT


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_the_shared_fixture_serves_the_development_account(azurite: Azurite) -> None:
    """The connection string reaches a blob service on loopback with the devstoreaccount1 key."""
    assert f"AccountName={ACCOUNT_NAME};" in azurite.connection_string
    assert azurite.url("blob").startswith("http://127.0.0.1:")
    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = service.get_container_client("azurite-fixture")
    container.create_container()
    container.upload_blob("hello.txt", b"hello")
    assert container.download_blob("hello.txt").readall() == b"hello"
    assert service.account_name == ACCOUNT_NAME


def test_stop_ends_the_process_group_and_data_survives_a_restart(tmp_path: Path) -> None:
    """Free ports each start; stop() leaves no process; a new Azurite on the same location sees the blobs."""
    location = tmp_path / "storage"
    with Azurite(location) as first:
        pid = first.pid
        assert pid is not None and _alive(pid)
        assert os.getpgid(pid) == pid  # its own process group
        service = BlobServiceClient.from_connection_string(first.connection_string)
        service.create_container("kept").upload_blob("a.txt", b"persisted")
    assert _wait_gone(pid), "Azurite survived its context"
    assert first.pid is None
    with pytest.raises(AzuriteError, match="not running"):
        _ = first.connection_string
    with Azurite(location) as second:
        service = BlobServiceClient.from_connection_string(second.connection_string)
        assert service.get_container_client("kept").download_blob("a.txt").readall() == b"persisted"
        with pytest.raises(ResourceNotFoundError):
            service.get_container_client("kept").download_blob("missing.txt").readall()
    first.stop()  # idempotent


_STARTER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from azure.storage.blob import BlobServiceClient
    from devhost.storage.azurite import Azurite
    emulator = Azurite(Path(sys.argv[1])).start()
    service = BlobServiceClient.from_connection_string(emulator.connection_string)
    service.create_container("last").upload_blob("words.txt", b"written just before the end")
    print(emulator.pid, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)  # a normal exit without stop(): the atexit hook ends it
    time.sleep(600)
    """
)


@pytest.mark.parametrize("ending", ["kill", "exit"])
def test_no_orphan_when_the_starter_is_killed_or_exits(tmp_path: Path, ending: str) -> None:
    """A host killed with SIGKILL, or one that exits without stopping it, takes Azurite with it, and
    Azurite still closes cleanly, so what was written just before is there at the next start."""
    location = tmp_path / "storage"
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, str(location), ending], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        if ending == "kill":
            assert _alive(pid)
            starter.send_signal(signal.SIGKILL)
        starter.wait(30)
        assert _wait_gone(pid), f"Azurite (pid {pid}) outlived its starter ({ending})"
    finally:
        starter.kill()
        starter.wait()
    assert "Blob service successfully closed" in (location / "azurite.log").read_text(encoding="utf-8")
    with Azurite(location) as again:
        service = BlobServiceClient.from_connection_string(again.connection_string)
        assert service.get_blob_client("last", "words.txt").download_blob().readall() == b"written just before the end"


def test_a_missing_or_broken_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DEVHOST_AZURITE at a non-executable is refused; an emulator that exits at start reports its output."""
    monkeypatch.setenv("DEVHOST_AZURITE", str(tmp_path / "nope"))
    with pytest.raises(AzuriteError, match="not an executable"):
        Azurite(tmp_path / "a").start()
    fake = tmp_path / "azurite"
    fake.write_text("#!/bin/sh\necho 'port in use' >&2\nexit 3\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("DEVHOST_AZURITE", str(fake))
    emulator = Azurite(tmp_path / "b")
    with pytest.raises(AzuriteError, match=r"exited with code 3:\nport in use"):
        emulator.start()
    assert emulator.pid is None
