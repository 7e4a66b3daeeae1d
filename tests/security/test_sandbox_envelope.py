"""The summary a run reports from inside an Azure dynamic session is untrusted (it shares the interpreter
with the model's code): the client re-checks it, each barrier on its own. Forged summaries here are
printed by the code itself, which swaps ``sys.stdout`` so the runner's report is replaced, against the fake pool
on loopback (tests/fakes/sessions_server.py) that runs the posted runner for real."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.sandbox.azure_sessions import MARKER, AzureSessionsSandbox
from shared.sandbox.base import SandboxLimits, SandboxRequest, SandboxResult
from shared.sandbox.local import LocalSandbox
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.sessions_server import FakeSessionsPool

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool() -> Iterator[FakeSessionsPool]:
    with FakeSessionsPool() as fake:
        yield fake


def forged(pool: FakeSessionsPool, summary: Any, setup: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run code that writes ``setup``'s files, then makes the runner print ``summary`` (or raw text) as its report."""
    line = MARKER + (summary if isinstance(summary, str) else json.dumps(summary))
    code = (
        f"{setup}\nimport sys\n"
        "class Forger:\n"
        "    def __init__(self, real): self.real = real\n"
        f"    def write(self, text): return self.real.write({line!r} if {MARKER!r} in text else text)\n"
        "    def flush(self): self.real.flush()\n"
        "sys.stdout = Forger(sys.stdout)\n"
    )
    box = AzureSessionsSandbox(
        pool.endpoint,
        StaticTokenCredential(pool.token),
        "job-forge",
        verify=ssl.create_default_context(cafile=pool.ca_file),
    )
    return box.run(SandboxRequest(code=code), limits or SandboxLimits())


def test_the_file_cap_counts_the_bytes_downloaded_not_the_sizes_reported(pool: FakeSessionsPool) -> None:
    summary = {"status": "ok", "error": None, "result": 1, "files": [["big.txt", 1]]}
    got = forged(pool, summary, "open('big.txt', 'w').write('x' * 5000)", SandboxLimits(max_file_bytes=100))
    assert got.status == "limit" and got.files == []


def test_a_negative_reported_size_does_not_buy_room(pool: FakeSessionsPool) -> None:
    summary = {"status": "ok", "error": None, "result": 1, "files": [["a.txt", -10_000_000], ["b.txt", 10]]}
    setup = "open('a.txt', 'w').write('x' * 60)\nopen('b.txt', 'w').write('y' * 60)"
    got = forged(pool, summary, setup, SandboxLimits(max_file_bytes=100))
    assert got.status in ("error", "limit") and got.files == []


@pytest.mark.parametrize("name", ["../in-x.json", "run-x/../../etc", "a/b.txt", "..", "x\x00.txt", "\\..\\x.txt"])
def test_a_reported_file_name_with_path_parts_is_never_fetched(pool: FakeSessionsPool, name: str) -> None:
    pool.calls.clear()
    got = forged(pool, {"status": "ok", "error": None, "result": 1, "files": [[name, 1]]})
    assert got.files == []
    assert not any(c.path.startswith("/files/content") for c in pool.calls)


@pytest.mark.parametrize(
    "summary",
    [
        {"status": "ok", "files": "not a list"},
        {"status": "ok", "files": [["a.txt"]]},
        {"status": "ok", "files": [["a.txt", "ten"]]},
        {"status": "ok", "error": {"not": "text"}},
        {"status": "ok", "files": [["f.txt", 1]] * 5000},
        [1, 2, 3],
        '{"status": "ok", "result": ' + "[" * 40_000 + "]" * 40_000 + "}",
    ],
)
def test_a_malformed_summary_is_an_error_result_not_a_crash(pool: FakeSessionsPool, summary: Any) -> None:
    got = forged(pool, summary, "open('f.txt', 'w').write('x')")
    assert got.status in ("error", "limit") and got.files == []


def test_a_deeply_nested_envelope_from_the_local_sandbox_is_an_error_not_a_crash() -> None:
    sandbox = LocalSandbox(REPO_ROOT / ".venv-sandbox")
    if not sandbox.available():
        pytest.skip("the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)")
    # The code writes its own envelope on the bootstrap's fd (argv[1]) and exits before the bootstrap does.
    deep = '{"status": "ok", "result": ' + "[" * 200_000 + "]" * 200_000 + "}"
    code = f"import os, sys\nos.write(int(sys.argv[1]), {deep.encode()!r})\nos._exit(0)\n"
    got = sandbox.run(SandboxRequest(code=code), SandboxLimits())
    assert got.status == "error" and got.result is None
