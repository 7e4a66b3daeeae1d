"""Column check of the SQL guard: a statement may name only columns the catalog knows, before it reaches the database.

sqlglot's own resolver (``qualify`` with the catalog as schema) finds each column's table; a column it cannot
resolve is an error only when it is neither a column of a table the statement reads nor a name the statement
defines itself (a select alias, a CTE or derived-table column). Statements over tables the catalog does not
describe are left to the table allow-list.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify

_UNRESOLVED = re.compile(r"Column '([^']+)' could not be resolved(?: for table: '([^']+)')?")
_UNKNOWN = re.compile(r"Unknown column: (\w+)")


def unknown_column(root: exp.Expr, dialect: str, columns: Mapping[str, Collection[str]]) -> str | None:
    """Why the statement names a column the catalog does not know, or None when every column is known."""
    schema = {t.lower(): {c.lower() for c in cols} for t, cols in columns.items()}
    ctes = {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}
    aliases = {t.alias_or_name.lower(): t.name.lower() for t in root.find_all(exp.Table)}
    tables = {name for name in aliases.values() if name not in ctes}
    if not tables or any(t not in schema for t in tables):
        return None
    unresolved = _unresolved(root, dialect, schema)
    if unresolved is None:
        return None
    column, qualifier = unresolved
    if qualifier:
        table = aliases.get(qualifier)
        if table is None or table not in schema or column in schema[table]:
            return None
        return f"unknown column `{column}` in `{table}` (its columns: {', '.join(sorted(schema[table]))})"
    if column in _defined_names(root) or any(column in schema[t] for t in tables):
        return None
    known = "; ".join(f"{t}: {', '.join(sorted(schema[t]))}" for t in sorted(tables))
    return f"unknown column `{column}` (columns of the tables read: {known})"


def _unresolved(root: exp.Expr, dialect: str, schema: dict[str, set[str]]) -> tuple[str, str] | None:
    """The column sqlglot's resolver could not place, and the qualifier it was written with ("" if none)."""
    try:
        qualify(
            root.copy(),
            schema={t: dict.fromkeys(cols, "TEXT") for t, cols in schema.items()},
            dialect=dialect,
            validate_qualify_columns=True,
            quote_identifiers=False,
            identify=False,
        )
        return None
    except OptimizeError as exc:
        message = str(exc)
    except SqlglotError:
        return None  # the resolver's limits are not the statement's fault; the database decides
    if found := _UNRESOLVED.search(message):
        return found.group(1).lower(), (found.group(2) or "").lower()
    if found := _UNKNOWN.search(message):
        return found.group(1).lower(), _qualifier_of(root, found.group(1))
    return None


def _qualifier_of(root: exp.Expr, column: str) -> str:
    """The table or alias a qualified column reference names ("o" in ``o.bogus``)."""
    for col in root.find_all(exp.Column):
        if col.name.lower() == column.lower() and col.table:
            return col.table.lower()
    return ""


def _defined_names(root: exp.Expr) -> set[str]:
    """Names the statement defines itself: select aliases and CTE or derived-table column lists."""
    names = {a.alias.lower() for a in root.find_all(exp.Alias) if a.alias}
    names |= {c.name.lower() for alias in root.find_all(exp.TableAlias) for c in alias.columns}
    return names
