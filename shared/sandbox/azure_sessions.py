"""The sandbox on Azure: Container Apps dynamic sessions (a code interpreter session pool) over their REST API.

Each session is a Hyper-V isolated Python interpreter; the pool allocates one per identifier on first use
and frees it after its cooldown. One job is one session (``identifier`` derived from the job id), so steps
of a job share an interpreter and its ``/mnt/data``: every run therefore works in files of its own
(``in-<run>.json``, ``out-<run>-<name>``) and returns only those. One run is:

1. ``POST {endpoint}/files/upload`` the inputs as ``in-<run>.json`` (multipart);
2. ``POST {endpoint}/code/execute`` a small runner (inline, synchronous) that loads the inputs (SQL-shaped
   ones as pandas DataFrames when pandas is there, else lists of dicts), runs the code in a fresh namespace
   inside a fresh directory, and prints a JSON summary on its last stdout line, after a marker: status, the
   code's ``result``, the error's last lines (frames of the code only), the files it wrote;
3. ``GET {endpoint}/files/content/out-<run>-<name>`` for each file.

Every call carries ``api-version=2024-02-02-preview`` and ``identifier`` in the query and a bearer token of
the app's managed identity for ``https://dynamicsessions.io/.default`` (the identity needs the "Azure
ContainerApps Session Executor" role on the pool). CPU, memory and processes are bounded by the session
itself; wall time, output size and files by this client.
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.sandbox.base import SandboxFile, SandboxLimits, SandboxRequest, SandboxResult, SandboxUnavailable

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings

API_VERSION = "2024-02-02-preview"
SCOPE = "https://dynamicsessions.io/.default"
# Media types the runner reports by extension (the executor decides again from the name).
_MEDIA = {".png": "image/png", ".csv": "text/csv", ".json": "application/json", ".txt": "text/plain"}

# Starts the runner's summary line on stdout (what the code printed comes before it).
MARKER = "\n@@sandbox-summary@@"
# Runs inside the session: the code arrives as a JSON string, never spliced into the runner's own source.
RUNNER = r"""
import json as _j, os as _o, traceback as _t
def _summary(_run, _code):
    _root = "/mnt/data" if _o.path.isdir("/mnt/data") else _o.getcwd()
    with open(_o.path.join(_root, "in-" + _run + ".json"), encoding="utf-8") as _f:
        _inputs = _j.load(_f)
    try:
        import pandas as _pd
    except Exception:
        _pd = None
    _g = {"__name__": "__main__"}
    for _k, _v in _inputs.items():
        if isinstance(_v, dict) and set(_v) == {"columns", "rows"}:
            _rows = [dict(zip(_v["columns"], _r)) for _r in _v["rows"]]
            _v = _pd.DataFrame(_rows, columns=_v["columns"]) if _pd is not None else _rows
        _g[_k] = _v
    _out = _o.path.join(_root, "run-" + _run)
    _o.makedirs(_out, exist_ok=True)
    _here = _o.getcwd()
    _o.chdir(_out)
    _status, _error = "ok", None
    try:
        exec(compile(_code, "<code>", "exec"), _g)
    except BaseException as _e:
        _status = "error"
        _frames = [_x for _x in _t.extract_tb(_e.__traceback__) if _x.filename == "<code>"]
        _lines = _t.format_list(_frames) + _t.format_exception_only(type(_e), _e)
        _error = "".join(_lines)[-2000:]
    finally:
        _o.chdir(_here)
    _files = []
    for _n in sorted(_o.listdir(_out)):
        _p = _o.path.join(_out, _n)
        if _o.path.isfile(_p) and not _o.path.islink(_p):
            _o.replace(_p, _o.path.join(_root, "out-" + _run + "-" + _n))
            _files.append([_n, _o.path.getsize(_o.path.join(_root, "out-" + _run + "-" + _n))])
    _res = _g.get("result")
    try:
        _j.dumps(_res, allow_nan=False)
    except Exception:
        _res = repr(_res)[:16000]
    return _j.dumps({"status": _status, "error": _error, "result": _res, "files": _files})
