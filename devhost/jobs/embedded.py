"""A devhost running inside this process, on a background thread (used by ``ask`` when no host runs)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn

from devhost.functions.http.keys import load_or_create_keys
from devhost.serve import ServeOptions, bind_socket, run_host


@dataclass
class EmbeddedHost:
    """A started in-process host."""

    url: str
    function_key: str
    thread: threading.Thread
    servers: list[uvicorn.Server] = field(default_factory=list)
    result: list[int] = field(default_factory=list)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut the host down gracefully and wait for its thread."""
        for server in self.servers:
            server.should_exit = True
        self.thread.join(timeout_s)

    def wait(self) -> None:
        """Block until Ctrl+C (or the host stops by itself)."""
        try:
            while self.thread.is_alive():
                self.thread.join(0.5)
        except KeyboardInterrupt:
            pass


def start_embedded_host(app_dir: Path, data_dir: Path, *, port: int = 0, timeout_s: float = 60.0) -> EmbeddedHost:
    """Load the app and serve it on loopback (the given port if free, else any) from a background thread."""
    options = ServeOptions(
        app_dir=app_dir, data_dir=data_dir, host="127.0.0.1", port=0, auth=True, grace_s=5.0, verbose=False
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    keys = load_or_create_keys(data_dir)
    try:
        public = bind_socket("127.0.0.1", port)
    except OSError:
        public = bind_socket("127.0.0.1", 0)
    rpc = bind_socket("127.0.0.1", 0)
    port, rpc_port = public.getsockname()[1], rpc.getsockname()[1]
    errors: list[BaseException] = []
    host = EmbeddedHost(url=f"http://127.0.0.1:{port}", function_key=keys.function_key, thread=threading.Thread())

    def run() -> None:
        try:
            host.result.append(
                asyncio.run(
                    run_host(
                        options,
                        public,
                        rpc,
                        port,
                        rpc_port,
                        None,
                        install_signals=False,
                        on_started=host.servers.append,
                    )
                )
            )
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)
        finally:
            public.close()
            rpc.close()

    host.thread = threading.Thread(target=run, name="devhost-embedded", daemon=True)
    host.thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if errors:
            raise RuntimeError(f"the host failed to start: {errors[0]}") from errors[0]
        try:
            headers = {"x-functions-key": keys.master_key}
            if httpx.get(f"{host.url}/admin/host/status", headers=headers, timeout=1.0).status_code == 200:
                return host
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    host.stop()
    raise RuntimeError(f"the host did not become ready within {timeout_s:.0f} s")
