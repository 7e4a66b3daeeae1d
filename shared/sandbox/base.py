"""The sandbox contract every backend honours: a request, its limits, the result, and the refusal to run.

Code given to a sandbox is untrusted (a model wrote it). A backend either runs it behind a real isolation
boundary and answers a ``SandboxResult`` (never raising for anything the code did), or raises
``SandboxUnavailable`` when the machine cannot isolate: callers then refuse (CONFIG_ERROR), never run bare.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

SandboxStatus = Literal["ok", "error", "timeout", "limit"]


class SandboxLimits(BaseModel):
    """What one run may use; anything beyond ends the run with status ``limit`` or ``timeout``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_seconds: float = Field(default=10, gt=0)
    wall_seconds: float = Field(default=30, gt=0)
    # Address space (RLIMIT_AS locally). numpy's BLAS needs ~150 MB of it: below that, its import spins
    # until the CPU limit ends the run.
    memory_mb: int = Field(default=512, gt=0)
    max_processes: int = Field(default=16, gt=0)
    # stdout + stderr kept; the rest is dropped and the result says so (stdout_truncated).
    max_output_bytes: int = Field(default=64_000, gt=0)
    # The total size of the files the code writes.
    max_file_bytes: int = Field(default=5_000_000, ge=0)
    max_files: int = Field(default=20, ge=0)


class SandboxRequest(BaseModel):
    """The code to run and its named inputs (JSON values; SQL rows as ``{"columns": [...], "rows": [[...]]}``).

    Inside, a SQL-shaped input is a pandas DataFrame when pandas is available (else a list of dicts); the
    script sets a variable named ``result`` (JSON-serialisable) to return a value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    inputs: dict[str, Any] = Field(default_factory=dict)


class SandboxFile(BaseModel):
    """One file the code wrote to its out dir, returned base64-encoded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    media_type: str
    size: int
    data_b64: str


class SandboxResult(BaseModel):
    """What a run produced; ``error`` holds the traceback's last lines or the limit hit, never sandbox frames."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: SandboxStatus
    stdout: str = ""
    stdout_truncated: bool = False
    result: Any = None
    files: list[SandboxFile] = Field(default_factory=list)
    error: str | None = None
    wall_ms: int = 0
    cpu_ms: int = 0


class SandboxUnavailable(Exception):
    """The machine cannot isolate (no bubblewrap, no user namespaces): callers map it to CONFIG_ERROR."""


class Sandbox(Protocol):
    """A backend that runs one request under its limits behind an isolation boundary."""

    def run(self, request: SandboxRequest, limits: SandboxLimits) -> SandboxResult:
        """Run the request's code; raise SandboxUnavailable only when it cannot isolate."""
        ...
