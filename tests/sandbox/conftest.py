"""Fixtures of the sandbox tests: the local bubblewrap sandbox, and a check that no run leaves a process behind.

The tests need bubblewrap and ``.venv-sandbox`` (``make sandbox``). ``make test`` builds it first and sets
``SANDBOX_REQUIRED=1``, so a machine that cannot isolate fails the run there instead of skipping silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from shared.sandbox.base import SandboxLimits, SandboxRequest, SandboxResult
from shared.sandbox.local import RUN_UID_BASE, LocalSandbox


class Runner(Protocol):
    """The ``run`` fixture: one sandbox run of ``code`` with named inputs."""

    def __call__(self, code: str, limits: SandboxLimits | None = None, **inputs: object) -> SandboxResult: ...


@pytest.fixture(scope="session")
def local_sandbox() -> LocalSandbox:
    """The local sandbox on the repo's .venv-sandbox; skipped (or failed, when required) if it cannot isolate."""
    sandbox = LocalSandbox()
    if not sandbox.available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return sandbox


def _run_uids_alive() -> list[int]:
    """Processes still running under a run uid this test process handed out (root mode only)."""
    low = RUN_UID_BASE + ((os.getpid() & 0xFFFF) << 8)
    alive = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if low <= int(uid_line.split()[1]) < low + 256:
            alive.append(int(status.parent.name))
    return alive


@pytest.fixture
def run(local_sandbox: LocalSandbox) -> Iterator[Runner]:
    """``run(code, limits=..., **inputs)``: one sandbox run; after the test, no process of it may be left."""

    def _run(code: str, limits: SandboxLimits | None = None, **inputs: object) -> SandboxResult:
        return local_sandbox.run(SandboxRequest(code=code, inputs=inputs), limits or SandboxLimits())

    yield _run
    assert _run_uids_alive() == [], "a sandboxed process outlived its run"
