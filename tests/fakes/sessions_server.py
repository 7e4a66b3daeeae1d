"""A fake Azure Container Apps dynamic sessions pool (code interpreter) on loopback, speaking its REST API.

Routes (each needs ``api-version=2024-02-02-preview`` and ``identifier`` in the query and the bearer token):
``POST /code/execute`` (``{"properties": {"codeInputType": "inline", "executionType": "synchronous",
"code"}}`` → ``{"properties": {"status", "stdout", "stderr", "result", "executionTimeInMilliseconds"}}``),
``POST /files/upload`` (multipart ``file``) and ``GET /files/content/{name}``. One directory per identifier
stands for a session's ``/mnt/data``.

How it runs code: in a plain ``python3`` subprocess whose working directory is that session directory, with a
time limit. It is NOT an isolation boundary (the real service is a Hyper-V sandbox): it runs only what this
app's own tests send, to check the client's wire protocol, the runner's behaviour and the results end to end.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

API_VERSION = "2024-02-02-preview"


@dataclass
class Call:
    """One request as the fake saw it."""

    method: str
    path: str
    identifier: str
    body: Any = None


@dataclass
class FakeSessionsPool:
    """The pool: sessions by identifier, what was called, and faults to inject."""

    token: str = "sessions-token-1"
    calls: list[Call] = field(default_factory=list)
    # Status codes the next execute calls answer with instead of running (e.g. [429]).
    fail_next: list[int] = field(default_factory=list)
    time_limit_s: float = 60.0
    # The interpreter a session runs (the real pool's image has numpy, pandas and matplotlib).
    python: str = sys.executable

    def __post_init__(self) -> None:
        self._root = tempfile.TemporaryDirectory(prefix="fake-sessions-")
        app = Starlette(
            routes=[
                Route("/code/execute", self.execute, methods=["POST"]),
                Route("/files/upload", self.upload, methods=["POST"]),
                Route("/files/content/{name}", self.download, methods=["GET"]),
            ]
        )
        self.server = LoopbackServer(app, name="fake-sessions", tls=True)

    @property
    def endpoint(self) -> str:
        """The pool management endpoint."""
        return self.server.origin

    @property
    def ca_file(self) -> str:
        """The certificate clients must trust."""
        assert self.server.ca_file is not None
        return self.server.ca_file

    def __enter__(self) -> FakeSessionsPool:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self._root.cleanup()

    def session_dir(self, identifier: str) -> Path:
        """The ``/mnt/data`` of one session (made on first use, as the pool allocates a session)."""
        path = Path(self._root.name) / identifier
        path.mkdir(exist_ok=True)
        return path

    def _refusal(self, request: Request) -> Response | None:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": {"code": "Unauthorized"}}, status_code=401)
        if request.query_params.get("api-version") != API_VERSION:
            return JSONResponse({"error": {"code": "InvalidApiVersion"}}, status_code=400)
        if not request.query_params.get("identifier"):
            return JSONResponse({"error": {"code": "MissingIdentifier"}}, status_code=400)
        return None

    async def execute(self, request: Request) -> Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        body = await request.json()
        identifier = request.query_params["identifier"]
        self.calls.append(Call("POST", "/code/execute", identifier, body))
        if self.fail_next:
            status = self.fail_next.pop(0)
            return JSONResponse({"error": {"code": "Injected"}}, status_code=status, headers={"retry-after": "1"})
        props = body.get("properties") or {}
        if props.get("codeInputType") != "inline" or props.get("executionType") != "synchronous":
            return JSONResponse({"error": {"code": "InvalidExecutionRequest"}}, status_code=400)
        return JSONResponse({"properties": self._run(identifier, str(props.get("code") or ""))})

    def _run(self, identifier: str, code: str) -> dict[str, Any]:
        started = time.monotonic()
        try:
            done = subprocess.run(
                [self.python, "-I", "-c", code],
                cwd=self.session_dir(identifier),
                capture_output=True,
                text=True,
                timeout=self.time_limit_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"status": "Failure", "stdout": "", "stderr": "execution timed out", "result": None}
        return {
            "$id": "1",
            "status": "Success" if done.returncode == 0 else "Failure",
            "stdout": done.stdout,
            "stderr": done.stderr,
            "result": None,
            "executionTimeInMilliseconds": int((time.monotonic() - started) * 1000),
        }

    async def upload(self, request: Request) -> Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        identifier = request.query_params["identifier"]
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str) or not upload.filename:
            return JSONResponse({"error": {"code": "MissingFile"}}, status_code=400)
        name = Path(upload.filename).name
        data = await upload.read()
        (self.session_dir(identifier) / name).write_bytes(data)
        self.calls.append(Call("POST", "/files/upload", identifier, name))
        entry = {"properties": {"filename": name, "size": len(data), "lastModifiedTime": "2026-01-01T00:00:00Z"}}
        return JSONResponse({"value": [entry]})

    async def download(self, request: Request) -> Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        identifier = request.query_params["identifier"]
        name = request.path_params["name"]
        self.calls.append(Call("GET", f"/files/content/{name}", identifier))
        path = self.session_dir(identifier) / Path(name).name
        if not path.is_file():
            return JSONResponse({"error": {"code": "FileNotFound"}}, status_code=404)
        return Response(path.read_bytes(), media_type="application/octet-stream")
