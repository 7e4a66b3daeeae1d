"""Run public Durable Functions Python sample apps under devhost, unchanged, and check their results.

Used by scripts/check-public-samples.sh (which fetches the repositories); not part of `make test`.
`python scripts/check_public_samples.py <samples-dir>`: each subdirectory named below is one app copied
out of its repository; the apps are served one at a time on loopback (`--port 0 --no-keys`, a fresh
`--data`), each check drives the app's HTTP starter and reads the Durable status until the instance ends.
Prints one line per check and exits 1 when any fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

_BANNER = re.compile(r"Host started on (http://[^\s]+)")
_TERMINAL = {"Completed", "Failed", "Terminated"}
REPO_ROOT = Path(__file__).resolve().parents[1]
AZURITE_BLOB = Path(
    os.environ.get("AZURITE_BLOB") or REPO_ROOT / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
)
# Azurite's published development account (a well-known constant, not a secret).
_DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class CheckFailed(AssertionError):
    """A sample's result differs from what the sample says it returns."""


@dataclass
class Host:
    """One devhost process serving one sample app."""

    base: str
    client: httpx.Client
    apps_root: Path
    storage: str | None = None  # the AzureWebJobsStorage connection the app got (Azurite), if any

    def start(self, path: str, method: str = "POST", **kw: Any) -> dict[str, Any]:
        """Call an HTTP starter; returns the check-status payload (202 expected)."""
        resp = self.client.request(method, self.base + path, **kw)
        if resp.status_code != 202:
            raise CheckFailed(f"{method} {path} -> {resp.status_code} {resp.text[:300]}")
        body: dict[str, Any] = resp.json()
        return body

    def status(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The current status through the payload's statusQueryGetUri."""
        body: dict[str, Any] = self.client.get(payload["statusQueryGetUri"]).json()
        return body

    def wait(self, payload: dict[str, Any], timeout_s: float = 60.0, until: set[str] | None = None) -> dict[str, Any]:
        """Poll the status URL until the instance reaches one of ``until`` (default: ended)."""
        wanted = until or _TERMINAL
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status(payload)
            if st.get("runtimeStatus") in wanted:
                return st
            if time.monotonic() > deadline:
                raise CheckFailed(f"instance {payload['id']} still {st.get('runtimeStatus')} after {timeout_s}s")
            time.sleep(0.2)

    def post_event(self, payload: dict[str, Any], name: str, data: Any) -> None:
        """Raise an event through the payload's sendEventPostUri."""
        url = payload["sendEventPostUri"].replace("{eventName}", name)
        resp = self.client.post(url, content=json.dumps(data), headers={"Content-Type": "application/json"})
        if resp.status_code != 202:
            raise CheckFailed(f"raiseEvent {name} -> {resp.status_code}")


def expect(cond: bool, what: str) -> None:
    """Raise CheckFailed with ``what`` unless ``cond``."""
    if not cond:
        raise CheckFailed(what)


def completed_with(h: Host, payload: dict[str, Any], output: Any) -> None:
    """The instance completes with exactly ``output``."""
    st = h.wait(payload)
    expect(st["runtimeStatus"] == "Completed", f"status {st['runtimeStatus']}: {str(st.get('output'))[:400]}")
    expect(st["output"] == output, f"output {st['output']!r} != {output!r}")


Check = Callable[[Host], str]
CHECKS: dict[str, list[tuple[str, Check]]] = {}
# Apps that the real stack refuses at start too: app -> (text devhost must print, why)
REFUSED: dict[str, tuple[str, str]] = {}


BLOB_APPS: set[str] = set()


def needs_blob_storage(app: str) -> None:
    """The app keeps its own blobs in AzureWebJobsStorage: it runs against Azurite (make azurite)."""
    BLOB_APPS.add(app)


@contextmanager
def azurite_blob(work: Path) -> Iterator[str]:
    """Azurite's blob service on a free loopback port, data under ``work``; yields its connection string."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    work.mkdir(parents=True, exist_ok=True)
    args = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--skipApiVersionCheck"]
    proc = subprocess.Popen(
        [str(AZURITE_BLOB), *args, "--silent", "--location", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise CheckFailed("Azurite did not start") from None
                time.sleep(0.2)
        yield (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={_DEV_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        )
    finally:
        proc.terminate()
        proc.wait(30)


def refused(app: str, text: str, why: str) -> None:
    """Register an app that must be refused at start with ``text`` in the output."""
    REFUSED[app] = (text, why)


def check(app: str, name: str) -> Callable[[Check], Check]:
    """Register a check of one pattern of one app."""

    def deco(fn: Check) -> Check:
        CHECKS.setdefault(app, []).append((name, fn))
        return fn

    return deco


def serve(app_dir: Path, data_dir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start devhost on the app; returns the process and its base URL once it answers."""
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost",
            "serve",
            "--app",
            str(app_dir),
            "--port",
            "0",
            "--no-keys",
            "--data",
            str(data_dir),
        ],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = _BANNER.search(log_path.read_text(errors="replace"))
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise CheckFailed("host did not start: " + log_path.read_text(errors="replace")[-2000:])


