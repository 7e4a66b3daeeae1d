"""llama.cpp's OpenAI-compatible server (llama-cpp-python) with Gemma 3 270M, as a loopback subprocess.

The tier's venv (``.venv-realmodel``, built by ``scripts/install-realmodel.sh``) holds the server and
the model; the app under test runs in the project venv and reaches the server only over HTTP, through
the real ``openai`` SDK, like any deployment would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("REALMODEL_VENV", REPO_ROOT / ".venv-realmodel"))
MODEL_NAME = "gemma-3-270m"
# Gemma's GGUF here has no chat template, and llama.cpp's "gemma" format drops system messages
# silently: chatml keeps them (see docs/settings.md, "A local model").
CHAT_FORMAT = "chatml"


def installed() -> str | None:
    """Why the tier cannot run (None: it can)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        return f"{python} is missing: run scripts/install-realmodel.sh (make realmodel)"
    if not (VENV / "model-path").exists():
        return f"{VENV / 'model-path'} is missing: run scripts/install-realmodel.sh"
    if not model_path().is_file():
        return f"the model {model_path()} is gone: rm {VENV / '.installed'} and run make realmodel"
    return None


def model_path() -> Path:
    """The assembled GGUF file."""
    return Path((VENV / "model-path").read_text().strip())


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One ``python -m llama_cpp.server`` process on a free loopback port."""

    def __init__(self, log_path: Path, *, n_ctx: int = 8192) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.n_ctx = n_ctx
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (``OPENAI_BASE_URL``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        """Start the server and wait until it lists the model."""
        cmd = [
            str(VENV / "bin" / "python"),
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_path()),
            "--model_alias",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            "2",
            "--chat_format",
            CHAT_FORMAT,
            "--verbose",
            "false",
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it; closed with the process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama.cpp server did not start within {timeout_s}s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        """The server's log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """Kill the server at once (a crash, for the mid-stream tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Stop the server (terminate, then kill)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
