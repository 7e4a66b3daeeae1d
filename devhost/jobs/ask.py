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
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.prompt import Prompt
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from devhost.jobs.cost import cost_line, quote_line
from devhost.jobs.stream import (
    AnswerDraft,
    EventStream,
    StreamLost,
    StreamUnavailable,
    apply_to_view,
    event_line,
    local_time,
)

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED, EXIT_WAITING = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130
# Events after which the view is read again (the question's options, the usage, the end).
VIEW_EVENTS = frozenset({"status", "question", "usage", "end"})
OFFLINE_NOTE = (
    "answered by the offline model: a deterministic, keyword-matching stand-in, not an LLM "
    "(set LLM_PROVIDER to use a real model)"
)
COLUMNS = ("#", "step", "kind", "state", "tries", "tokens")
STATE_STYLE = {
    "pending": "dim",
    "running": "bold yellow",
    "waiting": "bold magenta",
    "succeeded": "green",
    "failed": "bold red",
    "skipped": "dim cyan",
    "cancelled": "red",
    "carried over": "cyan",  # a fork's step: the origin's result, not run again
}


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


def is_agent(view: dict[str, Any]) -> bool:
    """Whether the Executor works the job (agent mode) rather than a plan."""
    return view.get("mode") == "agent" or (view.get("plan") or {}).get("status") == "agent"


def render_progress(view: dict[str, Any]) -> Table:
    """A table of the job's steps; in agent mode the Executor's tool calls, each with its turn."""
    usage = (view.get("usage") or {}).get("total") or {}
    agent = is_agent(view)
    mode = "  agent mode" if agent else ""
    title = f"job {view['id'][:12]}…  {view['status']}  ({usage.get('total_tokens', 0)} tokens){mode}"
    table = Table(title=title, expand=False)
    columns = ("#", "turn", "tool", "state", "tries", "tokens", "input → output") if agent else COLUMNS
    for column in columns:
        table.add_column(column, overflow="fold" if column == "input → output" else "ellipsis")
    for index, step in enumerate(view.get("steps", [])):
        state = step.get("state", "pending")
        state = "carried over" if step.get("carried_over") else state  # a fork's step: the origin's result
        marker = "▶" if index == view.get("current_step_index") and state in ("running", "waiting") else ""
        styled = f"[{STATE_STYLE.get(state, '')}]{state}[/]"
        tries, tokens = str(step.get("attempts", 0)), str((step.get("usage") or {}).get("total_tokens", 0))
        if agent:
            turn = step.get("turn")
            table.add_row(
                f"{marker}{index + 1}",
                "—" if turn is None else str(turn),
                escape(step.get("kind", "")),
                styled,
                tries,
                tokens,
                escape(tool_io(step)),
            )
        else:
            table.add_row(
                f"{marker}{index + 1}", escape(step.get("title", "")[:60]), step.get("kind", ""), styled, tries, tokens
            )
    if not view.get("steps"):
        if agent:
            table.add_row("", "", "the Executor…", view["status"], "", "", "")
        else:
            table.add_row("", "planning…", "plan", view["status"], "", "")
    return table


def tool_io(step: dict[str, Any]) -> str:
    """A tool call's input and what came of it, cut short (the model wrote them: shown as plain text)."""
    shown = (
        step.get("tool_output")
        or step.get("message")
        or ("waiting for your answer" if step.get("state") == "waiting" else "")
    )
    given = step.get("tool_input") or ""
    return f"{given[:120]} → {shown[:120]}" if given or shown else ""


def render_live(view: dict[str, Any], draft: AnswerDraft | None = None) -> Group:
    """The progress table, plus the answer as it streams in (from the stream's deltas, else from the view)."""
    parts: list[Any] = [render_progress(view)]
    written = draft.current() if draft is not None else None
    if written is not None:
        step_id, attempt, text = written
        title = f"{step_id}: writing the answer, attempt {attempt} ({len(text)} chars)"
        return Group(*parts, Panel(text[-1200:], title=title, border_style="yellow"))
    for step in view.get("steps", []):
        partial = step.get("partial_output") or {}
        if partial.get("text") and step.get("state") == "running":
            text = partial["text"][-1200:]
            parts.append(
                Panel(
                    text,
                    title=f"{step['id']}: writing the answer ({partial.get('chars', len(text))} chars)",
                    border_style="yellow",
                )
            )
    return Group(*parts)