def run_app(app: str, app_dir: Path, work: Path) -> list[tuple[str, str, str]]:
    """Serve one app and run its checks; returns (check, PASS/FAIL/SKIP, detail) rows."""
    if app not in BLOB_APPS:
        return _serve_and_check(app, app_dir, work, None)
    if not AZURITE_BLOB.exists():
        return [("blob storage", "SKIP", f"needs Azurite ({AZURITE_BLOB} missing: run make azurite)")]
    try:
        storage = azurite_blob(work / f"{app}-azurite")
        conn = storage.__enter__()
    except CheckFailed as exc:
        return [("blob storage", "FAIL", str(exc))]
    try:
        # local.settings.json is the developer's own (git-ignored) file: the copy gets one naming Azurite.
        settings = {"IsEncrypted": False, "Values": {"AzureWebJobsStorage": conn, "FUNCTIONS_WORKER_RUNTIME": "python"}}
        (app_dir / "local.settings.json").write_text(json.dumps(settings), encoding="utf-8")
        return _serve_and_check(app, app_dir, work, conn)
    finally:
        storage.__exit__(None, None, None)


def _serve_and_check(app: str, app_dir: Path, work: Path, storage: str | None) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    log_path = work / f"{app}.log"
    try:
        proc, base = serve(app_dir, work / f"{app}-data", log_path)
    except CheckFailed as exc:
        if app in REFUSED and REFUSED[app][0] in str(exc):
            return [("refused at start", "PASS", REFUSED[app][1])]
        return [("start", "FAIL", str(exc))]
    if app in REFUSED:
        proc.terminate()
        proc.wait(30)
        return [("refused at start", "FAIL", "devhost started it")]
    try:
        with httpx.Client(timeout=30) as client:
            host = Host(base, client, app_dir.parent, storage)
            for name, fn in CHECKS.get(app, []):
                try:
                    rows.append((name, "PASS", fn(host)))
                except (CheckFailed, httpx.HTTPError, KeyError, ValueError) as exc:
                    rows.append((name, "FAIL", f"{type(exc).__name__}: {exc}"))
    finally:
        proc.terminate()
        proc.wait(30)
    return rows


def main(argv: list[str]) -> int:
    """Run every registered app found under argv[1]."""
    import public_sample_checks  # noqa: F401  (registers the checks)

    root = Path(argv[1])
    only = set(argv[2:])
    failed = 0
    with tempfile.TemporaryDirectory(prefix="devhost-samples-") as tmp:
        for app in sorted(set(CHECKS) | set(REFUSED) | BLOB_APPS):
            if only and app not in only:
                continue
            app_dir = root / app
            if not (app_dir / "function_app.py").is_file():
                print(f"{app:40} SKIP  (not under {root})")
                continue
            for name, verdict, detail in run_app(app, app_dir, Path(tmp)):
                failed += verdict == "FAIL"
                print(f"{app:40} {verdict}  {name}: {detail}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.modules.setdefault("check_public_samples", sys.modules["__main__"])
    sys.exit(main(sys.argv))
