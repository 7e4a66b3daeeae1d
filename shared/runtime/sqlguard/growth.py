"""String growth through one parsed query: every expression's length bound, followed through CTEs.

See ``shared.runtime.sqlguard.bounds`` for the rules and the bound's form.
"""

from __future__ import annotations

import math
from typing import cast

from sqlglot import exp

from shared.runtime.sqlguard.bounds import (
    BASE,
    MAX_CONST_CHARS,
    MAX_GROWTH,
    SCALAR,
    SELF,
    ZERO,
    Bound,
    call_args,
    function_rule,
    is_operator,
    max_bound,
    same_rule,
)
from shared.runtime.sqlguard.lexical import resource_error

_QUERY = (exp.Select, exp.SetOperation)


class GrowthChecker:
    """Bound the length of every expression of one parsed query (see the module docstring)."""

    def __init__(self, root: exp.Expr, dialect: str) -> None:
        self.root = root
        self.tsql = dialect == "tsql"
        self.query_bounds: dict[int, list[Bound]] = {}
        self.in_progress: set[int] = set()
        self.recursive_bodies: set[int] = set()

    def run(self) -> None:
        """Check every query in the tree; raises LimitError on the first unbounded expression."""
        for cte in self.root.find_all(exp.CTE):
            if _is_recursive(cte):
                self._check_recursive(cte)
        for query in self.root.find_all(*_QUERY):
            self.bounds(query)

    # -- queries

    def bounds(self, query: exp.Expr) -> list[Bound]:
        """Bounds of the output columns of a Select, set operation, Subquery or CTE."""
        while isinstance(query, exp.Subquery | exp.CTE | exp.Paren):
            query = query.this
        key = id(query)
        if key in self.query_bounds:
            return self.query_bounds[key]
        if key in self.in_progress:
            # A recursive CTE reading itself (see _check_recursive); any other cycle comes from a
            # name that resolved outward by mistake and is a stored column.
            return [SELF] if key in self.recursive_bodies else [BASE]
        self.in_progress.add(key)
        try:
            if isinstance(query, exp.SetOperation):
                left, right = self.bounds(query.this), self.bounds(query.expression)
                out = [max_bound(pair) for pair in zip(left, right, strict=False)] or [max_bound(left + right)]
            elif isinstance(query, exp.Select):
                self._check_clauses(query)
                out = [self.expr(p, query) for p in query.expressions]
            else:
                out = [self.expr(query, None)]
        finally:
            self.in_progress.discard(key)
        self.query_bounds[key] = out
        return out

    def _check_clauses(self, select: exp.Select) -> None:
        for name, value in select.args.items():
            if name in ("expressions", "with_", "with", "from_", "from", "joins"):
                continue
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, exp.Expr):
                    self.expr(item, select)
        for join in select.args.get("joins") or []:
            if join.args.get("on") is not None:
                self.expr(join.args["on"], select)

    # -- expressions (iterative, bottom-up: flat AND/OR/|| chains can be thousands long)

    def expr(self, node: exp.Expr, select: exp.Select | None) -> Bound:
        """The bound of one expression inside ``select``; every sub-expression is checked too."""
        memo: dict[int, Bound] = {}
        order = list(node.walk(bfs=True, prune=lambda n: n is not node and isinstance(n, (*_QUERY, exp.Subquery))))
        for item in reversed(order):
            memo[id(item)] = bound = self._node(item, select, memo)
            if bound.f > MAX_GROWTH or bound.c > MAX_CONST_CHARS:
                shown = item.sql(comments=False)[:60]
                raise resource_error(
                    f"{shown!r} can build a string of {_describe(bound)}; the limit is "
                    f"{MAX_GROWTH:g} x the longest stored value + {MAX_CONST_CHARS:g} characters"
                )
        return memo[id(node)]

    def _node(self, node: exp.Expr, select: exp.Select | None, memo: dict[int, Bound]) -> Bound:
        def b(child: exp.Expr | None) -> Bound:
            if child is None:
                return ZERO
            if id(child) in memo:
                return memo[id(child)]
            return self.expr(child, select)

        if isinstance(node, (*_QUERY, exp.Subquery)):
            return max_bound(self.bounds(node))
        if isinstance(node, exp.Literal):
            return Bound(0.0, float(len(str(node.this)))) if node.is_string else SCALAR
        if isinstance(node, exp.Column):
            return self._column(node, select)
        if isinstance(node, exp.Star):
            return self._star(select)
        if isinstance(node, exp.DPipe) or (self.tsql and isinstance(node, exp.Add) and not _numeric_add(node)):
            # T-SQL's + concatenates strings; with a number on either side it is arithmetic.
            return b(node.this).add(b(node.expression))
        if isinstance(node, exp.Func) and not is_operator(node):
            rule = function_rule(node)
            return rule(node, b) if rule is not None else same_rule(node, b)
        if isinstance(node, exp.Binary | exp.Unary | exp.Predicate | exp.Boolean | exp.Null):
            if isinstance(node, exp.Alias | exp.Paren | exp.Collate):
                return b(node.this)
            return SCALAR
        children = call_args(node)
        return max_bound(b(c) for c in children) if children else Bound(0.0, float(len(str(node.name or ""))))

    # -- column resolution

    def _sources(self, select: exp.Select) -> list[tuple[str, exp.Expr]]:
        out: list[tuple[str, exp.Expr]] = []
        from_ = select.args.get("from_") or select.args.get("from")
        items = [from_.this] if isinstance(from_, exp.From) else []
        items += [j.this for j in select.args.get("joins") or []]
        for item in items:
            out.append((item.alias_or_name.lower(), item))
        return out

    def _source_columns(self, source: exp.Expr, name: str | None) -> Bound:
        if isinstance(source, exp.Table):
            if isinstance(source.this, exp.Func):
                return max_bound([BASE, *(self.expr(a, None) for a in call_args(source.this))])
            cte = _find_cte(source)
            if cte is None:
                return BASE
            bounds, names = self.bounds(cte), _output_names(cte)
        elif isinstance(source, exp.Subquery):
            bounds, names = self.bounds(source), _output_names(source)
        elif isinstance(source, exp.Values):
            return max_bound(self.expr(row, None) for row in source.expressions)
        else:
            return max_bound([BASE, *(self.expr(a, None) for a in call_args(source))])
        if name is not None and name in names and len(bounds) == len(names):
            return bounds[names.index(name)]
        return max_bound(bounds)

    def _column(self, column: exp.Column, select: exp.Select | None) -> Bound:
        name = column.name.lower()
        qualifier = column.table.lower()
        scope: exp.Expr | None = select
        # An unqualified name resolves in the innermost query with a derived column of that name; a
        # query with stored tables may also own it (or not: then it is a correlated outer reference).
        wanted = {name, "*"}  # a source that selects * may hold any name
        while scope is not None:
            if isinstance(scope, exp.Select):
                sources = self._sources(scope)
                if qualifier:
                    hits = [s for alias, s in sources if alias == qualifier]
                    if hits:
                        return self._source_columns(hits[0], name)
                else:
                    named = [s for _, s in sources if wanted & set(_output_names_of_source(s))]
                    stored = any(not _output_names_of_source(s) for _, s in sources)
                    if named:
                        bounds = [self._source_columns(s, name) for s in named]
                        return max_bound([BASE, *bounds] if stored else bounds)
                    if stored:
                        wanted = {name}  # a stored table may own the name: only an exact name reaches out
            scope = scope.parent
        return BASE

    def _star(self, select: exp.Select | None) -> Bound:
        if select is None:
            return BASE
        sources = self._sources(select)
        return max_bound([BASE, *(self._source_columns(s, None) for _, s in sources)]) if sources else BASE

    # -- recursive CTEs

    def _check_recursive(self, cte: exp.CTE) -> None:
        body = cte.this
        name = cte.alias_or_name
        if not isinstance(body, exp.Union) or body.args.get("distinct"):
            raise resource_error(f"recursive CTE {name!r} must be anchor UNION ALL recursive member")
        member = body.expression
        if not isinstance(member, exp.Select):
            raise resource_error(f"recursive CTE {name!r}: the recursive member must be one SELECT")
        sources = self._sources(member)
        if member.args.get("joins") or len(sources) != 1 or not _is_self(sources[0][1], cte):
            raise resource_error(
                f"recursive CTE {name!r}: the recursive member must read only {name!r} (no join), "
                "so rows cannot multiply"
            )
        if member.args.get("group") or member.find(exp.AggFunc, exp.Window):
            raise resource_error(f"recursive CTE {name!r}: no aggregate or window in the recursive member")
        for other in body.this.find_all(exp.Table):
            if _is_self(other, cte):
                raise resource_error(f"recursive CTE {name!r}: the anchor must not read the CTE itself")
        self.recursive_bodies.add(id(body))
        self.in_progress.add(id(body))
        try:
            for projection in member.expressions:
                bound = self.expr(projection, member)
                if bound.s > 1 or (bound.s and (bound.f or bound.c)):
                    raise resource_error(
                        f"recursive CTE {name!r}: column {projection.sql(comments=False)[:60]!r} grows at every "
                        "step; recursive columns may only pass values through unchanged"
                    )
        finally:
            self.in_progress.discard(id(body))