def artifact_lines(view: dict[str, Any], url: str | None) -> list[str]:
    """Each file a step wrote (a run_python chart, a CSV) with the URL that serves it (function key needed)."""
    base = (url or "").rstrip("/")
    lines = []
    for step in view.get("steps") or []:
        for item in step.get("artifacts") or []:
            if isinstance(item, dict) and item.get("ref"):
                where = f"{base}/api/jobs/{view['id']}/artifacts/{item['ref']}"
                about = f"{item.get('name')} ({item.get('media_type')}, {item.get('size')} bytes)"
                lines.append(f"{step.get('id')}: {about} {where}")
    return lines


def render_result(view: dict[str, Any], url: str | None = None) -> Group:
    """The answer, its citations, the files steps wrote (with their URLs) and the SQL result tables."""
    parts: list[Any] = []
    answer = view.get("answer")
    if answer:
        parts.append(Panel(Markdown(answer.get("text") or ""), title="answer", border_style="green"))
        if answer.get("citations"):
            cites = Table(title="citations")
            cites.add_column("source")
            cites.add_column("kind")
            cites.add_column("quote / title")
            for c in answer["citations"]:
                cites.add_row(c.get("source_id", ""), c.get("kind", ""), (c.get("quote") or c.get("title") or "")[:90])
            parts.append(cites)
        parts += render_claims(answer)
    files = artifact_lines(view, url)
    if files:
        parts.append(Text("files (open with the function key: header x-functions-key, or ?code=<key>):"))
        parts.extend(Text(f"  {line}") for line in files)
    for step in view.get("steps", []):
        out = step.get("output") or {}
        if "rows" in out and "columns" in out:
            rows = Table(
                title=f"{step['id']}: {out.get('row_count', len(out['rows']))} rows"
                f"{' (truncated)' if out.get('truncated') else ''}"
            )
            for col in out["columns"]:
                rows.add_column(str(col))
            for row in out["rows"][:20]:
                rows.add_row(*[str(v) for v in row])
            parts.append(Syntax(out.get("sql", ""), "sql", word_wrap=True))
            parts.append(rows)
    error = view.get("error")
    if error:
        parts.append(Panel(describe_error(error), title="failed", border_style="red"))
    if ran_offline(view):
        parts.append(f"[dim]{OFFLINE_NOTE}[/]")
    usage = (view.get("usage") or {}).get("total") or {}
    parts.append(f"usage: {usage.get('total_tokens', 0)} tokens, ~${usage.get('estimated_cost', 0):.4f}")
    for line in (quote_line(view), cost_line(view)):
        if line:
            parts.append(Text(line))  # plain text: meter names are not markup
    return Group(*parts)


CLAIM_MARKS = {"verified": "[green]✓ verified[/]", "not_checkable": "[yellow]? not checkable[/]"}


def evidence_text(evidence: dict[str, Any]) -> str:
    """One piece of evidence in a few words: ``sql:sales row 0 return_count`` or ``policy.md#2 chars 10-64``."""
    where = str(evidence.get("source_id", ""))
    if evidence.get("row") is not None:
        return f"{where} row {evidence['row']} {evidence.get('column') or ''}".rstrip()
    if evidence.get("start") is not None or evidence.get("end") is not None:
        return f"{where} chars {evidence.get('start') or 0}-{evidence.get('end') or ''}"
    return f"{where} (whole)"


