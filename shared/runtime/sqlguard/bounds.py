"""Resource checks of the SQL guard: comments, nesting depth, functions and string growth.

These checks bound what one accepted query can cost before it reaches a database:

* **Comments** (``check_gaps``): the text between two tokens may hold only spaces, tabs, CR, LF and
  comments that every engine ends at the same place. Rejected:
  ``/*`` inside a block comment (T-SQL nests block comments, SQLite does not), ``/*!`` and ``/*+``
  (executable comments and optimizer hints in other engines), an unterminated block comment, and a
  ``--`` comment holding any line terminator other than LF (CR not followed by LF, VT, FF, NEL,
  U+2028, U+2029): engines disagree on where such a comment ends (a CR LF line end is fine).
  Inside a block comment CR, LF and Unicode separators are harmless (every engine ends it only at
  ``*/``) and allowed.
* **Depth** (``check_token_depth``): at most ``MAX_NESTING`` (20) nested parentheses and ``CASE``
  expressions and at most ``MAX_PREFIX_RUN`` prefix operators in a row, checked on tokens before
  parsing, because sqlglot parses and writes these recursively. Long flat ``AND``/``OR``/``+`` chains
  are fine (sqlglot handles them without recursion). A ``RecursionError`` that still happens is
  caught by ``guard_sql`` and reported as ``TOO_DEEP`` too.
* **Functions** (``FunctionRules``): only functions on an allow-list (sqlglot's typed functions and
  a few known anonymous names), each with a rule for how long its result can be; schema-qualified
  calls (user-defined functions) and unknown names are rejected.
* **String growth** (``GrowthChecker``): every expression gets a bound ``len <= f * L + c`` where
  ``L`` is the longest value stored in any table cell; the bound flows through CTEs and derived
  tables by column name. Any expression with ``f > MAX_GROWTH`` or ``c > MAX_CONST_CHARS`` is
  rejected, so repeated concatenation across CTE levels is caught as well as one huge ``printf``.
  ``printf``/``format`` need a literal format whose widths and precisions are small literals (no
  ``*``); ``replace`` needs a literal pattern and a replacement of constant size; ``replicate``,
  ``space``, ``str`` need literal counts.
* **Recursive CTEs** are accepted only when sound: ``UNION ALL``, the recursive member reads only the
  CTE itself (no join, so each row yields at most one row and the work queue never grows beyond the
  anchor's rows), has no aggregate or window, and each of its columns either does not depend on the
  CTE's string columns or passes one through unchanged (``substr`` and the like may shrink it). So a
  counter ``SELECT i + 1 FROM n`` passes, a doubling ``SELECT s || s FROM r`` does not. Iterations
  are bounded only by the query timeout (and T-SQL's default ``MAXRECURSION`` 100).

String aggregates (``group_concat``, ``string_agg``, ``json_group_array``) grow with the rows read:
their result counts as one more data-sized value here, and the provider's cell and length limits
bound it at the source.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import NamedTuple, cast

from sqlglot import exp
from sqlglot.tokenizer_core import Token, TokenType

# Largest multiple of the longest stored value that one expression may reach.
MAX_GROWTH = 32.0
# Largest constant number of characters that one expression may add (literals, padding, widths).
MAX_CONST_CHARS = 65_536.0
# Largest width or precision in a printf/format spec, count in replicate/space/str.
MAX_WIDTH = 1_000
# sqlglot spends up to ~40 Python frames per nested level (measured: "(NOT (NOT ..." fails at 24 levels
# under the default recursion limit of 1000), so 20 leaves room for the caller's own stack. Real
# analytics queries nest 2-5 levels.
MAX_NESTING = 20
MAX_PREFIX_RUN = 32
# A number, date or boolean rendered as text is never longer than this.
_SCALAR = 64.0


class LimitError(Exception):
    """A resource check failed: ``reason`` is a GuardReason value, ``message`` names the cause."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _resource(message: str) -> LimitError:
    return LimitError("RESOURCE_LIMIT", message)


# -- comments -----------------------------------------------------------------------------------------

_LINE_COMMENT_BAD = re.compile("[\v\f\x85\u2028\u2029]|\r(?!\n)")


