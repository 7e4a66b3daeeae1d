"""``python -m devhost verified-queries list|apply|retire``: the verified queries of a running host.

``apply -f FILE`` reads YAML or JSON (one query, a list, or several YAML documents) and saves each one: an
edit when the id exists, else a create. The host guards each statement and names every problem. Talks to
``/api/verified-queries`` at ``--url`` with the function key found as for ``jobs``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from devhost.jobs.definitions import CliError, load_documents
from devhost.jobs.printed import EXIT_USAGE, http_problem

GROUP = "verified-queries"
ROUTE = "/api/verified-queries"


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``verified-queries`` group to the devhost CLI."""
    group = sub.add_parser(GROUP, help="list, apply or retire the verified queries of a running host")
    actions = group.add_subparsers(dest="verified_command", required=True)
    listing = actions.add_parser("list", parents=[common], help="the live verified queries, by id")
    listing.add_argument("--retired", action="store_true", help="the retired ones too")
    apply = actions.add_parser("apply", parents=[common], help="save or edit verified queries from files")
    apply.add_argument("-f", "--file", action="append", required=True, help="a YAML or JSON file (repeatable)")
    retire = actions.add_parser("retire", parents=[common], help="retire a verified query (no job uses it then)")
    retire.add_argument("id")


def render_list(items: list[dict[str, Any]]) -> Table:
    """The table of ``verified-queries list``."""
    table = Table(title=f"{len(items)} verified queries", expand=False)
    for column in ("id", "name", "question", "approved", "state"):
        table.add_column(column, no_wrap=column in ("id", "approved"))
    for q in items:
        approved = f"{str(q.get('approved_at') or '')[:10]} {q.get('approved_by') or ''}".strip()
        state = "retired" if q.get("retired") else "live"
        if "shared" in q:  # whether everyone sees it (the server says; with Easy Auth, by its owner's role)
            state += ", shared" if q["shared"] else ", private"
        table.add_row(str(q["id"]), str(q.get("name", "")), str(q.get("question", ""))[:70], approved, state)
    return table


def apply_one(client: httpx.Client, url: str, query: dict[str, Any]) -> str:
    """Save one verified query (edit, else create); what happened, as a line."""
    query_id = query["id"]
    response = client.put(f"{ROUTE}/{query_id}", json=query)
    if response.status_code == 404:
        response = client.post(ROUTE, json=query)
        if response.status_code == 201:
            return f"saved verified query {query_id}"
    if response.status_code >= 400:
        raise CliError(f"verified query {query_id}: {http_problem(response, url)}")
    return f"edited verified query {query_id}"


def run(args: argparse.Namespace, client: httpx.Client, url: str, console: Console) -> int:
    """Run one verified-queries action."""
    if args.verified_command == "list":
        response = client.get(ROUTE, params={"retired": "true"} if args.retired else None)
        if response.status_code != 200:
            raise CliError(http_problem(response, url))
        items = response.json().get("verified_queries", [])
        print(json.dumps(items, indent=2)) if args.json else console.print(render_list(items))
        return 0
    if args.verified_command == "retire":
        response = client.delete(f"{ROUTE}/{args.id}")
        if response.status_code != 200:
            raise CliError(http_problem(response, url))
        console.print(f"retired verified query {args.id}", markup=False, highlight=False)
        return 0
    failed = 0
    for path in args.file:
        for query in load_documents(Path(path)):
            try:
                console.print(apply_one(client, url, query), markup=False, highlight=False)
            except CliError as exc:
                failed += 1
                console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return EXIT_USAGE if failed else 0