def _numeric_add(node: exp.Expr) -> bool:
    return any(isinstance(side, exp.Literal) and not side.is_string for side in (node.this, node.expression))


def _describe(bound: Bound) -> str:
    if math.isinf(bound.f) or math.isinf(bound.c):
        return "unbounded length"
    return f"up to {bound.f:g} x the longest stored value + {bound.c:g} characters"


def _output_names(query: exp.Expr) -> list[str]:
    alias = query.args.get("alias")
    columns = alias.args.get("columns") if isinstance(alias, exp.TableAlias) else None
    if columns:
        return [c.name.lower() for c in columns]
    while isinstance(query, exp.Subquery | exp.CTE | exp.Paren):
        query = query.this
    while isinstance(query, exp.SetOperation):
        query = query.this
    if isinstance(query, exp.Select):
        return [p.alias_or_name.lower() for p in query.expressions]
    return []


def _output_names_of_source(source: exp.Expr) -> list[str]:
    if isinstance(source, exp.Table) and not isinstance(source.this, exp.Func):
        cte = _find_cte(source)
        return _output_names(cte) if cte is not None else []
    if isinstance(source, exp.Subquery):
        return _output_names(source)
    return []


def _find_cte(table: exp.Table) -> exp.CTE | None:
    """The CTE an unqualified table name refers to at its position, if any."""
    if table.db or table.catalog:
        return None
    name = table.name.lower()
    child: exp.Expr = table
    parent = table.parent
    while parent is not None:
        with_ = None if isinstance(parent, exp.With) else (parent.args.get("with_") or parent.args.get("with"))
        if isinstance(with_, exp.With):
            ctes = list(with_.expressions)
            if child is with_:
                via = next((c for c in ctes if c is _ancestor_in(table, ctes)), None)
                ctes = ctes[: ctes.index(via) + 1] if via is not None else []
            for cte in reversed(ctes):
                if cte.alias.lower() == name:
                    return cast(exp.CTE, cte)
        child, parent = parent, parent.parent
    return None


def _ancestor_in(node: exp.Expr, candidates: list[exp.CTE]) -> exp.Expr | None:
    ids = {id(c) for c in candidates}
    current: exp.Expr | None = node
    while current is not None and id(current) not in ids:
        current = current.parent
    return current


def _is_self(source: exp.Expr, cte: exp.CTE) -> bool:
    return isinstance(source, exp.Table) and _find_cte(source) is cte


def _is_recursive(cte: exp.CTE) -> bool:
    return any(_is_self(t, cte) for t in cte.this.find_all(exp.Table))
