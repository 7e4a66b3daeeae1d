"""Small readers of the sqlglot tree and its errors that the SQL guard uses."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from shared.runtime.sqlguard.denylists import canon_name


def normalize_allowed(name: str, default_schema: str) -> tuple[str, str]:
    """An allow-listed table name as (schema, table), lower case, with the default schema filled in."""
    parts = [p.strip().strip('[]"`').lower() for p in name.strip().split(".")]
    if len(parts) == 1:
        return default_schema, parts[0]
    return parts[-2], parts[-1]


def function_name(node: exp.Expr) -> str:
    """The function's name as written (anonymous functions) or sqlglot's name for it, lower case."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return ""


def function_keys(node: exp.Expr) -> set[str]:
    """Canonical names of a function node (sqlglot may map e.g. sqlite_version() to CurrentVersion)."""
    keys = {canon_name(function_name(node))}
    if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous):
        keys.add(canon_name(type(node).__name__))
    keys.discard("")
    return keys


def literal_int(node: exp.Expr | None) -> int | None:
    """The integer a literal (possibly in parentheses or negated) stands for, else None."""
    if isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value = literal_int(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def is_cte_reference(table: exp.Table) -> bool:
    """Whether an unqualified table name resolves to a CTE visible at its position."""
    name = table.name.lower()
    child: exp.Expr = table
    parent = table.parent
    via_cte: exp.CTE | None = None
    while parent is not None:
        if isinstance(child, exp.CTE):
            via_cte = child
        with_ = None if isinstance(parent, exp.With) else (parent.args.get("with_") or parent.args.get("with"))
        if isinstance(with_, exp.With):
            ctes = list(with_.expressions)
            if child is with_ and via_cte is not None and via_cte in ctes:
                # Inside a CTE: earlier CTEs and the CTE itself (T-SQL CTEs are implicitly recursive,
                # and SQLite does not require the RECURSIVE keyword either). Later CTEs count as tables.
                visible = ctes[: ctes.index(via_cte) + 1]
            elif child is with_:
                visible = []
            else:
                visible = ctes
            if any(c.alias.lower() == name for c in visible):
                return True
        child, parent = parent, parent.parent
    return False


def outer_cap(root: exp.Expr, dialect: str) -> int | None:
    """The row limit of the outermost query (TOP, LIMIT or FETCH), or None when there is none."""
    limit = root.args.get("limit")
    if isinstance(limit, exp.Fetch):
        return literal_int(limit.args.get("count"))
    if isinstance(limit, exp.Limit):
        return literal_int(limit.expression)
    return None


def outer_row_cap(sql: str, dialect: str) -> int | None:
    """The literal row limit of the outermost query of ``sql`` (for tests and logs); None if absent."""
    try:
        return outer_cap(sqlglot.parse_one(sql, read=dialect), dialect)
    except SqlglotError:
        return None


_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")


def parse_problem(exc: SqlglotError, dialect: str) -> str:
    """A parse failure in plain words, with where it is and the text around it (no parser internals)."""
    errors = getattr(exc, "errors", None) or []
    if not errors:
        return f"the SQL does not parse as {dialect}: {_short(exc)}"
    first = errors[0]
    description = str(first.get("description") or "")
    if _MISSING.match(description):
        what = "something is missing"
    elif description.startswith("Expecting "):
        what = f"expected {description.removeprefix('Expecting ')!r}"
    else:
        what = "unexpected text"
    near = f"{first.get('start_context', '')}{first.get('highlight', '')}{first.get('end_context', '')}"
    near = " ".join(near.split())[-80:]
    where = f"line {first.get('line')}, column {first.get('col')}"
    return f"the SQL does not parse as {dialect}: {what} at {where}, near `{near}`"


def read_problem(exc: SqlglotError, sql: str) -> str:
    """A tokenizer failure in plain words: almost always an unclosed string or quoted name."""
    quotes = [q for q in ("'", '"', "`") if sql.count(q) % 2] + (["["] if sql.count("[") != sql.count("]") else [])
    what = f"an unclosed {quotes[0]} (a string or quoted name never ends)" if quotes else "a character it cannot read"
    return f"the SQL could not be read: {what}"


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.sub(r"\x1b\[[0-9;]*m", "", text)[:300]
