"""``python -m devhost ask "question"``: submit a job, show live progress, answer its questions.

Progress comes from the job's event stream (devhost/jobs/stream.py), resumed after a break; a host without
the stream is polled.

Uses a running host when one answers at ``--url``; otherwise starts one in this process on a free
port (with the app and data directories given). Exit codes: 0 completed, 1 failed, 2 usage or
connection error, 3 cancelled, 4 waiting for input with ``--no-input``, 130 interrupted (Ctrl+C; the job
keeps running and the printed ``jobs attach`` command follows it again). With ``--json`` stdout carries only
the final job view as JSON; the live view goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from rich.console import Console

from devhost.jobs.follow import run_job
from devhost.jobs.printed import EXIT_INTERRUPTED, EXIT_USAGE, remember_connection


def add_parser(sub: Any) -> None:
    """Add the ``ask`` subcommand to the devhost CLI."""
    ask = sub.add_parser("ask", help="run one AI job and show its progress")
    ask.add_argument("question", help="the question to answer")
    ask.add_argument(
        "--url",
        default=os.environ.get("DEVHOST_URL", "http://127.0.0.1:7071"),
        help="a running host (default: %(default)s); if it does not answer, one is started here",
    )
    ask.add_argument("--key", default=None, help="function key (default: DEVHOST_FUNCTION_KEY or <data>/keys.json)")
    ask.add_argument("--app", default=".", help="app to serve when no host is running (default: cwd)")
    ask.add_argument("--data", default=None, help="state directory for a host started here (default <app>/.devhost)")
    ask.add_argument(
        "--approval",
        choices=["never", "always", "sensitive"],
        default="never",
        help="which SQL steps need your approval first",
    )
    ask.add_argument(
        "--approval-python",
        choices=["never", "always", "writes_files"],
        default=None,
        help="which Python code needs your approval before it runs (the job must allow python.run: --tools)",
    )
    ask.add_argument("--max-tokens", type=int, default=None, help="max tokens per step")
    ask.add_argument("--budget-tokens", type=int, default=None, help="max total tokens for the job")
    ask.add_argument("--max-cost", type=float, default=None, help="budget in USD across every priced meter")
    ask.add_argument(
        "--cost-over", type=float, default=None, help="ask before running when the quote's high end is over this (USD)"
    )
    ask.add_argument("--model", action="append", default=None, help="allowed model (repeat for fallbacks)")
    ask.add_argument("--mode", choices=["deterministic", "hybrid", "agent"], default="deterministic")
    ask.add_argument(
        "--tools",
        action="append",
        default=None,
        help="tools the job allows (comma-separated or repeated), e.g. python.run, function.growth_rate, "
        "function.percent_change, function.summary_statistics; http.* and mcp.* tools are the ones TOOLS_HTTP and "
        "TOOLS_MCP_SERVERS configure",
    )
    ask.add_argument("--max-turns", type=int, default=None, help="agent mode: most Executor turns")
    ask.add_argument("--max-tool-calls", type=int, default=None, help="agent mode: most tool calls")
    ask.add_argument(
        "--wait-seconds",
        type=int,
        default=None,
        help="how long each question and approval waits for you (default: the host's JOB_USER_WAIT_TIMEOUT_SECONDS, "
        "3 days; at most 7 days)",
    )
    ask.add_argument(
        "--on-wait-expiry",
        choices=["fail", "default"],
        default=None,
        help="an unanswered question: fail the job (default) or take its default answer (a clarifying question's "
        "first option, skip for a failed step); an unanswered approval always fails",
    )
    ask.add_argument("--no-input", action="store_true", help="never prompt; exit 4 if the job waits for input")
    ask.add_argument("--json", action="store_true", help="print the final job view as JSON")
    ask.add_argument("--keep-serving", action="store_true", help="keep a host started here running afterwards")


def build_request(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /api/jobs body for the arguments."""
    constraints: dict[str, Any] = {}
    if args.max_tokens:
        constraints["max_tokens"] = args.max_tokens
    if args.model:
        constraints["allowed_models"] = args.model
    if args.budget_tokens:
        constraints["budget"] = {"max_total_tokens": args.budget_tokens}
    if getattr(args, "max_cost", None) is not None:
        constraints["budget"] = {**constraints.get("budget", {}), "max_cost": args.max_cost}
    approval: dict[str, Any] = {"sql": args.approval}
    if getattr(args, "approval_python", None):
        approval["python"] = args.approval_python
    if getattr(args, "wait_seconds", None):
        approval["timeout_seconds"] = args.wait_seconds
    if getattr(args, "cost_over", None) is not None:
        approval["cost_over"] = args.cost_over
    body: dict[str, Any] = {"question": args.question, "mode": args.mode, "approval": approval}
    wait = {"timeout_seconds": getattr(args, "wait_seconds", None), "on_expiry": getattr(args, "on_wait_expiry", None)}
    if any(v is not None for v in wait.values()):
        body["wait"] = {k: v for k, v in wait.items() if v is not None}
    if constraints:
        body["constraints"] = constraints
    # The server checks the names and bounds; the CLI only gathers them. Any mode may allow tools (python.run).
    tools = [name.strip() for given in args.tools or [] for name in given.split(",") if name.strip()]
    if tools:
        body["tools"] = list(dict.fromkeys(tools))
    if args.mode == "agent":
        agent = {"max_turns": args.max_turns, "max_tool_calls": args.max_tool_calls}
        if any(v is not None for v in agent.values()):
            body["agent"] = {k: v for k, v in agent.items() if v is not None}
    return body


