"""Serving an app: bind the port, start the engine and the HTTP host, run until stopped (devhost serve)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import uvicorn

from devhost.durable.http_api import Engine
from devhost.functions.http.easyauth import ENV_FLAG, EasyAuthSimulation
from devhost.functions.http.keys import (
    ENV_FUNCTION_KEY,
    ENV_MASTER_KEY,
    ENV_SYSTEM_KEY,
    HostKeys,
    KeysError,
    load_or_create_keys,
)
from devhost.functions.http.server import DEVHOST_VERSION, CorsPolicy, DevHost
from devhost.functions.model import AppLoadError, LoadedApp
from devhost.storage.azurite import AzuriteError
from devhost.storage.connections import DevelopmentStorage, start_development_storage

log = logging.getLogger("devhost")


class HostEngine(Engine, Protocol):
    """The engine as the CLI drives it: the HTTP API surface plus start/stop."""

    async def start(self) -> None:
        """Open the store and resume in-flight work."""

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop dispatching; let running work finish for up to ``grace_s`` seconds."""


EngineFactory = Callable[[LoadedApp, Path], HostEngine]


SYNC_MODES = ("normal", "full")


ENV_CORETOOLS = "FUNCTIONS_CORETOOLS_ENVIRONMENT"


EXIT_OK = 0


EXIT_APP_ERROR = 1


EXIT_USAGE = 2


EXIT_PORT = 3


@dataclass(frozen=True)
class ServeOptions:
    """Validated ``serve`` arguments."""

    app_dir: Path
    data_dir: Path
    host: str
    port: int
    auth: bool
    grace_s: float
    verbose: bool
    cors: CorsPolicy | None = None
    sync: str = "normal"
    easy_auth: EasyAuthSimulation | None = None
    reset_store: bool = False
    # Start Azurite when a setting is UseDevelopmentStorage=true (devhost/storage.py); --no-azurite turns it off.
    azurite: bool = True
    # Serve the Durable Task gRPC sidecar protocol (devhost.durable.sidecar) on this port; None: off.
    grpc_port: int | None = None


class SidecarPortError(Exception):
    """The gRPC sidecar port cannot be bound."""


class EngineStartError(Exception):
    """The durable engine could not start (e.g. its store is locked by another host)."""


class _Server(uvicorn.Server):
    """uvicorn server whose signals the CLI handles, so the engine stops after the listeners close."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Do not install uvicorn's handlers (they re-raise the signal after shutdown)."""
        yield


def data_dir_problem(path: Path) -> str | None:
    """Why the host cannot keep its state in ``path`` (None when it can), checked before anything starts."""
    if path.exists() and not path.is_dir():
        return "is not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A write probe, not os.access: root passes os.access on read-only mounts.
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot be used for the host's state ({exc.strerror or exc})"
    return None


def read_host_settings(app_dir: Path) -> dict[str, Any]:
    """The ``Host`` section of ``<app>/local.settings.json`` ({} when absent or unreadable).

    A malformed file is reported by the loader with its reason; here it only means "no settings".
    """
    path = app_dir / "local.settings.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    section = data.get("Host") if isinstance(data, dict) else None
    return section if isinstance(section, dict) else {}


def setting_text(value: Any) -> str | None:
    """A host.json/local.settings value when it is text, else None."""
    return value if isinstance(value, str) else None


