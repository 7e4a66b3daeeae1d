"""The SQL guard: accept one read-only query over allow-listed tables, capped to a row limit.

``guard_sql`` never raises for bad SQL: it returns a ``GuardResult`` that is either accepted (the
rewritten SQL to run, the tables it reads, the row cap applied) or rejected with a stable
``reason_code`` and a message. The checks work on the sqlglot syntax tree, never on raw text, so
keywords inside string literals or comments neither trigger a rejection nor slip through; the SQL
that runs is generated from the checked tree (comments dropped), so nothing the guard did not see
can reach the database.

Checks, in order:

1. Text: not empty, at most ``MAX_SQL_CHARS``, no NUL, and no non-ASCII character outside string
   literals and comments (stops homoglyph and invisible-character tricks in keywords and names).
2. Parse with the dialect's grammar (``sqlite``, ``tsql`` or ``postgres``: the database family's members,
   ``shared/providers/sql/family.py``); a parse failure is ``PARSE_ERROR``.
   Before parsing, nesting deeper than 20 parentheses/``CASE`` levels is ``TOO_DEEP`` (and so is a
   ``RecursionError`` that still happens). After parsing, the text between tokens may hold only
   whitespace and comments that every engine ends at the same place, or it is ``AMBIGUOUS_COMMENT``
   (``/*!``, ``/*+``, ``/*`` nested in a block comment, a ``--`` comment holding CR, VT, FF, NEL,
   U+2028 or U+2029): the guard judges exactly the tokens that the SQL it returns is made of.
   Dialect slips: ``TOP`` written for SQLite or PostgreSQL is read with the T-SQL grammar and written
   back as ``LIMIT`` (``TOP ... PERCENT`` is rejected, and so is ``WITH TIES`` for SQLite); ``LIMIT``
   written for T-SQL becomes ``TOP`` (or ``OFFSET ... FETCH`` when it has an ``OFFSET``).
3. Exactly one statement, and it is a ``SELECT`` (optionally with ``WITH`` and set operations).
4. Nowhere in the tree (CTEs, subqueries, set operations): DML, DDL, ``MERGE``, ``EXEC``,
   ``SELECT ... INTO``, ``PRAGMA``, ``ATTACH``, transactions, locking clauses (``FOR UPDATE``), variables
   or bind parameters (``@p``, ``?``, ``:name``, ``$name``, ``$1``), side-effecting or file/remote-access
   functions (``load_extension``, ``readfile``, ``writefile``, ``OPENROWSET``, ``OPENQUERY``, ``xp_*``,
   PostgreSQL's ``pg_*``, ``lo_*``, ``dblink*``, ``set_config``, ``nextval``, ``query_to_xml``, ...).
   Every other function must be on an allow-list (``FUNCTION_NOT_ALLOWED`` names it), and a
   schema-qualified call (a T-SQL user-defined function) is never allowed. T-SQL table hints other than
   ``NOLOCK`` and query options other than ``MAXDOP``, ``RECOMPILE``, ``MAXRECURSION 1-100`` are
   ``HINT_NOT_ALLOWED``.
5. Tables: system catalogs (``sys.*``, ``INFORMATION_SCHEMA``, ``sqlite_*``, ``pragma_*``, ``pg_catalog``
   and every ``pg_*`` name, which PostgreSQL resolves in ``pg_catalog`` first, metadata functions, ``@@``
   globals) only with ``allow_system_catalogs``; three- and four-part names (other databases, linked
   servers) never; every other table must be on the allow-list (case-insensitive, default schema
   ``dbo`` / ``main`` / ``public`` optional). CTE names are resolved by scope,
   so a CTE does not hide a real table of the same name elsewhere in the query.
5b. Resources (``shared/runtime/sqlguard/bounds.py``): no expression may build a string longer than 32 x the longest
   stored value + 64K characters, followed through CTEs and derived tables (``printf``/``format``
   widths, ``replace``, ``replicate``, ``space``, ``hex``, concatenation); recursive CTEs only in a
   shape whose rows and strings cannot grow. A violation is ``RESOURCE_LIMIT``.
6. Row cap on the outermost query, at ``max_rows + 1`` (the extra row lets the runner, which
   fetches ``max_rows + 1`` and returns ``max_rows``, report ``truncated`` truthfully): a missing
   limit is added, a larger (or non-literal, or negative) one is tightened; smaller ones are kept.
   T-SQL uses ``TOP`` (kept with ``DISTINCT`` and ``WITH TIES``; ``PERCENT`` is rejected because it
   does not bound rows), or ``FETCH NEXT`` when the query uses ``OFFSET``; a T-SQL set operation gets
   ``ORDER BY ... OFFSET 0 ROWS FETCH NEXT n ROWS ONLY``. ``WITH TIES`` can return more rows than
   the cap: the runner's ``fetchmany(max_rows + 1)`` still bounds what is read.
7. Output columns without a name (``SUM(x)``) get a readable alias, because drivers name them
   inconsistently (the SQLite ODBC driver mangles names containing dots; SQL Server leaves them empty).
8. The generated SQL is parsed and checked again before it is returned."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Literal

import sqlglot
from pydantic import BaseModel, Field
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token

from shared.runtime.sqlguard.bounds import function_rule, is_operator
from shared.runtime.sqlguard.columns import unknown_column
from shared.runtime.sqlguard.denylists import (
    ALLOWED_QUERY_OPTIONS,
    ALLOWED_TABLE_HINTS,
    FORBIDDEN_FUNCTION_PREFIXES,
    FORBIDDEN_FUNCTIONS,
    FORBIDDEN_NODES,
    POSTGRES_SYSTEM_TABLE,
    SAFE_TABLE_FUNCTIONS,
    SQLITE_SYSTEM_TABLE,
    STRING_TOKENS,
    SYSTEM_DATABASES,
    SYSTEM_FUNCTIONS,
    SYSTEM_SCHEMAS,
    TSQL_SYSTEM_TABLE,
)
from shared.runtime.sqlguard.growth import GrowthChecker
from shared.runtime.sqlguard.lexical import LimitError, check_gaps, check_token_depth
from shared.runtime.sqlguard.syntax import (
    function_keys,
    function_name,
    is_cte_reference,
    literal_int,
    normalize_allowed,
    outer_cap,
    parse_problem,
    read_problem,
)

GuardDialect = Literal["sqlite", "tsql", "postgres"]


MAX_SQL_CHARS = 20_000


class GuardReason(StrEnum):
    """Stable reason codes of a rejection."""

    EMPTY = "EMPTY"
    TOO_LONG = "TOO_LONG"
    INVALID_CHARACTERS = "INVALID_CHARACTERS"
    UNSUPPORTED_DIALECT = "UNSUPPORTED_DIALECT"
    PARSE_ERROR = "PARSE_ERROR"
    MULTIPLE_STATEMENTS = "MULTIPLE_STATEMENTS"
    NOT_SELECT = "NOT_SELECT"
    FORBIDDEN_STATEMENT = "FORBIDDEN_STATEMENT"
    SELECT_INTO = "SELECT_INTO"
    FORBIDDEN_FUNCTION = "FORBIDDEN_FUNCTION"
    VARIABLE = "VARIABLE"
    SYSTEM_CATALOG = "SYSTEM_CATALOG"
    CROSS_DATABASE = "CROSS_DATABASE"
    TABLE_NOT_ALLOWED = "TABLE_NOT_ALLOWED"
    UNSUPPORTED_ROW_LIMIT = "UNSUPPORTED_ROW_LIMIT"
    REWRITE_FAILED = "REWRITE_FAILED"
    TOO_DEEP = "TOO_DEEP"
    AMBIGUOUS_COMMENT = "AMBIGUOUS_COMMENT"
    RESOURCE_LIMIT = "RESOURCE_LIMIT"
    UNKNOWN_COLUMN = "UNKNOWN_COLUMN"
    FUNCTION_NOT_ALLOWED = "FUNCTION_NOT_ALLOWED"
    HINT_NOT_ALLOWED = "HINT_NOT_ALLOWED"


class GuardResult(BaseModel):
    """The guard's verdict: accepted with the SQL to run, or rejected with a reason."""

    accepted: bool
    # The SQL to run (generated from the checked tree; comments dropped).
    sql: str | None = None
    # Tables and views it reads: bare lower-case names, schema-qualified outside the default schema.
    tables: list[str] = Field(default_factory=list)
    # The row limit on the outermost query: at most max_rows + 1 (see the module docstring).
    row_cap: int | None = None
    reason_code: GuardReason | None = None
    message: str = ""
    notes: list[str] = Field(default_factory=list)


