"""The local sandbox's own checks, without a sandbox: refusing to run when it cannot isolate, and reading what a
run reports (the envelope is untrusted: it shares a process with the code)."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.sandbox.base import SandboxLimits, SandboxRequest, SandboxUnavailable
from shared.sandbox.local import LocalSandbox, _Collected, _outcome

LIMITS = SandboxLimits(max_files=2, max_file_bytes=100, max_output_bytes=50)


def _fake_venv(root: Path) -> Path:
    """A venv-shaped directory whose interpreter is this one (enough for the checks before any run)."""
    venv = root / "venv"
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    executable = Path(os.path.realpath(sys.executable))
    (venv / "pyvenv.cfg").write_text(f"home = {executable.parent}\nversion = 3.11.7\nexecutable = {executable}\n")
    return venv


def _collected(envelope: object, output: bytes = b"") -> _Collected:
    got = _Collected()
    got.output += output
    got.envelope += json.dumps(envelope).encode() if not isinstance(envelope, bytes) else envelope
    return got


def _file(name: str, data: bytes) -> dict[str, object]:
    return {"name": name, "size": len(data), "data_b64": base64.b64encode(data).decode()}


def test_missing_venv_refuses_to_run(tmp_path: Path) -> None:
    """Without the sandbox venv there is no run at all, and the message says how to build it."""
    with pytest.raises(SandboxUnavailable, match="make sandbox"):
        LocalSandbox(tmp_path / "nothing").run(SandboxRequest(code="result = 1"), SandboxLimits())


def test_missing_bubblewrap_refuses_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bwrap on PATH the sandbox refuses (never a bare exec), and keeps refusing (the probe is cached)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox = LocalSandbox(_fake_venv(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        sandbox.run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert sandbox.available() is False


@pytest.mark.slow
def test_bubblewrap_that_cannot_isolate_is_probed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When bwrap fails (user namespaces off), the sandbox says why, and the probe is not repeated per run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    bwrap = bin_dir / "bwrap"
    # bwrap's own message when the kernel refuses a user namespace.
    refusal = "bwrap: No permissions to create new namespace"
    bwrap.write_text(f"#!/bin/sh\necho x >> {calls}\necho '{refusal}' >&2\nexit 1\n")
    bwrap.chmod(bwrap.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))
    sandbox = LocalSandbox(_fake_venv(tmp_path))
    for _ in range(3):
        with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace"):
            sandbox.run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert calls.read_text().count("x") == 1


def test_limits_are_validated_and_frozen() -> None:
    """Limits are positive numbers, fixed once made."""
    with pytest.raises(ValidationError):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValidationError):
        SandboxLimits(max_processes=-1)
    with pytest.raises(ValidationError):
        SandboxLimits(memroy_mb=5)  # type: ignore[call-arg]
    limits = SandboxLimits()
    with pytest.raises(ValidationError):
        limits.cpu_seconds = 100


def test_an_ok_envelope_becomes_the_result() -> None:
    """Status, result and files come through; non-finite numbers read as null; media types by extension."""
    got = _collected(
        b'{"status": "ok", "result": {"x": NaN, "y": 2}, "files": '
        + json.dumps([_file("a.png", b"p")]).encode()
        + b"}",
        b"hi",
    )
    result = _outcome(got, 0, (12, 34), LIMITS)
    assert result.status == "ok"
    assert result.result == {"x": None, "y": 2}
    assert result.stdout == "hi" and not result.stdout_truncated
    assert [(f.name, f.media_type, f.size) for f in result.files] == [("a.png", "image/png", 1)]
    assert (result.cpu_ms, result.wall_ms) == (12, 34)


def test_files_past_the_caps_are_a_limit() -> None:
    """More files than allowed, or more bytes, and the run is a limit (the caps re-checked here)."""
    three = [_file(f"{i}.txt", b"x") for i in range(3)]
    result = _outcome(_collected({"status": "ok", "files": three}), 0, (0, 0), LIMITS)
    assert result.status == "limit" and len(result.files) == 2
    assert "at most 2 files" in (result.error or "")
    big = [_file("big.csv", b"x" * 101)]
    assert _outcome(_collected({"status": "ok", "files": big}), 0, (0, 0), LIMITS).status == "limit"
    lied = [{"name": "small.csv", "size": 1, "data_b64": base64.b64encode(b"x" * 500).decode()}]
    assert _outcome(_collected({"status": "ok", "files": lied}), 0, (0, 0), LIMITS).files == []


@pytest.mark.parametrize(
    "name", ["../evil.png", "/etc/x.png", "a/../../b.png", "x.exe", "noext", "bad\x00.png", "c.PNG "]
)
def test_unsafe_or_unknown_file_names_are_dropped(name: str) -> None:
    """A name that climbs out, is absolute, holds control characters or has another type is not returned."""
    result = _outcome(_collected({"status": "ok", "files": [_file(name, b"x")]}), 0, (0, 0), LIMITS)
    assert result.status == "ok"
    assert result.files == []


def test_bad_base64_is_dropped() -> None:
    """A file whose data is not base64 is not returned."""
    files = [{"name": "a.txt", "size": 3, "data_b64": "!!!"}]
    assert _outcome(_collected({"status": "ok", "files": files}), 0, (0, 0), LIMITS).files == []


@pytest.mark.parametrize(
    "envelope",
    [
        b"",
        b"not json",
        b'{"status": "root"}',
        b'{"status": "ok", "extra": 1}',
        b"[1, 2]",
        b'{"status": "ok", "files": 3}',
    ],
)
def test_a_missing_or_forged_envelope_is_an_error(envelope: bytes) -> None:
    """No envelope, or one that is not the bootstrap's shape, is an error that says the run gave no result."""
    result = _outcome(_collected(envelope), 1, (0, 0), LIMITS)
    assert result.status == "error"
    assert result.error == "the code ended without a result (exit code 1)"
    assert result.result is None


def test_signals_without_an_envelope_name_the_limit() -> None:
    """SIGXCPU or CPU spent to the limit is the CPU limit; SIGKILL otherwise is named with the memory limit."""
    assert _outcome(_collected(b""), 128 + signal.SIGXCPU, (10, 0), LIMITS).error == "CPU time limit of 10 s exceeded"
    assert _outcome(_collected(b""), -signal.SIGKILL, (10_000, 0), LIMITS).status == "limit"
    killed = _outcome(_collected(b""), 128 + signal.SIGKILL, (10, 0), LIMITS)
    assert killed.status == "limit" and "signal 9" in (killed.error or "")


def test_output_and_timeouts_as_the_parent_saw_them() -> None:
    """A run the parent killed reports why; output past its cap is cut and flagged."""
    got = _collected(b"", b"x" * 80)
    got.output_over, got.killed_for = True, "output limit of 50 bytes (stdout + stderr) exceeded"
    result = _outcome(got, -9, (0, 0), LIMITS)
    assert (result.status, len(result.stdout), result.stdout_truncated) == ("limit", 50, True)
    timed = _collected(b"")
    timed.killed_for = "timeout"
    assert _outcome(timed, -9, (0, 30_000), LIMITS).error == "wall time limit of 30 s exceeded"