def render_claims(answer: dict[str, Any]) -> list[Any]:
    """The checker's summary ("verified 5 of 6") and each claim with its evidence; unsupported ones flagged red."""
    claims = answer.get("claims") or []
    if not claims:
        said = (answer.get("claims_summary") or {}).get("text")
        return [Text(f"claims: {said}", style="yellow")] if said else []
    summary = (answer.get("claims_summary") or {}).get("text") or f"{len(claims)} claims"
    table = Table(title=f"claims: {summary}")
    table.add_column("check")
    table.add_column("claim")
    table.add_column("evidence")
    for claim in claims:
        check = claim.get("check") or {}
        status = check.get("status", "unsupported")
        mark = CLAIM_MARKS.get(status, "[bold red]✗ UNSUPPORTED[/]")
        text = str(claim.get("text", ""))[:90]
        if status != "verified":
            text += f"\n[dim]{check.get('reason', '')}[/]"
        cited = ", ".join(evidence_text(e) for e in claim.get("evidence") or []) or "[red]no evidence[/]"
        table.add_row(mark, text, cited)
    return [table]


def describe_error(error: dict[str, Any]) -> str:
    """A job error as one sentence: what failed, where (when a step is known) and why."""
    code = error.get("code") or "ERROR"
    where = f" at step {error['step_id']}" if error.get("step_id") else ""
    message = str(error.get("message") or "no reason was given").rstrip(".")
    return f"The job failed{where} ({code}): {message}."


def ran_offline(view: dict[str, Any]) -> bool:
    """Whether any step of the job ran on the embedded offline model."""
    return any(step.get("model") == "offline" for step in view.get("steps") or [])


def http_problem(response: httpx.Response, url: str) -> str:
    """An error response of the jobs API as a sentence (never raw JSON)."""
    if response.status_code == 401:
        return f"the host at {url} refused the request (401): the function key is missing or wrong (use --key)"
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        field = f" (field {error['field']})" if error.get("field") else ""
        return f"{error['message']}{field} [{error.get('code', response.status_code)}]"
    if response.status_code == 404:
        return f"not found at {url}{response.request.url.path} (404)"
    return f"the host answered {response.status_code} {response.reason_phrase}"


DEFAULT_URL = "http://127.0.0.1:7071"


def cli_command(*args: str, url: str | None = None) -> str:
    """A devhost command that runs as printed: this interpreter (no activated venv needed), relative when under cwd."""
    python = Path(sys.executable)
    try:
        shown = str(python.relative_to(Path.cwd()))
    except ValueError:
        shown = str(python)
    words = [shown, "-m", "devhost", *args]
    if url and url.rstrip("/") != DEFAULT_URL:
        words += ["--url", url]
    return shlex.join(words)


# The connection options given on the command line (--key, --data, --app), which printed commands repeat.
_GIVEN: list[str] = []


def remember_connection(args: argparse.Namespace) -> None:
    """Keep the connection options this command was given, so the commands it prints reach the same host."""
    _GIVEN.clear()
    for flag in ("key", "app", "data"):
        value = getattr(args, flag, None)
        if value and not (flag == "app" and value == "."):
            _GIVEN.extend([f"--{flag}", str(value)])


def attach_hint(job_id: str, url: str) -> str:
    """The command that follows a job again."""
    return cli_command("jobs", "attach", job_id, *_GIVEN, url=url)


def answer_hint(job_id: str, question_id: str, url: str, answer: str = "<answer>") -> str:
    """The command that answers a job's question."""
    return cli_command("jobs", "answer", job_id, answer, "--question-id", question_id, *_GIVEN, url=url)