def local_port(host_settings: dict[str, Any]) -> int:
    """The port local.settings.json asks for (Host.LocalHttpPort), else 7071."""
    value = host_settings.get("LocalHttpPort")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 7071


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (TCP_NODELAY on what it accepts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto is TCP, and
    # without it h11's separate header and body writes meet delayed ACKs (~40 ms per keep-alive request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def serve(options: ServeOptions, *, engine_factory: EngineFactory | None = None) -> int:
    """Load the app, start the engine and serve until SIGINT/SIGTERM."""
    if not options.app_dir.is_dir():
        print(f"error: app directory {options.app_dir} does not exist", file=sys.stderr)
        return EXIT_USAGE
    try:
        public = bind_socket(options.host, options.port)
    except OSError as exc:
        reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        print(f"error: port {options.port} on {options.host} {reason}; pick another with --port", file=sys.stderr)
        return EXIT_PORT
    rpc = bind_socket("127.0.0.1", int(os.environ.get("DEVHOST_RPC_PORT", "0")))
    port = public.getsockname()[1]
    rpc_port = rpc.getsockname()[1]
    try:
        return asyncio.run(run_host(options, public, rpc, port, rpc_port, engine_factory))
    except AppLoadError as exc:
        print(f"error: the function app in {options.app_dir} cannot be loaded:\n{exc}", file=sys.stderr)
        return EXIT_APP_ERROR
    except KeysError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_APP_ERROR
    except EngineStartError as exc:
        print(f"error: the durable engine cannot start: {exc}", file=sys.stderr)
        return EXIT_APP_ERROR
    except SidecarPortError as exc:
        print(f"error: {exc}; pick another with --grpc-port", file=sys.stderr)
        return EXIT_PORT
    finally:
        public.close()
        rpc.close()


async def run_host(
    options: ServeOptions,
    public: socket.socket,
    rpc: socket.socket,
    port: int,
    rpc_port: int,
    engine_factory: EngineFactory | None,
    *,
    install_signals: bool = True,
    on_started: Callable[[uvicorn.Server], None] | None = None,
) -> int:
    """Run the engine and the HTTP servers until a signal or a stop; the exit code."""
    from devhost.functions.loader import load_local_settings  # noqa: PLC0415 - imported when serving, not at CLI import

    # The worker runs with cwd = app root; azure.durable_functions reads host.json from the cwd at import.
    os.chdir(options.app_dir)
    # What `func start` tells the worker: the app runs locally, so it may check its settings at import
    # and fail the start with a clear error (on Azure the variable is absent).
    os.environ.setdefault(ENV_CORETOOLS, "true")
    if options.easy_auth is not None:
        # What App Service sets when Easy Auth is on; before the import, as the app may read it there.
        os.environ[ENV_FLAG] = "True"
    # The settings first: development storage must be up, and the settings pointing at it, before the import.
    load_local_settings(options.app_dir)
    storage = _start_storage(options)
    try:
        return await _serve_app(
            options, public, rpc, port, rpc_port, engine_factory, install_signals, on_started, storage
        )
    finally:
        if storage is not None:
            storage.stop()


def _start_storage(options: ServeOptions) -> DevelopmentStorage | None:
    if not options.azurite:
        return None
    try:
        return start_development_storage(options.data_dir)
    except AzuriteError as exc:
        raise AppLoadError(f"{exc} (or run with --no-azurite)") from None


async def _serve_app(
    options: ServeOptions,
    public: socket.socket,
    rpc: socket.socket,
    port: int,
    rpc_port: int,
    engine_factory: EngineFactory | None,
    install_signals: bool,
    on_started: Callable[[uvicorn.Server], None] | None,
    storage: DevelopmentStorage | None,
) -> int:
    from devhost.functions.loader import load_app  # noqa: PLC0415

    # A pure durabletask app (gRPC workers only) has no function_app.py: serve no functions then.
    app = load_app(options.app_dir, allow_missing_script=options.grpc_port is not None)
    options.data_dir.mkdir(parents=True, exist_ok=True)
    keys = load_or_create_keys(options.data_dir) if options.auth else None
    if engine_factory is None:
        from devhost.durable.engine import Engine as SqliteEngine  # noqa: PLC0415

        engine: HostEngine = SqliteEngine(
            app, options.data_dir, synchronous=options.sync.upper(), reset_store=options.reset_store
        )
    else:
        engine = engine_factory(app, options.data_dir)
    origin = f"http://{_display_host(options.host)}:{port}"
    host = DevHost(
        app, engine, keys=keys, public_origin=origin, rpc_port=rpc_port, cors=options.cors, easy_auth=options.easy_auth
    )
    attach = getattr(engine, "attach_client", None)
    if callable(attach):  # activities with a durableClient binding call this host's Durable HTTP API
        attach(host.durable.binding_json)
    from devhost.functions.timers import ScheduleError, TimerTriggers  # noqa: PLC0415

    try:
        timers = TimerTriggers(host)
    except ScheduleError as exc:
        raise AppLoadError(str(exc)) from None
    from devhost.storage.triggers import StorageTriggers  # noqa: PLC0415

    storage_triggers = StorageTriggers(host, os.environ, host_id=_host_id(options.app_dir))
    if options.grpc_port is not None:
        workers = getattr(engine, "workers", None)
        if workers is None:
            raise EngineStartError("this engine cannot serve the Durable Task gRPC protocol")
        # Before the start: recovered work of remote instances and entities is the gRPC workers' from the outset.
        workers.enabled = True
    try:
        await engine.start()
    except Exception as exc:
        raise EngineStartError(str(exc)) from exc
    sidecar = await _start_sidecar(options, engine)
    public_server = _Server(_uvicorn_config(host, max(1.0, options.grace_s / 2)))
    # The RPC listener is a separate server so it keeps answering while the public one drains:
    # in-flight client functions still call it during shutdown.
    rpc_server = _Server(_uvicorn_config(host, 1.0))
    if install_signals:
        _install_signal_handlers(public_server)
    rpc_task = asyncio.create_task(rpc_server.serve(sockets=[rpc]))
    timers.start()  # after the RPC listener: timer functions may use the durable client
    storage_triggers.start()
    level = getattr(engine, "synchronous_level", None)
    sync_level = level() if callable(level) else options.sync.upper()
    lines = _storage_lines(storage, storage_triggers)
    if sidecar is not None:
        lines[:0] = [
            f"Durable Task gRPC (sidecar protocol, no auth): 127.0.0.1:{sidecar.port} "
            f'(loopback only; durabletask workers and clients: host_address="localhost:{sidecar.port}")',
            "",
        ]
    _print_banner(options, host, keys, port, rpc_port, sync_level, lines)
    if on_started is not None:
        on_started(public_server)
    try:
        await public_server.serve(sockets=[public])
    finally:
        await timers.stop()
        await storage_triggers.stop(max(1.0, options.grace_s / 2))
        rpc_server.should_exit = True
        await rpc_task
        if sidecar is not None:
            await sidecar.stop(max(1.0, options.grace_s / 2))
        log.info("Stopping the host (grace %.1fs)", options.grace_s)
        await engine.stop(options.grace_s)
        await _close_durable_client_session()
        host.close()
    print("Host stopped.", flush=True)
    return EXIT_OK


async def _start_sidecar(options: ServeOptions, engine: HostEngine) -> Any:
    """The gRPC sidecar endpoint when asked for (after the engine started); raises SidecarPortError."""
    if options.grpc_port is None:
        return None
    from devhost.durable.sidecar.service import SidecarServer  # noqa: PLC0415 - grpc is imported only when asked for

    # Loopback only, whatever --host says: the protocol has no keys here, so only this machine may reach it.
    sidecar = SidecarServer(engine, "127.0.0.1", options.grpc_port)  # type: ignore[arg-type]
    try:
        await sidecar.start()
    except OSError as exc:
        await engine.stop(0)
        raise SidecarPortError(f"--grpc-port {options.grpc_port}: {exc}") from exc
    return sidecar


def _host_id(app_dir: Path) -> str:
    """The id blob receipts are kept under (the host derives one from the app; lower case, max 32 chars)."""
    name = "".join(ch if ch.isalnum() else "-" for ch in app_dir.name.lower()).strip("-") or "app"
    return f"devhost-{name}"[:32]


def _storage_lines(storage: DevelopmentStorage | None, triggers: Any) -> list[str]:
    """The development storage line and one line per queue/blob function (run, or why not)."""
    lines = [storage.describe()] if storage is not None else []
    described = triggers.describe()
    if described:
        lines.append("Storage triggers:")
        lines.extend(f"        {line}" for line in described)
    return lines + [""] if lines else []


def _uvicorn_config(app: DevHost, graceful_s: float) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        lifespan="off",
        http="h11",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=max(1, round(graceful_s)),
        # Longer than any client's idle keep-alive (aiohttp, which the Durable SDK uses, keeps 15 s): a server that
        # closes an idle connection first races the client reusing it (a POST then fails to be written).
        timeout_keep_alive=75,
    )