def check_gaps(sql: str, tokens: list[Token]) -> None:
    """Reject text between tokens that is not plain whitespace or an unambiguous comment."""
    pos = 0
    for tok in tokens:
        if tok.start < pos:
            raise LimitError("PARSE_ERROR", "the SQL could not be read token by token")
        _check_gap(sql[pos : tok.start])
        pos = tok.end + 1
    _check_gap(sql[pos:])


def _check_gap(gap: str) -> None:
    i, n = 0, len(gap)
    while i < n:
        ch = gap[i]
        if ch in " \t\n\r":  # CR outside a comment is whitespace to every engine
            i += 1
        elif gap.startswith("--", i):
            end = gap.find("\n", i)
            end = n if end < 0 else end
            if _LINE_COMMENT_BAD.search(gap[i : end + 1]):  # the LF itself is included: CR LF is fine
                raise LimitError(
                    "AMBIGUOUS_COMMENT",
                    "a -- comment contains a line break other than LF (CR, VT, FF, NEL, U+2028 or U+2029); "
                    "engines disagree on where it ends",
                )
            i = end
        elif gap.startswith("/*", i):
            if gap.startswith(("/*!", "/*+"), i):
                raise LimitError("AMBIGUOUS_COMMENT", "/*! and /*+ comments are executable or hints in some engines")
            end = gap.find("*/", i + 2)
            if end < 0:
                raise LimitError("AMBIGUOUS_COMMENT", "a block comment is not closed")
            if "/*" in gap[i + 2 : end]:
                raise LimitError(
                    "AMBIGUOUS_COMMENT", "nested /* inside a block comment (T-SQL nests comments, SQLite does not)"
                )
            i = end + 2
        else:
            raise LimitError(
                "INVALID_CHARACTERS", f"unexpected character {ch!r} between tokens (only spaces, tabs and line feeds)"
            )


# -- depth ----------------------------------------------------------------------------------------------

_PREFIX_TOKENS = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


def check_token_depth(tokens: Iterable[Token]) -> None:
    """Reject nesting deeper than the parser can take, before it recurses (see the module docstring)."""
    depth = run = 0
    for tok in tokens:
        kind = tok.token_type
        if kind in (TokenType.L_PAREN, TokenType.CASE):
            depth += 1
            if depth > MAX_NESTING:
                raise LimitError("TOO_DEEP", f"the SQL nests parentheses or CASE more than {MAX_NESTING} deep")
        elif kind in (TokenType.R_PAREN, TokenType.END):
            depth = max(0, depth - 1)
        run = run + 1 if kind in _PREFIX_TOKENS else 0
        if run > MAX_PREFIX_RUN:
            raise LimitError("TOO_DEEP", f"more than {MAX_PREFIX_RUN} prefix operators (NOT, -, +, ~) in a row")


# -- bounds -----------------------------------------------------------------------------------------------


class Bound(NamedTuple):
    """``len <= f * L + c (+ s * the recursive CTE's own value)``: L is the longest stored cell."""

    f: float
    c: float
    s: float = 0.0

    def add(self, other: Bound) -> Bound:
        """The bound of the two values concatenated."""
        return Bound(self.f + other.f, self.c + other.c, self.s + other.s)

    def scale(self, k: float) -> Bound:
        """This bound multiplied by ``k``."""
        return Bound(self.f * k, self.c * k, self.s * k)

    def plus(self, chars: float) -> Bound:
        """This bound plus a constant number of characters."""
        return Bound(self.f, self.c + chars, self.s)


BASE = Bound(1.0, 0.0)
SCALAR = Bound(0.0, _SCALAR)
ZERO = Bound(0.0, 0.0)
SELF = Bound(0.0, 0.0, 1.0)


def _max(bounds: Iterable[Bound]) -> Bound:
    f = c = s = 0.0
    for b in bounds:
        f, c, s = max(f, b.f), max(c, b.c), max(s, b.s)
    return Bound(f, c, s)


def _sum(bounds: Iterable[Bound]) -> Bound:
    out = ZERO
    for b in bounds:
        out = out.add(b)
    return out


def _string_literal(node: exp.Expr | None) -> str | None:
    if isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.National):
        return str(node.this)
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    return None


def _int_literal(node: exp.Expr | None) -> int | None:
    if isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and re.fullmatch(r"\d{1,9}", str(node.this)):
        return int(node.this)
    return None


def _args(node: exp.Expr) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for value in node.args.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expr):
                out.append(item)
    return out


