"""``python -m devhost jobs fork JOB_ID --from STEP [...]`` and ``jobs compare A B`` (docs/fork.md).

``fork`` re-runs a finished job from one of its steps with a change (the step's SQL, question or search query;
the job's model, token limit, approval policy) and prints the new job's id; ``--wait`` follows it to the end.
``compare`` prints how job B differs from job A: the answer, citations, each SQL statement and its rows, usage,
duration.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from devhost.jobs.printed import http_problem


class ForkCliError(Exception):
    """A problem to print as one sentence (exit 2)."""


def add_parsers(actions: Any, common: argparse.ArgumentParser) -> None:
    """Add ``jobs fork`` and ``jobs compare``."""
    fork = actions.add_parser("fork", parents=[common], help="re-run a finished job from one of its steps, changed")
    fork.add_argument("job_id")
    fork.add_argument(
        "--from",
        dest="from_step",
        required=True,
        help="the step to re-run from: s2; an agent job's turn-2 or answer; a workflow run's node id",
    )
    fork.add_argument("--sql", default=None, help="the step's new SQL statement (a SQL step)")
    fork.add_argument("--question", default=None, help="the step's new question")
    fork.add_argument("--query", default=None, help="the step's new search query (a document lookup)")
    fork.add_argument("--prompt", default=None, help="a workflow agent node's new prompt")
    fork.add_argument("--model", default=None, help="the only model the fork may use")
    fork.add_argument("--max-tokens", type=int, default=None, help="the fork's per-call token limit")
    fork.add_argument("--approval", choices=["never", "always", "sensitive"], default=None, help="SQL approval")
    compare = actions.add_parser("compare", parents=[common], help="how job B differs from job A")
    compare.add_argument("job_id")
    compare.add_argument("other")


def fork_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The ``changes`` of the fork request the options ask for."""
    fields = ("sql", "question", "query", "prompt")
    changes: dict[str, Any] = {k: v for k in fields if (v := getattr(args, k)) is not None}
    constraints: dict[str, Any] = {}
    if args.model:
        constraints["allowed_models"] = [args.model]
    if args.max_tokens is not None:
        constraints["max_tokens"] = args.max_tokens
    if constraints:
        changes["constraints"] = constraints
    if args.approval:
        changes["approval"] = {"sql": args.approval}
    return changes


def run(args: argparse.Namespace, client: httpx.Client, url: str, console: Console) -> int:
    """Run ``jobs fork`` or ``jobs compare``; returns the exit code."""
    if args.jobs_command == "fork":
        body = {"from_step": args.from_step, "changes": fork_changes(args)}
        posted = client.post(f"/api/jobs/{args.job_id}/fork", json=body)
        if posted.status_code != 202:
            raise ForkCliError(http_problem(posted, url))
        started = posted.json()
        if args.json:
            print(json.dumps(started, indent=2))
            return 0
        carried = ", ".join(started.get("carried_over") or []) or "nothing"
        console.print(f"fork {started['id']} of job {args.job_id} from {args.from_step}", markup=False)
        console.print(f"carried over: {carried}", markup=False, highlight=False)
        console.print(f"follow it with: python -m devhost jobs attach {started['id']}", markup=False, soft_wrap=True)
        return 0
    response = client.get(f"/api/jobs/{args.job_id}/compare/{args.other}")
    if response.status_code != 200:
        raise ForkCliError(http_problem(response, url))
    diff = response.json()
    if args.json:
        print(json.dumps(diff, indent=2))
    else:
        render_compare(diff, console)
    return 0


def render_compare(diff: dict[str, Any], console: Console) -> None:
    """The difference as a few tables: steps, SQL, usage and duration, then the answer's claims."""
    a, b = diff["a"], diff["b"]
    console.print(f"A {a['id']} ({a['status']})  →  B {b['id']} ({b['status']})", markup=False, highlight=False)
    steps = Table(title="steps")
    for column in ("step", "A", "B", "carried over"):
        steps.add_column(column)
    for step in diff["steps"]:
        steps.add_row(step["id"], str(step["a"]), str(step["b"]), "yes" if step["carried_over"] else "")
    console.print(steps)
    for sql in diff["sql"]:
        rows = sql["rows"]
        state = "same SQL" if sql["same_sql"] else "SQL changed"
        console.print(
            f"{sql['step']}: {state}; rows {rows['a']} → {rows['b']} (+{rows['added']} −{rows['removed']})",
            markup=False,
            highlight=False,
        )
    usage = diff["usage"]["total"]
    console.print(
        f"tokens {usage['a']['total_tokens']} → {usage['b']['total_tokens']} ({usage['tokens_delta']:+d}); "
        f"cost {usage['a']['estimated_cost']:.6f} → {usage['b']['estimated_cost']:.6f} USD; "
        f"B carried over {diff['usage']['carried_over']['b']['total_tokens']} tokens of A's work",
        markup=False,
        highlight=False,
    )
    duration = diff["duration_ms"]
    console.print(f"duration ms {duration['a']} → {duration['b']}", markup=False, highlight=False)
    cites = diff["citations"]
    console.print(f"citations added {cites['added']}, dropped {cites['dropped']}", markup=False, highlight=False)
    answer = diff["answer"]
    if answer["same"]:
        console.print("the answers are the same", markup=False)
        return
    for claim in answer["claims_dropped"]:
        console.print(f"- {claim}", style="red", markup=False, highlight=False)
    for claim in answer["claims_added"]:
        console.print(f"+ {claim}", style="green", markup=False, highlight=False)