"""


def session_identifier(job_id: str) -> str:
    """The session of one job: a stable, opaque identifier (the job id is not sent as such)."""
    return "job-" + hashlib.sha256(job_id.encode("utf-8")).hexdigest()[:40]


class AzureSessionsSandbox:
    """One job's session in a code interpreter session pool."""

    def __init__(
        self,
        endpoint: str,
        credential: TokenCredential,
        job_id: str,
        *,
        verify: bool | ssl.SSLContext = True,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.credential = credential
        self.identifier = session_identifier(job_id)
        self.verify = verify

    @classmethod
    def from_settings(
        cls, settings: Settings, job_id: str, credential: TokenCredential, *, verify: bool | ssl.SSLContext = True
    ) -> AzureSessionsSandbox:
        """The sandbox for SANDBOX_SESSIONS_ENDPOINT; the credential and TLS trust come from the client factory."""
        if not settings.sandbox_sessions_endpoint:
            raise SandboxUnavailable("SANDBOX_PROVIDER=azure_sessions needs SANDBOX_SESSIONS_ENDPOINT")
        if not settings.sandbox_sessions_endpoint.startswith("https://"):
            raise SandboxUnavailable("SANDBOX_SESSIONS_ENDPOINT must be an https:// URL")
        return cls(settings.sandbox_sessions_endpoint, credential, job_id, verify=verify)

    def run(self, request: SandboxRequest, limits: SandboxLimits) -> SandboxResult:
        """Upload the inputs, run the code through the runner, download what it wrote."""
        started = time.monotonic()
        try:
            token = self.credential.get_token(SCOPE).token
        except Exception as exc:  # azure-identity raises its own types; the contract has one code for them
            raise ProviderError(ErrorCode.AUTH_FAILED, f"no token for the session pool: {exc}"[:500]) from exc
        try:
            return self._run(request, limits, token, started)
        except httpx.TransportError as exc:
            raise ProviderError(ErrorCode.TRANSIENT, f"the session pool could not be reached: {exc}"[:500]) from exc

    def _run(self, request: SandboxRequest, limits: SandboxLimits, token: str, started: float) -> SandboxResult:
        run_id = uuid.uuid4().hex[:16]
        headers = {"Authorization": f"Bearer {token}"}
        timeout = httpx.Timeout(limits.wall_seconds + 10, connect=10)
        with httpx.Client(headers=headers, timeout=timeout, verify=self.verify) as client:
            inputs = json.dumps(request.inputs, allow_nan=False).encode("utf-8")
            files = {"file": (f"in-{run_id}.json", inputs, "application/json")}
            self._check(client.post(self._url("files/upload"), files=files))
            code = f"{RUNNER}\nprint({json.dumps(MARKER)} + _summary({json.dumps(run_id)}, {json.dumps(request.code)}))"
            body = {"properties": {"codeInputType": "inline", "executionType": "synchronous", "code": code}}
            try:
                response = client.post(self._url("code/execute"), json=body, timeout=limits.wall_seconds)
            except httpx.TimeoutException:
                return _ended("timeout", f"the code ran longer than {limits.wall_seconds:g} s", started)
            properties = self._check(response).get("properties") or {}
            return self._result(client, run_id, properties, limits, started)

    def _url(self, path: str) -> str:
        return f"{self.endpoint}/{path}?api-version={API_VERSION}&identifier={self.identifier}"

    def _check(self, response: httpx.Response) -> dict[str, Any]:
        """The JSON body of a successful call; ProviderError with the contract's code otherwise."""
        status = response.status_code
        if status < 300:
            data = response.json() if response.content else {}
            return data if isinstance(data, dict) else {}
        text = response.text[:300]
        if status == 429:
            retry = response.headers.get("retry-after", "")
            after = int(float(retry) * 1000) if retry.replace(".", "", 1).isdigit() else 1000
            raise ProviderError(ErrorCode.RATE_LIMITED, f"the session pool is throttling: {text}", retry_after_ms=after)
        if status in (401, 403):
            raise ProviderError(
                ErrorCode.AUTH_FAILED, f"the session pool refused the app's identity ({status}): {text}"
            )
        if status >= 500:
            raise ProviderError(ErrorCode.UPSTREAM_ERROR, f"the session pool failed ({status}): {text}")
        raise ProviderError(ErrorCode.BAD_REQUEST, f"the session pool rejected the call ({status}): {text}")

    def _result(
        self, client: httpx.Client, run_id: str, properties: dict[str, Any], limits: SandboxLimits, started: float
    ) -> SandboxResult:
        """The SandboxResult of one execution: the runner's summary, bounded output, the files downloaded."""
        printed, marked, tail = str(properties.get("stdout") or "").rpartition(MARKER)
        if not marked:
            printed, tail = tail, ""
        stdout = printed + str(properties.get("stderr") or "")
        cut = len(stdout.encode("utf-8")) > limits.max_output_bytes
        stdout = stdout.encode("utf-8")[: limits.max_output_bytes].decode("utf-8", "ignore")
        cpu_ms = int(properties.get("executionTimeInMilliseconds") or 0)
        summary = _summary_of(tail)
        if str(properties.get("status", "")).lower() != "success" or summary is None:
            error = str(properties.get("stderr") or properties.get("result") or "the session did not run the code")
            return _ended("error", error[-2000:], started, stdout=stdout, cut=cut, cpu_ms=cpu_ms)
        files, problem = self._files(client, run_id, summary, limits)
        if problem is not None:
            return _ended("limit", problem, started, stdout=stdout, cut=cut, cpu_ms=cpu_ms)
        return SandboxResult(
            status=summary.status,
            stdout=stdout,
            stdout_truncated=cut,
            result=summary.result,
            files=files,
            error=summary.error,
            wall_ms=int((time.monotonic() - started) * 1000),
            cpu_ms=cpu_ms,
        )

    def _files(
        self, client: httpx.Client, run_id: str, summary: _Summary, limits: SandboxLimits
    ) -> tuple[list[SandboxFile], str | None]:
        """The files the summary names, checked here: plain names only, the caps on the bytes downloaded."""
        written = summary.files
        problem = f"the code wrote {len(written)} files, {sum(s for _, s in written)} bytes (limits: "
        problem += f"{limits.max_files} files, {limits.max_file_bytes} bytes)"
        if len(written) > limits.max_files or sum(s for _, s in written) > limits.max_file_bytes:
            return [], problem
        files: list[SandboxFile] = []
        room = limits.max_file_bytes
        for name in (n for n, _size in written if _plain_name(n)):
            got = self._download(client, run_id, name, room)
            if got is None:  # the reported sizes were not the real ones
                return [], f"the files are larger than the limit of {limits.max_file_bytes} bytes"
            room -= got.size
            files.append(got)
        return files, None

    def _download(self, client: httpx.Client, run_id: str, name: str, room: int) -> SandboxFile | None:
        """One file, or None as soon as it is larger than ``room`` bytes (read no further)."""
        data = bytearray()
        with client.stream("GET", self._url(f"files/content/out-{run_id}-{name}")) as response:
            if response.status_code >= 300:
                response.read()
                self._check(response)
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > room:
                    return None
        dot = name.rfind(".")
        media = _MEDIA.get(name[dot:].lower(), "application/octet-stream") if dot >= 0 else "application/octet-stream"
        return SandboxFile(name=name, media_type=media, size=len(data), data_b64=base64.b64encode(data).decode())


class _Summary(BaseModel):
    """The runner's report (untrusted: it shares the interpreter with the code, which can print a forged one)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["ok", "error"]
    error: str | None = Field(default=None, max_length=4000)
    result: Any = None
    files: list[tuple[Annotated[str, Field(max_length=255)], Annotated[int, Field(ge=0)]]] = Field(default_factory=list)


def _summary_of(tail: str) -> _Summary | None:
    """The summary after the marker, or None when there is none or it is not one (non-finite numbers: null)."""
    try:
        return _Summary.model_validate(json.loads(tail.strip() or "null", parse_constant=lambda _: None))
    except (ValueError, ValidationError, RecursionError):
        return None


def _plain_name(name: str) -> bool:
    """Whether a reported name is one file of the run's out dir (no path parts, nothing unprintable)."""
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name and name.isprintable()


def _ended(
    status: str, error: str, started: float, *, stdout: str = "", cut: bool = False, cpu_ms: int = 0
) -> SandboxResult:
    return SandboxResult.model_validate(
        {
            "status": status,
            "stdout": stdout,
            "stdout_truncated": cut,
            "error": error,
            "wall_ms": int((time.monotonic() - started) * 1000),
            "cpu_ms": cpu_ms,
        }
    )