class _Reject(Exception):
    def __init__(self, reason: GuardReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


_DEFAULT_SCHEMA = {"sqlite": "main", "tsql": "dbo", "postgres": "public"}


# Dialects without TOP: a TOP written for them is read as T-SQL and written back as LIMIT.
_LIMIT_DIALECTS = frozenset({"sqlite", "postgres"})


def guard_sql(
    sql: str,
    *,
    dialect: str,
    allowed_tables: set[str] | frozenset[str] | list[str],
    max_rows: int,
    allow_system_catalogs: bool = False,
    columns: Mapping[str, Collection[str]] | None = None,
) -> GuardResult:
    """Check and rewrite one LLM-written query; never raises for bad SQL (see the module docstring).

    With ``columns`` ({table: column names}, from the catalog) a column no table has is rejected too.
    """
    try:
        if dialect not in _DEFAULT_SCHEMA:
            raise _Reject(GuardReason.UNSUPPORTED_DIALECT, f"unsupported SQL dialect {dialect!r}")
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        guard = _Guard(dialect, allowed_tables, max_rows, allow_system_catalogs)  # type: ignore[arg-type]
        guard.columns = columns
        return guard.run(sql)
    except _Reject as rej:
        return GuardResult(accepted=False, reason_code=rej.reason, message=rej.message)
    except LimitError as err:
        return GuardResult(accepted=False, reason_code=GuardReason(err.reason), message=err.message)
    except RecursionError:
        # Last resort: the token pre-check should stop deep nesting before sqlglot recurses.
        return GuardResult(accepted=False, reason_code=GuardReason.TOO_DEEP, message="the SQL is nested too deeply")


class _Guard:
    def __init__(self, dialect: GuardDialect, allowed: set[str] | frozenset[str] | list[str], max_rows: int,
                 allow_system: bool) -> None:  # fmt: skip
        self.dialect = dialect
        self.columns: Mapping[str, Collection[str]] | None = None
        self.default_schema = _DEFAULT_SCHEMA[dialect]
        self.allowed = {normalize_allowed(name, self.default_schema) for name in allowed if name and name.strip()}
        # One row more than the caller wants: the runner fetches max_rows + 1 and so can tell that the
        # result was cut (``truncated``) while returning at most max_rows rows.
        self.cap = max_rows + 1
        self.allow_system = allow_system
        self.notes: list[str] = []

    # -- pipeline -----------------------------------------------------------------------------------

    def run(self, sql: str) -> GuardResult:
        if not isinstance(sql, str) or not sql.strip():
            raise _Reject(GuardReason.EMPTY, "the SQL is empty")
        if len(sql) > MAX_SQL_CHARS:
            raise _Reject(GuardReason.TOO_LONG, f"the SQL is longer than {MAX_SQL_CHARS} characters")
        if "\x00" in sql:
            raise _Reject(GuardReason.INVALID_CHARACTERS, "the SQL contains a NUL character")
        root, read_dialect = self._parse(sql)
        tables = self._check(root, read_dialect)
        if self.columns and (problem := unknown_column(root, read_dialect, self.columns)):
            raise _Reject(GuardReason.UNKNOWN_COLUMN, problem)
        root = self._cap(root)
        self._name_columns(root)
        try:
            out = root.sql(dialect=self.dialect, comments=False)
        except SqlglotError as exc:
            raise _Reject(GuardReason.REWRITE_FAILED, f"could not write the SQL for {self.dialect}: {exc}") from exc
        # The SQL that runs is what the database will parse: check it once more, as that dialect.
        again = self._parse_one(out, self.dialect)
        if self._check(again, self.dialect) != tables or outer_cap(again, self.dialect) is None:
            raise _Reject(GuardReason.REWRITE_FAILED, "the rewritten SQL did not pass the guard again")
        cap = outer_cap(again, self.dialect)
        return GuardResult(accepted=True, sql=out, tables=sorted(tables), row_cap=cap, notes=self.notes,
                           message="accepted")  # fmt: skip

    # -- 1-3: text, parse, one SELECT -----------------------------------------------------------------

    def _tokens(self, sql: str, dialect: str) -> list[Token]:
        try:
            tokens = list(sqlglot.Dialect.get_or_raise(dialect).tokenize(sql))
        except SqlglotError as exc:
            raise _Reject(GuardReason.PARSE_ERROR, read_problem(exc, sql)) from exc
        # Before parsing: sqlglot parses nesting recursively.
        check_token_depth(tokens)
        return tokens

    def _parse(self, sql: str) -> tuple[exp.Expr, str]:
        tokens = self._tokens(sql, self.dialect)
        for tok in tokens:
            if tok.token_type not in STRING_TOKENS and not tok.text.isascii():
                raise _Reject(
                    GuardReason.INVALID_CHARACTERS,
                    f"non-ASCII characters outside string literals are not allowed (near {tok.text[:40]!r})",
                )
        words = [t.text.upper() for t in tokens if t.token_type not in STRING_TOKENS]
        try:
            root = self._parse_one(sql, self.dialect)
        except _Reject:
            if self.dialect in _LIMIT_DIALECTS and "TOP" in words:
                # Dialect slip: T-SQL's TOP written for SQLite or PostgreSQL. Read it as T-SQL, write it back.
                root = self._parse_one(sql, "tsql")
                self.notes.append(f"TOP (T-SQL) converted to LIMIT for {self.dialect}")
                return root, "tsql"
            raise
        if self.dialect == "tsql" and "LIMIT" in words:
            self.notes.append("LIMIT converted to T-SQL (TOP, or OFFSET/FETCH)")
        return root, self.dialect

    def _parse_one(self, sql: str, dialect: str) -> exp.Expr:
        tokens = self._tokens(sql, dialect)
        try:
            statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
        except SqlglotError as exc:
            raise _Reject(GuardReason.PARSE_ERROR, parse_problem(exc, dialect)) from exc
        if not statements:
            raise _Reject(GuardReason.EMPTY, "the SQL has no statement")
        if len(statements) > 1:
            raise _Reject(GuardReason.MULTIPLE_STATEMENTS, f"exactly one statement is allowed, got {len(statements)}")
        root = statements[0]
        while isinstance(root, exp.Subquery) and not root.alias and not root.args.get("limit"):
            root = root.this
        if not isinstance(root, exp.Select | exp.SetOperation):
            kind = type(root).__name__.upper()
            raise _Reject(
                GuardReason.NOT_SELECT, f"only a read-only SELECT (or WITH ... SELECT) is allowed, got {kind}"
            )
        # Only for a SELECT (other statements may keep untokenized text): between the tokens there may
        # be nothing but whitespace and comments that every engine ends at the same place.
        check_gaps(sql, tokens)
        return root

    # -- 4-5: what the query may contain and read -------------------------------------------------------

    def _check(self, root: exp.Expr, read_dialect: str) -> set[str]:
        tables: set[str] = set()
        for node in root.walk():
            if isinstance(node, exp.Into):
                raise _Reject(GuardReason.SELECT_INTO, "SELECT ... INTO writes a table and is not allowed")
            if FORBIDDEN_NODES and isinstance(node, FORBIDDEN_NODES):
                raise _Reject(
                    GuardReason.FORBIDDEN_STATEMENT,
                    f"{type(node).__name__.upper()} is not allowed anywhere in the query",
                )
            if isinstance(node, exp.Placeholder):
                raise _Reject(GuardReason.VARIABLE, "bind parameters are not allowed; write literal values")
            if isinstance(node, exp.Parameter) and not isinstance(node.parent, exp.Parameter):
                if isinstance(node.this, exp.Parameter):
                    self._system(f"@@{node.this.name}")  # a server global such as @@VERSION
                else:
                    raise _Reject(GuardReason.VARIABLE, f"variables are not allowed (@{node.name})")
            if isinstance(node, exp.Func):
                self._check_function(node)
            self._check_hints_and_names(node)
        for node in root.walk():
            if isinstance(node, exp.Table):
                name = self._check_table(node)
                if name is not None:
                    tables.add(name)
        # Last: bound the length of every string the query can build (shared/runtime/sqlguard/bounds.py).
        GrowthChecker(root, read_dialect).run()
        return tables

    def _check_hints_and_names(self, node: exp.Expr) -> None:
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            self._check_function(node.expression, allow_list=False)  # xp_cmdshell keeps its own reason
            raise _Reject(
                GuardReason.FUNCTION_NOT_ALLOWED,
                f"schema-qualified function {node.sql(dialect=self.dialect, comments=False)[:60]} is a "
                "user-defined function and is not allowed",
            )
        if isinstance(node, exp.Identifier) and not node.quoted and node.name.startswith(("$", ":", "?")):
            raise _Reject(GuardReason.VARIABLE, f"bind parameters are not allowed ({node.name}); write literal values")
        if isinstance(node, exp.WithTableHint):
            for hint in node.expressions:
                if not (isinstance(hint, exp.Var) and hint.name.upper() in ALLOWED_TABLE_HINTS):
                    shown = hint.sql(dialect=self.dialect, comments=False)[:60]
                    raise _Reject(
                        GuardReason.HINT_NOT_ALLOWED,
                        f"table hint {shown} is not allowed (allowed: {', '.join(sorted(ALLOWED_TABLE_HINTS))})",
                    )
        elif isinstance(node, exp.QueryOption):
            option = node.this.name.upper() if isinstance(node.this, exp.Var) else ""
            value = literal_int(node.expression)
            if option in ALLOWED_QUERY_OPTIONS or (option == "MAXRECURSION" and value is not None and 0 < value <= 100):
                return
            shown = node.sql(dialect=self.dialect, comments=False)[:60]
            raise _Reject(
                GuardReason.HINT_NOT_ALLOWED,
                f"query option {shown} is not allowed (allowed: MAXDOP, RECOMPILE, MAXRECURSION 1-100)",
            )
        elif isinstance(node, exp.IndexTableHint) or (isinstance(node, exp.Hint) and node.expressions):
            shown = node.sql(dialect=self.dialect, comments=False)[:60]
            raise _Reject(GuardReason.HINT_NOT_ALLOWED, f"query and index hints are not allowed ({shown})")

    def _check_function(self, node: exp.Func, *, allow_list: bool = True) -> None:
        name = function_name(node)
        keys = function_keys(node)
        if keys & FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_FUNCTION_PREFIXES):
            raise _Reject(GuardReason.FORBIDDEN_FUNCTION, f"function {name}() is not allowed")
        if keys & SYSTEM_FUNCTIONS or name.startswith("pragma_"):
            self._system(f"{name}()")
            return
        if allow_list and not is_operator(node) and function_rule(node) is None:
            raise _Reject(
                GuardReason.FUNCTION_NOT_ALLOWED,
                f"function {name}() is not on the allow-list of known {self.dialect} functions",
            )

    def _system(self, what: str) -> None:
        if not self.allow_system:
            raise _Reject(GuardReason.SYSTEM_CATALOG, f"system catalog access is not allowed ({what})")

    def _check_table(self, table: exp.Table) -> str | None:
        """Check one table reference; returns its normalized name, or None for a CTE or table function."""
        this = table.this
        if not isinstance(this, exp.Identifier):
            self._check_table_function(table)
            return None
        for part in ("catalog", "db"):
            value = table.args.get(part)
            if value is not None and value != "" and not isinstance(value, exp.Identifier):
                raise _Reject(GuardReason.FORBIDDEN_FUNCTION, f"remote or function table source: {table.sql()}")
        name = this.name.lower()
        db = table.db.lower()
        catalog = table.catalog.lower()
        if not db and not catalog and is_cte_reference(table):
            return None
        if catalog:
            if catalog in SYSTEM_DATABASES:
                self._system(f"{catalog}..{name}")
                return f"{catalog}.{db}.{name}"
            raise _Reject(GuardReason.CROSS_DATABASE, f"other databases are not allowed: {table.sql()}")
        return self._check_schema_table(db, name)

    def _check_schema_table(self, db: str, name: str) -> str:
        """A table of this database, by schema (the default one when none is named): allowed, system, or refused."""
        schema = db or self.default_schema
        if self.dialect == "postgres" and not db and POSTGRES_SYSTEM_TABLE.match(name):
            # Resolved in pg_catalog before the default schema, whatever the allow-list says.
            self._system(f"pg_catalog.{name}")
            return f"pg_catalog.{name}"
        if (schema, name) in self.allowed:
            return name if schema == self.default_schema else f"{schema}.{name}"
        if self._is_system_table(schema, name):
            self._system(f"{schema}.{name}")
            return f"{schema}.{name}"
        shown = f"{db}.{name}" if db else name
        raise _Reject(GuardReason.TABLE_NOT_ALLOWED, f"table {shown!r} is not on the allow-list")

    def _check_table_function(self, table: exp.Table) -> None:
        """A table source that is no plain name: a known table function, a system one, or refused."""
        this = table.this
        if not isinstance(this, exp.Func):
            raise _Reject(
                GuardReason.CROSS_DATABASE, f"names with more than three parts are not allowed: {table.sql()}"
            )
        # A table-valued function: the function checks ran on it already.
        name = function_name(this)
        if function_keys(this) & SAFE_TABLE_FUNCTIONS:
            return
        if name.startswith("pragma_") or function_keys(this) & SYSTEM_FUNCTIONS:
            self._system(f"{name}()")
            return
        raise _Reject(GuardReason.FORBIDDEN_FUNCTION, f"table function {name}() is not allowed")

    def _is_system_table(self, schema: str, name: str) -> bool:
        if schema in SYSTEM_SCHEMAS:
            return True
        if schema in {"main", "temp"} and SQLITE_SYSTEM_TABLE.match(name):
            return True
        if self.dialect == "postgres" and (schema.startswith("pg_") or POSTGRES_SYSTEM_TABLE.match(name)):
            return True
        return bool(schema == "dbo" and TSQL_SYSTEM_TABLE.match(name))

    # -- 6: row cap -------------------------------------------------------------------------------------

    def _cap(self, root: exp.Expr) -> exp.Expr:
        limit = root.args.get("limit")
        self._check_limit_options(limit)
        if self.dialect == "tsql" and isinstance(root, exp.SetOperation):
            return self._cap_tsql_set_operation(root, limit)
        if isinstance(limit, exp.Fetch):
            return self._cap_fetch(root, limit)
        if isinstance(limit, exp.Limit):
            count = literal_int(limit.expression)
            if count is None or count < 0 or count > self.cap:
                limit.set("expression", exp.Literal.number(self.cap))
                self._note_tightened(count)
            return root
        if self.dialect == "tsql" and root.args.get("offset") is not None:
            fetch = sqlglot.parse_one(
                f"SELECT 1 ORDER BY 1 OFFSET 0 ROWS FETCH NEXT {self.cap} ROWS ONLY", read="tsql"
            ).args["limit"]
            root.set("limit", fetch)
        else:
            root.set("limit", exp.Limit(expression=exp.Literal.number(self.cap)))
        self.notes.append(f"row cap {self.cap} added")
        return root

    def _check_limit_options(self, limit: exp.Expr | None) -> None:
        """Row limits that do not bound the rows, or that the dialect cannot write, are refused."""
        options = limit.args.get("limit_options") if isinstance(limit, exp.Limit | exp.Fetch) else None
        if options is None:
            return
        if options.args.get("percent"):
            raise _Reject(GuardReason.UNSUPPORTED_ROW_LIMIT, "TOP ... PERCENT does not bound the rows; use TOP n")
        if options.args.get("with_ties") and self.dialect == "sqlite":
            raise _Reject(GuardReason.UNSUPPORTED_ROW_LIMIT, "WITH TIES has no SQLite form; use LIMIT n")
        if options.args.get("with_ties") and self.dialect == "postgres" and not isinstance(limit, exp.Fetch):
            # TOP n WITH TIES read as T-SQL: PostgreSQL has no LIMIT form of it.
            raise _Reject(
                GuardReason.UNSUPPORTED_ROW_LIMIT, "write FETCH FIRST n ROWS WITH TIES for PostgreSQL, not TOP"
            )

    def _cap_fetch(self, root: exp.Expr, limit: exp.Fetch) -> exp.Expr:
        """FETCH FIRST n ROWS: n held to the cap (SQLite writes it as LIMIT)."""
        count = literal_int(limit.args.get("count"))
        keep = count if count is not None and 0 <= count <= self.cap else self.cap
        if keep != count:
            self._note_tightened(count)
        if self.dialect == "sqlite":
            root.set("limit", exp.Limit(expression=exp.Literal.number(keep)))
        else:
            limit.set("count", exp.Literal.number(keep))
        return root

    def _cap_tsql_set_operation(self, root: exp.Expr, limit: exp.Expr | None) -> exp.Expr:
        # T-SQL has no TOP for UNION/EXCEPT/INTERSECT: cap with ORDER BY ... OFFSET 0 ROWS FETCH NEXT n.
        count = None
        if isinstance(limit, exp.Fetch):
            count = literal_int(limit.args.get("count"))
        elif isinstance(limit, exp.Limit):
            count = literal_int(limit.expression)
        keep = count if count is not None and 0 <= count <= self.cap else self.cap
        if limit is None:
            self.notes.append(f"row cap {self.cap} added")
        elif keep != count:
            self._note_tightened(count)
        template = sqlglot.parse_one(
            f"SELECT 1 UNION SELECT 2 ORDER BY (SELECT NULL) OFFSET 0 ROWS FETCH NEXT {keep} ROWS ONLY", read="tsql"
        )
        if root.args.get("order") is None:
            root.set("order", template.args["order"])
        if root.args.get("offset") is None:
            root.set("offset", template.args["offset"])
        root.set("limit", template.args["limit"])
        return root

    def _note_tightened(self, count: int | None) -> None:
        shown = "a non-literal limit" if count is None else f"{count}"
        self.notes.append(f"row limit {shown} tightened to {self.cap}")

    # -- 7: output column names -------------------------------------------------------------------------

    def _name_columns(self, root: exp.Expr) -> None:
        select = root
        while isinstance(select, exp.SetOperation):
            select = select.this
        if not isinstance(select, exp.Select):
            return
        used = {e.alias_or_name.lower() for e in select.expressions if e.alias_or_name}
        for i, projection in enumerate(list(select.expressions)):
            if isinstance(projection, exp.Alias | exp.Column | exp.Star) or projection.alias:
                continue
            text = projection.sql(dialect=self.dialect, comments=False).lower()
            base = re.sub(r"[^a-z0-9]+", "_", text).strip("_")[:48] or "col"
            if base[0].isdigit():
                base = f"col_{base}"
            name, n = base, 2
            while name in used:
                name, n = f"{base}_{n}", n + 1
            used.add(name)
            select.expressions[i].replace(exp.alias_(projection.copy(), name, quoted=False))
