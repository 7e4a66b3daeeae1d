"""Print the T-SQL that gives the app identity read access to one schema, and nothing more.

The postprovision hook pipes the output into sqlcmd as the server's Entra admin::

    python infra/hooks/sql_grants.py --user <uami-name> --object-id <principal-id> --schema dbo \
        --catalog data/catalog.json

It creates a contained database user for the managed identity (``FROM EXTERNAL PROVIDER``), grants
SELECT on the schema, and denies SELECT on every table the semantic catalog marks sensitive. It never
adds the user to a role: no db_datareader (all schemas) and never db_datawriter. Re-running it is safe.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class GrantError(ValueError):
    """An argument that cannot safely go into the generated T-SQL."""


def _identifier(value: str, what: str) -> str:
    if not _IDENTIFIER.match(value):
        raise GrantError(f"{what} {value!r} is not a plain identifier (letters, digits, '_' or '-')")
    return value


def sensitive_tables(catalog_path: Path) -> list[str]:
    """Names of the tables marked ``"sensitive": true`` in the semantic catalog, sorted."""
    catalog = json.loads(catalog_path.read_text(encoding="utf-8"))
    names = [str(t["name"]) for t in catalog.get("tables", []) if t.get("sensitive") is True]
    return sorted(_identifier(n, "table") for n in names)


def grant_script(*, user: str, object_id: str, schema: str, denied_tables: list[str]) -> str:
    """The idempotent T-SQL for the app's contained user: SELECT on ``schema``, DENY on sensitive tables."""
    user = _identifier(user, "user")
    schema = _identifier(schema, "schema")
    if not _GUID.match(object_id):
        raise GrantError(f"object id {object_id!r} is not a GUID")
    lines = [
        "SET NOCOUNT ON;",
        f"IF NOT EXISTS (SELECT 1 FROM sys.database_principals WHERE name = N'{user}')",
        f"    CREATE USER [{user}] FROM EXTERNAL PROVIDER WITH OBJECT_ID = '{object_id.lower()}';",
        f"GRANT SELECT ON SCHEMA::[{schema}] TO [{user}];",
    ]
    for table in denied_tables:
        lines.append(f"DENY SELECT ON OBJECT::[{schema}].[{_identifier(table, 'table')}] TO [{user}];")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: print the script, or a clear error and exit 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True, help="name of the app's managed identity")
    parser.add_argument("--object-id", required=True, help="principal (object) id of the managed identity")
    parser.add_argument("--schema", default="dbo", help="the one schema the app may read")
    parser.add_argument("--catalog", type=Path, default=None, help="semantic catalog with sensitive tables")
    args = parser.parse_args(argv)
    try:
        denied = sensitive_tables(args.catalog) if args.catalog else []
        sys.stdout.write(
            grant_script(user=args.user, object_id=args.object_id, schema=args.schema, denied_tables=denied)
        )
    except (GrantError, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"sql_grants: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
