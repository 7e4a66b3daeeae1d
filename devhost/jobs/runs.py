"""``python -m devhost workflows run <id> --input k=v ...`` and ``teams run``: start a run and follow it like ``ask``.

The run is a job: it is followed through the job API (progress, questions answered at the prompt, the
result), and ``jobs show|attach|answer|cancel`` work on its id. Exit codes as for ``ask``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx
from rich.console import Console

from devhost.jobs.follow import follow_job
from devhost.jobs.printed import EXIT_USAGE, attach_hint, http_problem


def add_run_parser(actions: Any, common: argparse.ArgumentParser, plural: str) -> None:
    """Add ``run`` to the ``workflows`` or ``teams`` group."""
    run = actions.add_parser("run", parents=[common], help=f"start a run of one of the {plural} and follow it")
    run.add_argument("id")
    run.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a workflow input (repeatable); VALUE is read as JSON when it parses (5, true, [1]), else as text",
    )
    if plural == "teams":
        run.add_argument("--task", default=None, help="the team's task (the same as --input task=...)")
    run.add_argument("--version", type=int, default=None, help="run this version (default: the latest)")
    run.add_argument("--no-input", action="store_true", help="never prompt: stop (exit 4) when the run waits")


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as the run's inputs (values as JSON when they parse, else as text)."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--input {pair!r} is not NAME=VALUE")
        try:
            inputs[name.strip()] = json.loads(raw)
        except ValueError:
            inputs[name.strip()] = raw
    return inputs


def start_and_follow(args: argparse.Namespace, client: httpx.Client, url: str, console: Console) -> int:
    """Start the run, follow it to its end, print its outputs; the exit code."""
    try:
        inputs = parse_inputs(args.input)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        return EXIT_USAGE
    if getattr(args, "task", None):
        inputs["task"] = args.task
    body: dict[str, Any] = {"inputs": inputs}
    if args.version:
        body["version"] = args.version
    response = client.post(f"/api/{args.command}/{args.id}/runs", json=body)
    if response.status_code != 202:
        console.print(f"[red]the run was not accepted:[/] {http_problem(response, url)}", highlight=False)
        return EXIT_USAGE
    started = response.json()
    console.print(f"run {started['id']} of {args.command[:-1]} {args.id} v{started['version']}", highlight=False)
    interactive = sys.stdin.isatty() and not args.no_input
    try:
        code, view = follow_job(client, started["id"], console, interactive=interactive)
    except KeyboardInterrupt:
        console.print(f"\n[yellow]stopped following run {started['id']}[/] (it keeps running); attach again with:")
        console.print(attach_hint(started["id"], url), markup=False, highlight=False, soft_wrap=True)
        return 130
    run = (view or {}).get("run") or {}
    if run.get("outputs") is not None:
        console.print(json.dumps(run["outputs"], indent=2, default=str), markup=False, highlight=False)
    return code
