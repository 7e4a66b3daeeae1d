"""Following a job to its end: over its event stream (resumed after a break) or by polling, answering its
questions on the way."""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from devhost.jobs.printed import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    EXIT_WAITING,
    attach_hint,
    exit_code,
    http_problem,
    waiting_hint,
)
from devhost.jobs.prompts import ask_user
from devhost.jobs.render import render_live, render_progress, render_result
from devhost.jobs.stream import (
    AnswerDraft,
    EventStream,
    StreamLost,
    StreamUnavailable,
    apply_to_view,
    event_line,
    step_states,
)

# Events after which the view is read again (the question's options, the usage, the end).
VIEW_EVENTS = frozenset({"status", "question", "usage", "end"})


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
    if view.get("finished") or not waiting or waiting["question_id"] in answered:
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
        if now.get("finished") or still.get("question_id") != waiting["question_id"]:
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
    return exit_code(view), view


def follow_stream(client: httpx.Client, job_id: str, console: Console, *, interactive: bool) -> tuple[int, Any]:
    """Follow the job's event stream: a line per step change, the answer as it is written, then the result."""
    answered: set[str] = set()
    seen: set[tuple[Any, ...]] = set()
    draft = AnswerDraft()
    states = step_states(client)
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
                    if not apply_to_view(view, event, states) or event.type in VIEW_EVENTS:
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
                if view.get("finished"):
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
