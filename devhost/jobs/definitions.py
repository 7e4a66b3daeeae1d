"""``python -m devhost agents|workflows|teams list|show|apply``: definitions of a running host, from files.

``apply -f FILE`` reads YAML or JSON (one definition, a list, or several YAML documents) and saves each one:
an update when the id exists (a new version, or nothing when it is unchanged), else a create. The host
validates; every problem is printed with its path and code. Talks to the API at ``--url`` with the function
key found as for ``jobs``. Exit codes: 0 ok, 2 usage, connection, validation or API error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from devhost.jobs.printed import EXIT_USAGE, http_problem

PLURALS = {"agents": "agent", "workflows": "workflow", "teams": "team"}


class CliError(Exception):
    """A problem to print as one sentence (exit 2)."""


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``agents``, ``workflows`` and ``teams`` groups to the devhost CLI."""
    for plural, kind in PLURALS.items():
        group = sub.add_parser(plural, help=f"list, show or apply {kind} definitions on a running host")
        actions = group.add_subparsers(dest="definitions_command", required=True)
        actions.add_parser("list", parents=[common], help=f"the {plural}, by id")
        show = actions.add_parser("show", parents=[common], help=f"one {kind}: its definition and versions")
        show.add_argument("id")
        show.add_argument("--version", type=int, default=None, help="a given version (default: the latest)")
        apply = actions.add_parser("apply", parents=[common], help=f"create or update {plural} from files")
        apply.add_argument("-f", "--file", action="append", required=True, help="a YAML or JSON file (repeatable)")
        if plural != "agents":
            from devhost.jobs.runs import add_run_parser

            add_run_parser(actions, common, plural)


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The definitions in a YAML or JSON file (a mapping, a list of them, or several YAML documents)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix.lower() == ".json":
            documents: list[Any] = [json.loads(text)]
        else:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(f"{path} is not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {exc}") from exc
    found: list[dict[str, Any]] = []
    for document in documents:
        items = document if isinstance(document, list) else [document]
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise CliError(f"{path}: each definition must be a mapping with an 'id'")
            found.append(item)
    if not found:
        raise CliError(f"{path} holds no definition")
    return found


def _problems(response: httpx.Response, url: str) -> str:
    """An error answer; for an invalid definition every problem on its own line."""
    try:
        errors = response.json()["error"]["errors"]
    except (ValueError, KeyError, TypeError):
        errors = None
    if not isinstance(errors, list):
        return http_problem(response, url)
    lines = [f"  {e.get('path') or '(body)'}: {e.get('message')} [{e.get('code')}]" for e in errors]
    return "the definition is invalid:\n" + "\n".join(lines)


def apply_one(client: httpx.Client, url: str, plural: str, definition: dict[str, Any]) -> str:
    """Save one definition (update, else create); what happened, as a line."""
    kind = PLURALS[plural]
    given = definition.get("kind")
    if given is not None and given != kind:
        raise CliError(f"{definition['id']} is a {given}, not a {kind}: apply it with `{given}s apply`")
    def_id = definition["id"]
    response = client.put(f"/api/{plural}/{def_id}", json=definition)
    if response.status_code == 404 and response.json().get("error", {}).get("code") == "DEFINITION_NOT_FOUND":
        response = client.post(f"/api/{plural}", json=definition)
        if response.status_code == 201:
            return f"created {kind} {def_id} (version {response.json()['version']})"
    if response.status_code >= 400:
        raise CliError(f"{kind} {def_id}: {_problems(response, url)}")
    body = response.json()
    verb = "updated" if body.get("created") else "unchanged"
    return f"{verb} {kind} {def_id} (version {body['version']})"


def render_list(plural: str, items: list[dict[str, Any]]) -> Table:
    """The table of ``<plural> list``."""
    table = Table(title=f"{len(items)} {plural}", expand=False)
    for column in ("id", "name", "version", "updated", "description"):
        table.add_column(column, no_wrap=column != "description")
    for item in items:
        updated = str(item.get("updated_at") or "")[:19].replace("T", " ")
        table.add_row(
            str(item["id"]),
            str(item.get("name", "")),
            "built-in" if item.get("built_in") else str(item.get("latest_version")),
            updated,
            str(item.get("description") or "")[:70],
        )
    return table


def render_show(view: dict[str, Any], console: Console) -> None:
    """One definition: the chosen version as YAML, then its versions."""
    console.print(
        f"{view['kind']} {view['id']}: version {view['version']} of {view['latest_version']}",
        markup=False,
        highlight=False,
    )
    console.print(yaml.safe_dump(view["definition"], sort_keys=False, allow_unicode=True), markup=False)
    table = Table(title="versions", expand=False)
    for column in ("version", "created", "by"):
        table.add_column(column)
    for version in view.get("versions", []):
        created = str(version.get("created_at") or "")[:19].replace("T", " ")
        table.add_row(str(version["version"]), created, str(version.get("created_by") or ""))
    console.print(table)


def run(args: argparse.Namespace, client: httpx.Client, url: str, console: Console) -> int:
    """Run one definitions action."""
    plural = args.command
    if args.definitions_command == "run":
        from devhost.jobs.runs import start_and_follow

        return start_and_follow(args, client, url, console)
    if args.definitions_command == "list":
        response = client.get(f"/api/{plural}")
        if response.status_code != 200:
            raise CliError(http_problem(response, url))
        items = response.json().get(plural, [])
        print(json.dumps(items, indent=2)) if args.json else console.print(render_list(plural, items))
        return 0
    if args.definitions_command == "show":
        params = {"version": str(args.version)} if args.version else None
        response = client.get(f"/api/{plural}/{args.id}", params=params)
        if response.status_code != 200:
            raise CliError(http_problem(response, url))
        print(json.dumps(response.json(), indent=2)) if args.json else render_show(response.json(), console)
        return 0
    documents = [(Path(f), d) for f in args.file for d in load_documents(Path(f))]
    failed = 0
    for _path, definition in documents:
        try:
            console.print(apply_one(client, url, plural, definition), markup=False, highlight=False)
        except CliError as exc:
            failed += 1
            console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return EXIT_USAGE if failed else 0