def _install_signal_handlers(server: uvicorn.Server) -> None:
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if server.should_exit and sig == signal.SIGINT:
            server.force_exit = True
        server.should_exit = True
        log.info("Received %s, shutting down", sig.name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)


async def _close_durable_client_session() -> None:
    """Close the SDK's module-global aiohttp session so shutdown prints no 'Unclosed client session'."""
    try:
        from azure.durable_functions.models.utils import http_utils  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the SDK is a dependency of every durable app
        return
    closer = getattr(http_utils, "_close_session", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


def _durability(level: str) -> str:
    if level in ("FULL", "EXTRA"):
        return f"SQLite WAL, synchronous={level}: commits survive a host crash (kill -9), power loss and OS crashes"
    return (
        f"SQLite WAL, synchronous={level}: commits survive a host crash (kill -9); "
        "--sync full also survives power loss or an OS crash"
    )


def _print_banner(
    options: ServeOptions,
    host: Any,
    keys: HostKeys | None,
    port: int,
    rpc_port: int,
    sync_level: str,
    storage_lines: list[str] | None = None,
) -> None:
    out = [f"devhost {DEVHOST_VERSION}: Azure Functions Python v2 app in {options.app_dir}", "", "Functions:", ""]
    for line in host.function_lines():
        out.append(f"        {line}")
        out.append("")
    if keys is None:
        out.append("Auth: DISABLED (--no-auth): every function and the Durable API are callable without keys.")
    else:
        out.append(
            f"Keys (stored in {options.data_dir / 'keys.json'}; override with "
            f"{ENV_MASTER_KEY}, {ENV_FUNCTION_KEY}, {ENV_SYSTEM_KEY}):"
        )
        out.append(f"        master: {keys.master_key}")
        out.append(f"        function (default): {keys.function_key}")
        out.append(f"        system (durabletask_extension): {keys.system_key}")
        out.append("        pass a key as ?code=<key> or in the x-functions-key header")
    if options.easy_auth is not None:
        out.append(options.easy_auth.describe())
    if options.cors is not None:
        credentials = " (with credentials)" if options.cors.credentials else ""
        out.append(f"CORS: {', '.join(options.cors.origins)}{credentials}")
    out.append("")
    out.append(f"Durable Functions: task hub '{host.app.host.hub_name}', state in {options.data_dir}")
    out.append(f"        management API: http://{_display_host(options.host)}:{port}/runtime/webhooks/durabletask/")
    out.append(f"        local RPC endpoint (loopback, no key): http://127.0.0.1:{rpc_port}/durabletask/")
    out.append(f"        durability: {_durability(sync_level)}")
    out.append("")
    out.extend(storage_lines or [])
    out.append(
        f"Host started on http://{_display_host(options.host)}:{port} (pid {os.getpid()}); press Ctrl+C to stop."
    )
    print("\n".join(out), flush=True)
