"""How the CLI shows a job: the live table of steps, the answer as it is written, the result with its claims
and artifacts, a question's deadline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from devhost.jobs.cost import cost_line, quote_line
from devhost.jobs.stream import (
    AnswerDraft,
    local_time,
)

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
        # Colours are presentation; a state with none (one the host added) is drawn plainly.
        style = STATE_STYLE.get(state)
        styled = f"[{style}]{escape(state)}[/]" if style else escape(state)
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
