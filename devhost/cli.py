"""Command line: ``python -m devhost serve [--app DIR] [--host H] [--port P] [--data DIR] [--sync MODE] ...``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from devhost.functions.http.easyauth import EasyAuthSimulation, PrincipalSpecError, SimulatedUser
from devhost.functions.http.server import CorsPolicy
from devhost.functions.logs import HostLogFormatter, HostLogHandler
from devhost.serve import (
    EXIT_USAGE,
    SYNC_MODES,
    EngineFactory,
    ServeOptions,
    data_dir_problem,
    local_port,
    read_host_settings,
    serve,
    setting_text,
)

log = logging.getLogger("devhost")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``python -m devhost``."""
    parser = argparse.ArgumentParser(
        prog="python -m devhost", description="Local host for Azure Functions Python v2 apps."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the function app over HTTP with Durable state in SQLite")
    serve.add_argument("--app", default=".", help="app root containing function_app.py (default: cwd)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=int,
        default=None,
        help="port to listen on (default: local.settings.json Host.LocalHttpPort, else 7071; 0 = any free port)",
    )
    serve.add_argument(
        "--cors",
        default=None,
        help="comma-separated origins allowed to call the host, or * (default: local.settings.json Host.CORS)",
    )
    serve.add_argument("--cors-credentials", action="store_true", help="allow credentialed cross-origin requests")
    serve.add_argument("--data", default=None, help="state directory (default <app>/.devhost)")
    serve.add_argument(
        "--no-auth",
        "--no-keys",
        action="store_true",
        help="do not enforce function/admin/system keys (what `func start` does unless given --enableAuth)",
    )
    serve.add_argument("--grace", type=float, default=10.0, help="seconds to let in-flight work finish on shutdown")
    serve.add_argument(
        "--sync",
        choices=SYNC_MODES,
        default="normal",
        help=(
            "durability of the SQLite state (default normal). normal: WAL with synchronous=NORMAL; every "
            "committed change survives a crash or kill -9 of the host. full: synchronous=FULL; it also "
            "survives power loss or an OS crash, at the cost of an fsync per commit"
        ),
    )
    serve.add_argument(
        "--principal",
        default=None,
        metavar="NAME[;ROLE,...]",
        help=(
            "simulate App Service Authentication: every request is this signed-in user (sets "
            "WEBSITE_AUTH_ENABLED for the app). Local testing only, not a security boundary"
        ),
    )
    serve.add_argument(
        "--principal-header",
        action="store_true",
        help=(
            "simulate App Service Authentication: honour 'X-Devhost-Principal: name[;role1,role2]' per request "
            "(without it: --principal, else signed out). Anyone reaching the host can claim any user"
        ),
    )
    serve.add_argument(
        "--reset-store",
        action="store_true",
        help="start with a new, empty durable store when the existing one is empty or missing (its jobs are lost)",
    )
    serve.add_argument(
        "--no-azurite",
        action="store_true",
        help="do not start Azurite for settings that are UseDevelopmentStorage=true (storage triggers then do not run)",
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help=(
            "also serve the Durable Task gRPC sidecar protocol on this port (loopback only, no keys; off by default; "
            "4001 is the durabletask SDK's default address; 0 = any free port): durabletask workers and clients "
            "run against devhost. With it, --app needs no function_app.py"
        ),
    )
    serve.add_argument("--verbose", action="store_true", help="debug logging")
    from devhost.jobs.ask import add_parser as add_ask_parser  # noqa: PLC0415

    add_ask_parser(sub)
    from devhost.jobs.commands import add_parser as add_jobs_parser  # noqa: PLC0415

    add_jobs_parser(sub)
    from devhost.durable.replay import add_parser as add_replay_parser  # noqa: PLC0415

    add_replay_parser(sub)
    return parser


def main(argv: list[str] | None = None, *, engine_factory: EngineFactory | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "ask":
        from devhost.jobs.ask import main as ask_main  # noqa: PLC0415

        return ask_main(args)
    if args.command in ("jobs", "agents", "workflows", "teams", "verified-queries"):
        from devhost.jobs.commands import main as jobs_main  # noqa: PLC0415

        return jobs_main(args)
    if args.command == "replay":
        from devhost.durable.replay import main as replay_main  # noqa: PLC0415

        return replay_main(args)
    if args.command != "serve":  # pragma: no cover - argparse enforces the choice
        return EXIT_USAGE
    app_dir = Path(args.app).resolve()
    host_settings = read_host_settings(app_dir)
    if args.port is None:
        args.port = local_port(host_settings)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be between 0 and 65535, got {args.port}", file=sys.stderr)
        return EXIT_USAGE
    if args.grpc_port is not None and not 0 <= args.grpc_port <= 65535:
        print(f"error: --grpc-port must be between 0 and 65535, got {args.grpc_port}", file=sys.stderr)
        return EXIT_USAGE
    if args.grace < 0:
        print("error: --grace must not be negative", file=sys.stderr)
        return EXIT_USAGE
    easy_auth = None
    if args.principal is not None or args.principal_header:
        try:
            user = SimulatedUser.parse(args.principal) if args.principal is not None else None
        except PrincipalSpecError as exc:
            print(f"error: --principal: {exc}", file=sys.stderr)
            return EXIT_USAGE
        easy_auth = EasyAuthSimulation(default=user, honour_header=args.principal_header)
    options = ServeOptions(
        app_dir=app_dir,
        data_dir=Path(args.data).resolve() if args.data else app_dir / ".devhost",
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        grace_s=args.grace,
        verbose=args.verbose,
        sync=args.sync,
        reset_store=args.reset_store,
        azurite=not args.no_azurite,
        grpc_port=args.grpc_port,
        easy_auth=easy_auth,
        cors=CorsPolicy.parse(
            args.cors if args.cors is not None else setting_text(host_settings.get("CORS")),
            args.cors_credentials or host_settings.get("CORSCredentials") is True,
        ),
    )
    problem = data_dir_problem(options.data_dir)
    if problem is not None:
        print(f"error: --data {options.data_dir}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    _configure_logging(options.verbose)
    return serve(options, engine_factory=engine_factory)


def _configure_logging(verbose: bool) -> None:
    handler = HostLogHandler(sys.stderr)
    handler.setFormatter(HostLogFormatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("uvicorn", "uvicorn.error", "uvicorn.access", "asyncio", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