def _host_is_up(url: str) -> bool:
    try:
        # The anonymous ping: /admin/host/status needs the master key, which `ask` may not have.
        return httpx.get(f"{url}/admin/host/ping", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def key_for(args: argparse.Namespace, data_dir: Path) -> str | None:
    """The function key: --key, DEVHOST_FUNCTION_KEY, then <data>/keys.json."""
    if args.key:
        return str(args.key)
    if os.environ.get("DEVHOST_FUNCTION_KEY"):
        return os.environ["DEVHOST_FUNCTION_KEY"]
    keys_file = data_dir / "keys.json"
    if keys_file.exists():
        keys = json.loads(keys_file.read_text(encoding="utf-8"))
        key = keys.get("functionKeys", {}).get("default") or keys.get("function_key") or keys.get("masterKey")
        return str(key) if key else None
    return None


def main(args: argparse.Namespace) -> int:
    """Run ``ask``; returns the exit code."""
    from devhost.jobs.embedded import start_embedded_host

    # With --json stdout is the job view alone (for jq); everything for people goes to stderr.
    console = Console(stderr=bool(args.json))
    remember_connection(args)
    app_dir = Path(args.app).resolve()
    data_dir = Path(args.data).resolve() if args.data else app_dir / ".devhost"
    url = args.url.rstrip("/")
    embedded = None
    if not _host_is_up(url):
        console.print(f"[dim]no host at {url}; starting one here for {app_dir}[/]")
        try:
            embedded = start_embedded_host(app_dir, data_dir, port=urlsplit(url).port or 0)
        except Exception as exc:
            console.print(f"[red]could not start a host:[/] {exc}")
            return EXIT_USAGE
        url = embedded.url
    key = key_for(args, data_dir) if embedded is None else embedded.function_key
    headers = {"x-functions-key": key} if key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            code, view = run_job(
                client, build_request(args), console, interactive=not args.no_input and sys.stdin.isatty()
            )
            if args.json and view is not None:
                print(json.dumps(view, indent=2))
            if embedded is not None and args.keep_serving:
                console.print(
                    f"[green]host running at {url}[/] (function key {key}); web console: {url}/api/ui/ ; Ctrl+C to stop"
                )
                try:
                    embedded.wait()
                except KeyboardInterrupt:
                    console.print()  # Ctrl+C is how a kept host stops: not an error, the job's code stands
    except httpx.HTTPError as exc:
        console.print(f"[red]cannot reach the host at {url}:[/] {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        console.print("\n[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    finally:
        if embedded is not None:
            embedded.stop()  # the host says "Host stopped." itself
    return code
