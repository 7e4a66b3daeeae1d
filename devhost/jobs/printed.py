"""What the job commands print beside the live view: exit codes, commands that run as printed, the host's
errors as sentences, and how to answer a question from elsewhere."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx

from devhost.jobs.render import deadline_text

# The job commands' exit codes (the ask command's docstring says when each is given).
EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED, EXIT_WAITING = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130


def exit_code(view: dict[str, Any]) -> int:
    """The exit code of a job as its view stands: 0 while it runs or once completed, else how it ended.

    Whether it has ended is the view's ``finished`` (the server's word); only the two outcomes that have codes
    of their own are named here, and any other way of ending is a failure.
    """
    if not view.get("finished"):
        return 0
    return {"completed": EXIT_COMPLETED, "cancelled": EXIT_CANCELLED}.get(str(view.get("status")), EXIT_FAILED)


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
