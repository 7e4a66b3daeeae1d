"""``python -m devhost jobs list|show|attach|answer|cancel|fork|compare``: manage the jobs of a running host
(and, through devhost/jobs/definitions.py, ``agents|workflows|teams list|show|apply``).

Talks to the jobs API at ``--url`` with the function key found the way ``ask`` finds it (``--key``,
``DEVHOST_FUNCTION_KEY``, then ``<data>/keys.json``). Exit codes: 0 ok, 1 the job failed (show/attach),
2 usage, connection or API error, 3 cancelled, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from devhost.jobs.ask import key_for
from devhost.jobs.definitions import CliError as DefinitionCliError
from devhost.jobs.definitions import add_parsers as add_definition_parsers
from devhost.jobs.definitions import run as run_definitions
from devhost.jobs.follow import follow_job
from devhost.jobs.fork import ForkCliError
from devhost.jobs.fork import add_parsers as add_fork_parsers
from devhost.jobs.fork import run as run_fork
from devhost.jobs.printed import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    answer_hint,
    attach_hint,
    cli_command,
    exit_code,
    http_problem,
    remember_connection,
)
from devhost.jobs.render import deadline_text, render_progress, render_result
from devhost.jobs.stream import local_time
from devhost.jobs.verified import add_parsers as add_verified_parsers
from devhost.jobs.verified import run as run_verified


class CliError(Exception):
    """A problem to print as one sentence (exit 2)."""


def add_parser(sub: Any) -> None:
    """Add the ``jobs`` subcommand group to the devhost CLI."""
    jobs = sub.add_parser("jobs", help="list, show, follow, answer or cancel the jobs of a running host")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("DEVHOST_URL", "http://127.0.0.1:7071"),
        help="the running host (default: %(default)s)",
    )
    common.add_argument("--key", default=None, help="function key (default: DEVHOST_FUNCTION_KEY or <data>/keys.json)")
    common.add_argument("--app", default=".", help="app directory, to find <app>/.devhost/keys.json (default: cwd)")
    common.add_argument("--data", default=None, help="the host's state directory (default <app>/.devhost)")
    common.add_argument("--json", action="store_true", help="print the API's JSON instead of the human view")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = actions.add_parser("list", parents=[common], help="the jobs, newest first")
    # The statuses are the host's (GET /api/catalog job_statuses): it refuses one it does not know, naming them.
    listing.add_argument("--status", default=None, help="only jobs in this status (waiting_for_user, failed, ...)")
    listing.add_argument("--limit", type=int, default=20, help="how many jobs (1-100, default %(default)s)")
    for name, text in (
        ("show", "one job: status, steps, waiting question, answer, error"),
        ("attach", "follow a job live, answering its questions"),
        ("cancel", "cancel a running job"),
    ):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("job_id")
    answer = actions.add_parser("answer", parents=[common], help="answer the question a job waits on")
    answer.add_argument("job_id")
    answer.add_argument("answer", help="the answer: one of the offered options, or free text")
    answer.add_argument(
        "--question-id", default=None, help="the question answered (default: the one the job waits on now)"
    )
    # fork (re-run a finished job from a step, changed) and compare (two jobs): devhost/jobs/fork.py.
    add_fork_parsers(actions, common)
    # agents|workflows|teams list|show|apply: the same host options.
    add_definition_parsers(sub, common)
    add_verified_parsers(sub, common)


def _client(args: argparse.Namespace) -> tuple[httpx.Client, str]:
    url = str(args.url).rstrip("/")
    app_dir = Path(args.app).resolve()
    data_dir = Path(args.data).resolve() if args.data else app_dir / ".devhost"
    key = key_for(args, data_dir)
    headers = {"x-functions-key": key} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=30.0), url


def _get(client: httpx.Client, url: str, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    response = client.get(path, params=params)
    if response.status_code != 200:
        raise CliError(http_problem(response, url))
    body = response.json()
    if not isinstance(body, dict):
        raise CliError(f"the host at {url} answered something that is not a job view")
    return body


def render_list(jobs: list[dict[str, Any]]) -> Table:
    """The table of ``jobs list``: each job's id with its question below it, so 80 columns show both."""
    table = Table(title=f"{len(jobs)} job(s), newest first", expand=False)
    table.add_column("job / question", min_width=32, ratio=1)
    table.add_column("status", no_wrap=True)
    table.add_column("created", max_width=16)
    for job in jobs:
        question = str(job.get("question") or "")
        question = question if len(question) <= 160 else f"{question[:159]}…"
        cell = Text(str(job.get("id")))
        cell.append(f"\n{question}", style="dim")
        table.add_row(cell, str(job.get("status")), local_time(job.get("created_at"), date=True))
    return table