def deadline_text(waiting: dict[str, Any], now: datetime | None = None) -> str | None:
    """When the question expires and what happens then, as a sentence (None when the view has no deadline)."""
    expires = waiting.get("expires_at")
    if not expires:
        return None
    try:
        moment = datetime.fromisoformat(str(expires).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    left = int((moment - (now or datetime.now(UTC))).total_seconds())
    hours, minutes = divmod(max(0, left) // 60, 60)
    days, hours = divmod(hours, 24)
    span = f"{days} d {hours} h" if days else f"{hours} h {minutes} min" if hours else f"{minutes} min"
    fallback = waiting.get("expiry_default")
    then = f"the job goes on with '{fallback}'" if fallback else "the job fails (WAIT_EXPIRED)"
    when = local_time(expires, date=True)
    return f"answer by {when} (in {span}); after that {then}"


def ask_user(console: Console, waiting: dict[str, Any]) -> dict[str, Any]:
    """Ask the job's question in the terminal; returns the feedback body."""
    console.print(Panel(escape(waiting["question"]), title=f"the job asks ({waiting['kind']})", border_style="magenta"))
    deadline = deadline_text(waiting)
    if deadline:
        console.print(f"[dim]{escape(deadline)}[/]")
    details = waiting.get("details") or {}
    if isinstance(details.get("refused_edit"), str):
        # The job refused the last edit itself (a field the step does not take) and asks again.
        console.print(f"[red]your last edit was not applied:[/] {escape(details['refused_edit'])}")
    code = code_of(details)
    if code is not None:
        show_code(console, details, code)
    elif details.get("sql"):
        console.print(Syntax(details["sql"], "sql", word_wrap=True))
    if details.get("error"):
        console.print(
            f"[red]{escape(str(details['error'].get('code')))}[/]: {escape(str(details['error'].get('message')))}"
        )
    options = waiting.get("options") or []
    if waiting.get("free_text") or not options:
        hint = f" (suggestions: {', '.join(options)})" if options else ""
        text = Prompt.ask(f"your answer{hint}", console=console)
        return {"answer": text, "question_id": waiting["question_id"]}
    choice = Prompt.ask("choose", choices=options, console=console)
    if choice == "edit":
        return {"answer": edit_answer(console, details), "question_id": waiting["question_id"]}
    return {"answer": choice, "question_id": waiting["question_id"]}


def code_of(details: dict[str, Any]) -> str | None:
    """The Python code a question is about (an approval's ``code``, or a failed run_python step's input)."""
    code = details.get("code")
    if not isinstance(code, str):
        code = (details.get("input") or {}).get("code")
    return code if isinstance(code, str) else None


def show_code(console: Console, details: dict[str, Any], code: str) -> None:
    """The code (highlighted; a model wrote it, so never read as markup), the inputs it reads, the files it wrote."""
    console.print(Syntax(code, "python", line_numbers=True, word_wrap=True))
    inputs = details.get("inputs") or (details.get("input") or {}).get("inputs") or {}
    if isinstance(inputs, dict) and inputs:
        table = Table(title="inputs the code reads")
        table.add_column("variable")
        table.add_column("output of step")
        for name, step in inputs.items():
            table.add_row(escape(str(name)), escape(str(step)))
        console.print(table)
    else:
        console.print("[dim]the code reads no inputs[/]")
    files = details.get("files")
    if isinstance(files, list) and files:
        written = Table(title="files a trial run wrote (kept only if you approve)")
        for column in ("name", "type", "bytes"):
            written.add_column(column)
        for f in files:
            if isinstance(f, dict):
                written.add_row(escape(str(f.get("name"))), escape(str(f.get("media_type"))), str(f.get("size")))
        console.print(written)


def edit_answer(console: Console, details: dict[str, Any]) -> dict[str, Any]:
    """The ``edit`` answer: new code (in $VISUAL/$EDITOR, else typed), else a new SQL statement or question."""
    code = code_of(details)
    if code is not None:
        return {"action": "edit", "code": edit_code(console, code)}
    key = "sql" if details.get("sql") or "sql" in (details.get("input") or {}) else "question"
    current = details.get("sql") or (details.get("input") or {}).get(key, "")
    console.print(f"current {key}: {current}", markup=False, highlight=False)
    new_value = Prompt.ask(f"new {key}", console=console)
    return {"action": "edit", key: new_value}


def edit_code(console: Console, current: str) -> str:
    """New code: edited in $VISUAL or $EDITOR when set, else typed line by line (a lone '.' ends it)."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if editor:
        with tempfile.TemporaryDirectory(prefix="devhost-edit-") as folder:
            path = Path(folder) / "step.py"
            path.write_text(current, encoding="utf-8")
            subprocess.run([*shlex.split(editor), str(path)], check=False)
            edited = path.read_text(encoding="utf-8")
        return edited if edited.strip() else current
    console.print("type the new code; end with a line holding only '.' (nothing typed keeps the current code)")
    lines: list[str] = []
    while True:
        try:
            line = console.input("")
        except EOFError:
            break
        if line.strip() == ".":
            break
        lines.append(line)
    typed = "\n".join(lines)
    return typed + "\n" if typed.strip() else current


def run_job(client: httpx.Client, body: dict[str, Any], console: Console, *, interactive: bool) -> tuple[int, Any]:
    """Submit, follow and finish one job; returns the exit code and the final view."""
    url = str(client.base_url).rstrip("/")
    response = client.post("/api/jobs", json=body)
    if response.status_code != 202:
        console.print(f"[red]the job was not accepted:[/] {http_problem(response, url)}")
        return EXIT_USAGE, None
    job_id = response.json()["id"]
    try:
        return follow_job(client, job_id, console, interactive=interactive)
    except KeyboardInterrupt:
        console.print(f"\n[yellow]stopped following job {job_id}[/] (it keeps running); attach again with:")
        console.print(attach_hint(job_id, url), markup=False, highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED, None


def follow_job(client: httpx.Client, job_id: str, console: Console, *, interactive: bool) -> tuple[int, Any]:
    """Follow a job live until it ends (answering its questions when interactive); returns code and view.

    The job's event stream is followed (resumed after a break); a host without one is polled instead.
    """
    try:
        return follow_stream(client, job_id, console, interactive=interactive)
    except (StreamUnavailable, StreamLost) as exc:
        console.print(f"[dim]no event stream ({escape(str(exc))}); polling the job instead[/]")
        return poll_job(client, job_id, console, interactive=interactive)


class ViewUnreadable(Exception):
    """The job view could not be read (said as a sentence)."""


def read_view(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job view, or ViewUnreadable with the API's reason."""
    got = client.get(f"/api/jobs/{job_id}", params={"log_limit": 1})
    if got.status_code != 200:
        raise ViewUnreadable(f"cannot read job {job_id}: {http_problem(got, str(client.base_url).rstrip('/'))}")
    view: dict[str, Any] = got.json()
    return view


class LiveView:
    """The live progress display. A prompt stops it; it starts afresh below what was typed (a restarted rich
    ``Live`` would move the cursor up by its last height and draw over the prompt, the answer and the error)."""

    def __init__(self, console: Console, renderable: Any) -> None:
        self.console = console
        self.renderable = renderable
        self.live: Live | None = None

    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Draw the display (again) from the cursor on."""
        if self.live is None:
            self.live = Live(self.renderable, console=self.console, refresh_per_second=8, transient=False)
            self.live.start()

    def stop(self) -> None:
        """Leave the last frame on screen and stop drawing."""
        if self.live is not None:
            self.live.stop()
            self.live = None
            if not self.console.is_terminal:
                self.console.line()  # rich ends the last frame's line itself only on a terminal

    def update(self, renderable: Any) -> None:
        """Show this instead."""
        self.renderable = renderable
        if self.live is not None:
            self.live.update(renderable)


def waiting_hint(view: dict[str, Any], url: str) -> str:
    """What to do about a question no one may answer here: its id, the CLI command and the POST."""
    waiting = view["waiting"]
    question_id = waiting["question_id"]
    options = waiting.get("options") or []
    example = options[0] if options else "<your answer>"
    lines = [
        f"the job waits for input: {waiting['question']}",
        f"question_id: {question_id}" + (f"  options: {', '.join(options)}" if options else ""),
    ]
    deadline = deadline_text(waiting)
    if deadline:
        lines.append(deadline)
    lines += [
        "answer with:",
        f"  {answer_hint(view['id'], question_id, url, example)}",
        f"  or POST {url}/api/jobs/{view['id']}/feedback "
        + json.dumps({"answer": example, "question_id": question_id}),
        "then follow it with:",
        f"  {attach_hint(view['id'], url)}",
    ]
    return "\n".join(lines)


def answer_if_asked(
    client: httpx.Client,
    view: dict[str, Any],
    console: Console,
    live: LiveView,
    answered: set[str],
    *,
    interactive: bool,
) -> bool:
    """Answer the question the job waits on, once; returns False when it waits and no one may answer here.

    An answer the server refuses (400: an option not offered, an edit the guard rejects) is shown with its
    reason and the same question is asked again, for as long as the job waits on it.
    """
    waiting = view.get("waiting")
    if view.get("status") != "waiting_for_user" or not waiting or waiting["question_id"] in answered:
        return True
    url = str(client.base_url).rstrip("/")
    live.stop()
    if not interactive:
        console.print()
        console.print(waiting_hint(view, url), markup=False, highlight=False, soft_wrap=True)
        return False
    while True:
        reply = ask_user(console, waiting)
        posted = client.post(f"/api/jobs/{view['id']}/feedback", json=reply)
        if posted.status_code < 400:
            answered.add(waiting["question_id"])
            break
        console.print(f"[red]the answer was not accepted:[/] {escape(http_problem(posted, url))}")
        now = read_view(client, view["id"])
        still = now.get("waiting") or {}
        if now.get("status") != "waiting_for_user" or still.get("question_id") != waiting["question_id"]:
            # Answered elsewhere, expired or moved on: the stream tells what comes next.
            answered.add(waiting["question_id"])
            break
        console.print("[yellow]the job still waits on this question: answer it again[/]")
        waiting = still
    live.start()
    return True


def finish(view: dict[str, Any], console: Console, url: str) -> tuple[int, Any]:
    """Print the job's result; its exit code and view."""
    console.print()
    console.print(render_result(view, url))
    code = {"completed": EXIT_COMPLETED, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}[view["status"]]
    return code, view


def follow_stream(client: httpx.Client, job_id: str, console: Console, *, interactive: bool) -> tuple[int, Any]:
    """Follow the job's event stream: a line per step change, the answer as it is written, then the result."""
    answered: set[str] = set()
    seen: set[tuple[Any, ...]] = set()
    draft = AnswerDraft()
    try:
        view = read_view(client, job_id)
        with LiveView(console, render_live(view)) as live:

            def resumed(last_id: str | None, why: str) -> None:
                console.print(f"[yellow]stream interrupted ({escape(why)}); resuming after {last_id}[/]")

            for event in EventStream(client, job_id, on_break=resumed):
                if not draft.apply(event):
                    line = event_line(event, seen)
                    if line:
                        console.print(line, markup=False, highlight=False)
                    if not apply_to_view(view, event) or event.type in VIEW_EVENTS:
                        view = read_view(client, job_id)
                    if event.type == "end":
                        # The last frame is the table alone: the answer is printed once, in the result below.
                        live.update(render_progress(view))
                        break
                    if event.type == "question" and not answer_if_asked(
                        client, view, console, live, answered, interactive=interactive
                    ):
                        return EXIT_WAITING, view
                live.update(render_live(view, draft))
        view = read_view(client, job_id)
    except ViewUnreadable as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return EXIT_USAGE, None
    return finish(view, console, str(client.base_url).rstrip("/"))


def poll_job(client: httpx.Client, job_id: str, console: Console, *, interactive: bool) -> tuple[int, Any]:
    """Follow a job by reading its view four times a second (a host without an event stream)."""
    answered: set[str] = set()
    view: dict[str, Any] = {}
    try:
        with LiveView(console, "") as live:
            while True:
                view = read_view(client, job_id)
                if view.get("status") in ("completed", "failed", "cancelled"):
                    live.update(render_progress(view))
                    break
                live.update(render_live(view))
                if not answer_if_asked(client, view, console, live, answered, interactive=interactive):
                    return EXIT_WAITING, view
                time.sleep(0.25)
    except ViewUnreadable as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return EXIT_USAGE, None
    return finish(view, console, str(client.base_url).rstrip("/"))


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