# Each rule maps (node, bound of each argument node) to the bound of the result.
Rule = Callable[[exp.Expr, Callable[[exp.Expr | None], Bound]], Bound]


def _scalar(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return SCALAR


def _same(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return _max(b(a) for a in _args(node))


def _same_plus(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return _max([_same(node, b), SCALAR])


def _first(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """Functions whose result is never longer than their first argument (substr, trim, upper, ...)."""
    args = _args(node)
    return b(args[0]) if isinstance(node, exp.Anonymous) and args else b(node.this)


def _json(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """JSON builders: text arguments may grow 6x when escaped (``\\u001f``); JSON arguments are kept."""
    parts = [b(a) if _rule_of(a) is _json else b(a).scale(6) for a in _args(node)]
    return _sum(parts).plus(_SCALAR)


def _concat(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return _sum(b(a) for a in _args(node))


def _escaped(factor: float) -> Rule:
    def rule(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
        return _concat(node, b).scale(factor).plus(_SCALAR)

    return rule


def _chars(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return Bound(0.0, 4.0 * max(1, len(_args(node))))


def _replace(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = _args(node) if isinstance(node, exp.Anonymous) else [node.this, node.args.get("expression"),
                                                                 node.args.get("replacement")]  # fmt: skip
    if len(args) != 3:
        raise _resource("replace() takes exactly three arguments")
    text, pattern, replacement = args
    found = _string_literal(pattern)
    if found is None:
        raise _resource("replace() needs a literal string as its pattern (second argument)")
    rb = b(replacement)
    if rb.f or rb.s:
        raise _resource("replace() needs a replacement of constant size (a literal)")
    ratio = max(1.0, rb.c / len(found)) if found else 1.0
    return b(text).scale(ratio)


def _repeat(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = _args(node)
    times = _int_literal(node.args.get("times") or (args[1] if len(args) > 1 else None))
    if times is None or times > MAX_WIDTH:
        raise _resource(f"replicate()/repeat() needs a literal count of at most {MAX_WIDTH}")
    # An anonymous call (replicate() outside T-SQL) keeps its name in ``this``; its text is the first argument.
    text = args[0] if isinstance(node, exp.Anonymous) and args else node.this
    return b(text).scale(times)


def _space(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = _args(node)
    count = _int_literal(args[0] if isinstance(node, exp.Anonymous) and args else node.this)
    if count is None or count > MAX_WIDTH:
        raise _resource(f"space() needs a literal count of at most {MAX_WIDTH}")
    return Bound(0.0, float(count))


def _str(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = _args(node)
    if len(args) < 2:
        return SCALAR
    width = _int_literal(args[1])
    if width is None or width > MAX_WIDTH:
        raise _resource(f"str() needs a literal length of at most {MAX_WIDTH}")
    return Bound(0.0, float(max(width, 1)))


_PRINTF_SPEC = re.compile(r"%([-+ 0#!,]*)(\d*|\*)(?:\.(\d*|\*))?(ll|l)?([a-zA-Z%])")


def _printf(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = _args(node)
    fmt = _string_literal(args[0]) if args else None
    name = _name(node)
    if fmt is None:
        raise _resource(f"{name}() needs a literal format string as its first argument")
    if re.search(r"%\d+\$", fmt):
        # PostgreSQL's format('%1$s%1$s...') repeats one argument without a conversion per copy.
        raise _resource(f"{name}() format: positional arguments (%n$) are not allowed")
    total = Bound(0.0, float(len(fmt)))
    values = iter(args[1:])
    for spec in _PRINTF_SPEC.finditer(fmt):
        kind = spec.group(5)
        if kind == "%":
            continue
        width, precision = _printf_limits(spec, name)
        part = _printf_part(kind, b(next(values, None)), precision)
        total = total.add(Bound(part.f, max(part.c, float(width)), part.s))
    return total


def _printf_limits(spec: re.Match[str], name: str) -> tuple[int, int | None]:
    """The literal width and precision of one printf conversion, each at most ``MAX_WIDTH``."""
    _flags, width, precision, _size, _kind = spec.groups()
    if width == "*" or precision == "*":
        raise _resource(f"{name}() format {spec.group(0)!r}: '*' widths and precisions are not allowed")
    # Check the digit count first: int() refuses strings of more than 4,300 digits.
    too_long = len(width or "") > 6 or len(precision or "") > 6
    w = int(width) if width and not too_long else 0
    p = int(precision) if precision and not too_long else None
    if too_long or w > MAX_WIDTH or (p is not None and p > MAX_WIDTH):
        raise _resource(f"{name}() format {spec.group(0)!r}: widths and precisions are limited to {MAX_WIDTH}")
    return w, p


def _printf_part(kind: str, value: Bound, precision: int | None) -> Bound:
    """What one printf conversion of ``value`` writes, before padding to its width."""
    if kind in "sqQwzIL":
        quoted = kind in "qQwIL"  # I and L: PostgreSQL's format() quotes an identifier or a literal
        if precision is not None:
            return Bound(0.0, float(precision) * (2 if quoted else 1) + 2)
        return value.scale(2).plus(2) if quoted else value
    if kind == "c":
        return Bound(0.0, float(precision if precision is not None else 1))
    return Bound(0.0, _SCALAR + (precision or 0))


def _literal_format(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """T-SQL FORMAT / SQLite strftime: a literal format; each character expands to a bounded text."""
    fmt = node.args.get("format")
    text = _string_literal(fmt) if fmt is not None else ""
    if text is None:
        raise _resource("FORMAT()/strftime() needs a literal format string")
    numbers = [int(n) for n in re.findall(r"\d{1,6}", text)]
    if len(text) > 100 or re.search(r"\d{7}", text) or any(n > MAX_WIDTH for n in numbers):
        raise _resource(f"FORMAT()/strftime() format {text[:40]!r} is too long or has a number above {MAX_WIDTH}")
    return Bound(0.0, _SCALAR + 32.0 * len(text) + sum(numbers))


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__.lower()


def _canon(name: str) -> str:
    return name.lower().replace("_", "")


_SCALAR_NAMES = """
abs acos asin atan atan2 avg ceil ceiling cos cot count countbig countif cumedist currentdate currenttime
currenttimestamp currenttimestamplocaltz date dateadd datediff datefromparts datepart datetime datetrunc day
dayofmonth dayofweek dayofyear degrees denserank eomonth exp extract firstday floor getdate getutcdate glob
hour instr isdate isnumeric julianday lastday len length ln log log10 log2 minute mod month ntile percentrank
pi power quarter radians rand random rank round rownumber second sign sin sqrt sqrtsum stddev stddevpop
stddevsamp strposition sum sysdatetime sysdatetimeoffset tan time timestrtotime total totalchanges changes
trunc tsordstodate tsordstotimestamp typeof unicode unixepoch var variance variancepop week year
datetimefromparts timefromparts todays exists strtotime unixtotime ascii charindex patindex
datalength jsonarraylength jsonvalid jsontype jsonlength isjson difference soundex percentilecont
percentiledisc median datestrtodate timestamptrunc datetrunc tsordsdiff timestampdiff timestampadd
lastinsertrowid likely unlikely likelihood approxdistinct countdistinct octetlength stdevp varp
uuid newid sysutcdatetime switchoffset todatetimeoffset parse tryparse square currenttimestampltz sysdatetimeoffset
"""
_SAME_NAMES = """
coalesce ifnull isnull nvl if iif case min max lag lead firstvalue lastvalue nthvalue anyvalue jsonextract
jsonextractscalar jsonvalue jsonquery choose greatest least jsonextractpath
"""
_FIRST_NAMES = "upper lower trim ltrim rtrim substring substr left right translate reverse unhex initcap nullif"
_RULES: dict[str, Rule] = {n: _scalar for n in _SCALAR_NAMES.split()}
_RULES.update({n: _same for n in _SAME_NAMES.split()})
_RULES.update({n: _first for n in _FIRST_NAMES.split()})
_RULES.update(
    {
        "cast": _same_plus, "trycast": _same_plus, "convert": _same_plus, "tryconvert": _same_plus,
        "concat": _concat, "concatws": _concat, "dpipe": _concat, "stuff": _concat, "groupconcat": _concat,
        "stringagg": _concat, "arrayagg": _concat,
        "hex": _escaped(2), "lowerhex": _escaped(2), "upperhex": _escaped(2), "quote": _escaped(2),
        "quotename": _escaped(2), "jsonquote": _json, "jsonarray": _json, "jsonobject": _json, "json": _json,
        "jsongrouparray": _json, "jsongroupobject": _json, "jsonarrayagg": _json, "jsonobjectagg": _json,
        "chr": _chars, "char": _chars, "nchar": _chars,
        "replace": _replace, "repeat": _repeat, "replicate": _repeat, "space": _space, "str": _str,
        "printf": _printf, "format": _printf, "timetostr": _literal_format, "numbertostr": _literal_format,
    }
)  # fmt: skip
# Table-valued functions allowed as a FROM source (their columns are no longer than their arguments).
TABLE_FUNCTIONS = frozenset({"jsoneach", "jsontree", "openjson", "stringsplit", "generateseries"})


def function_rule(node: exp.Func) -> Rule | None:
    """The growth rule of an allow-listed function, or None when the function is not allowed."""
    return _rule_of(node)


def _rule_of(node: exp.Expr) -> Rule | None:
    if not isinstance(node, exp.Func):
        return None
    keys = {_canon(_name(node))}
    if not isinstance(node, exp.Anonymous):
        keys.add(_canon(type(node).__name__))
    for key in sorted(keys):
        if key in _RULES:
            return _RULES[key]
        if key in TABLE_FUNCTIONS:
            return _same
    return None


def is_operator(node: exp.Expr) -> bool:
    """Whether a sqlglot Func node is really an operator (AND, ->, REGEXP, ...), not a call."""
    return isinstance(node, exp.Binary | exp.Unary | exp.Predicate | exp.Connector)


# -- growth through the query -------------------------------------------------------------------------------

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
                out = [_max(pair) for pair in zip(left, right, strict=False)] or [_max(left + right)]
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
                raise _resource(
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
            return _max(self.bounds(node))
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
            return rule(node, b) if rule is not None else _same(node, b)
        if isinstance(node, exp.Binary | exp.Unary | exp.Predicate | exp.Boolean | exp.Null):
            if isinstance(node, exp.Alias | exp.Paren | exp.Collate):
                return b(node.this)
            return SCALAR
        children = _args(node)
        return _max(b(c) for c in children) if children else Bound(0.0, float(len(str(node.name or ""))))

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
                return _max([BASE, *(self.expr(a, None) for a in _args(source.this))])
            cte = _find_cte(source)
            if cte is None:
                return BASE
            bounds, names = self.bounds(cte), _output_names(cte)
        elif isinstance(source, exp.Subquery):
            bounds, names = self.bounds(source), _output_names(source)
        elif isinstance(source, exp.Values):
            return _max(self.expr(row, None) for row in source.expressions)
        else:
            return _max([BASE, *(self.expr(a, None) for a in _args(source))])
        if name is not None and name in names and len(bounds) == len(names):
            return bounds[names.index(name)]
        return _max(bounds)

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
                        return _max([BASE, *bounds] if stored else bounds)
                    if stored:
                        wanted = {name}  # a stored table may own the name: only an exact name reaches out
            scope = scope.parent
        return BASE

    def _star(self, select: exp.Select | None) -> Bound:
        if select is None:
            return BASE
        sources = self._sources(select)
        return _max([BASE, *(self._source_columns(s, None) for _, s in sources)]) if sources else BASE

    # -- recursive CTEs

    def _check_recursive(self, cte: exp.CTE) -> None:
        body = cte.this
        name = cte.alias_or_name
        if not isinstance(body, exp.Union) or body.args.get("distinct"):
            raise _resource(f"recursive CTE {name!r} must be anchor UNION ALL recursive member")
        member = body.expression
        if not isinstance(member, exp.Select):
            raise _resource(f"recursive CTE {name!r}: the recursive member must be one SELECT")
        sources = self._sources(member)
        if member.args.get("joins") or len(sources) != 1 or not _is_self(sources[0][1], cte):
            raise _resource(
                f"recursive CTE {name!r}: the recursive member must read only {name!r} (no join), "
                "so rows cannot multiply"
            )
        if member.args.get("group") or member.find(exp.AggFunc, exp.Window):
            raise _resource(f"recursive CTE {name!r}: no aggregate or window in the recursive member")
        for other in body.this.find_all(exp.Table):
            if _is_self(other, cte):
                raise _resource(f"recursive CTE {name!r}: the anchor must not read the CTE itself")
        self.recursive_bodies.add(id(body))
        self.in_progress.add(id(body))
        try:
            for projection in member.expressions:
                bound = self.expr(projection, member)
                if bound.s > 1 or (bound.s and (bound.f or bound.c)):
                    raise _resource(
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