def render_show(view: dict[str, Any], console: Console, url: str) -> None:
    """The job view of ``jobs show``."""
    console.print(f"question: {view.get('question')}", markup=False, highlight=False)
    times = [f"created {local_time(view.get('created_at'), date=True)}"]
    if view.get("finished") and view.get("updated_at"):
        times.append(f"ended {local_time(view.get('updated_at'), date=True)}")
    console.print(", ".join(times), markup=False, highlight=False)
    console.print(render_progress(view))
    waiting = view.get("waiting")
    if waiting:
        options = ", ".join(waiting.get("options") or []) or "free text"
        deadline = deadline_text(waiting)
        console.print(
            Panel(
                escape(
                    f"{waiting.get('question')}\noptions: {options}\nquestion_id: {waiting.get('question_id')}"
                    + (f"\n{deadline}" if deadline else "")
                ),
                title=f"the job asks ({waiting.get('kind')})",
                border_style="magenta",
            )
        )
        first = (waiting.get("options") or ["<answer>"])[0]
        console.print(
            f"answer with: {answer_hint(str(view.get('id')), str(waiting.get('question_id')), url, first)}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        console.print(f"follow it with: {attach_hint(str(view.get('id')), url)}", markup=False, highlight=False)
    if view.get("finished"):
        console.print(render_result(view, url))


def _run(args: argparse.Namespace, client: httpx.Client, url: str, console: Console) -> int:
    command = args.jobs_command
    if command == "list":
        params: dict[str, Any] = {"limit": args.limit}
        if args.status:
            params["status"] = args.status
        body = _get(client, url, "/api/jobs", params)
        if args.json:
            print(json.dumps(body, indent=2))
        else:
            console.print(render_list(body.get("jobs") or []))
        return 0
    if command in ("fork", "compare"):
        return run_fork(args, client, url, console)
    path = f"/api/jobs/{args.job_id}"
    if command == "show":
        view = _get(client, url, path, {"log_limit": 1})
        if args.json:
            print(json.dumps(view, indent=2))
        else:
            render_show(view, console, url)
        return exit_code(view)
    if command == "attach":
        _get(client, url, path, {"log_limit": 1})  # a sentence for an unknown job before the live view starts
        try:
            code, view = follow_job(client, args.job_id, console, interactive=sys.stdin.isatty())
        except KeyboardInterrupt:
            console.print(f"\n[yellow]stopped following job {args.job_id}[/] (it keeps running); attach again with:")
            console.print(attach_hint(args.job_id, url), markup=False, highlight=False, soft_wrap=True)
            return EXIT_INTERRUPTED
        # follow_job printed the result already (once).
        if args.json and view is not None:
            print(json.dumps(view, indent=2))
        return code
    if command == "answer":
        question_id = args.question_id
        if question_id is None:
            waiting = _get(client, url, path, {"log_limit": 1}).get("waiting")
            if not waiting:
                raise CliError(f"job {args.job_id} is not waiting for an answer")
            question_id = waiting.get("question_id")
        posted = client.post(f"{path}/feedback", json={"answer": args.answer, "question_id": question_id})
        if posted.status_code >= 400:
            raise CliError(http_problem(posted, url))
        console.print(f"answered question {question_id} of job {args.job_id}", markup=False, highlight=False)
        return 0
    posted = client.post(f"{path}/cancel")
    if posted.status_code >= 400:
        raise CliError(http_problem(posted, url))
    console.print(f"job {args.job_id} is cancelling", markup=False, highlight=False)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run one ``jobs`` action; returns the exit code."""
    console = Console(stderr=bool(args.json))
    remember_connection(args)
    client, url = _client(args)
    try:
        with client:
            if args.command == "verified-queries":
                return run_verified(args, client, url, console)
            if args.command != "jobs":
                return run_definitions(args, client, url, console)
            return _run(args, client, url, console)
    except (CliError, DefinitionCliError, ForkCliError) as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        return EXIT_USAGE
    except httpx.ConnectError:
        console.print(
            f"[red]error:[/] no host is running at {url} (start one with `{cli_command('serve')}`, or pass --url)",
            highlight=False,
        )
        return EXIT_USAGE
    except httpx.HTTPError as exc:
        console.print(f"[red]error:[/] cannot reach the host at {url}: {exc}", highlight=False)
        return EXIT_USAGE
    except KeyboardInterrupt:
        console.print("\n[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
