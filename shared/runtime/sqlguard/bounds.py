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
bound it at the source."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from sqlglot import exp

from shared.runtime.sqlguard.lexical import resource_error

# Largest multiple of the longest stored value that one expression may reach.
MAX_GROWTH = 32.0


# Largest constant number of characters that one expression may add (literals, padding, widths).
MAX_CONST_CHARS = 65_536.0


# Largest width or precision in a printf/format spec, count in replicate/space/str.
MAX_WIDTH = 1_000


# A number, date or boolean rendered as text is never longer than this.
_SCALAR = 64.0


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


def max_bound(bounds: Iterable[Bound]) -> Bound:
    """The bound of whichever value is longest."""
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


def call_args(node: exp.Expr) -> list[exp.Expr]:
    """A call's arguments in order, whatever sqlglot node holds them."""
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


def same_rule(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """A function whose result is no longer than its longest argument."""
    return max_bound(b(a) for a in call_args(node))


def _same_plus(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return max_bound([same_rule(node, b), SCALAR])


def _first(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """Functions whose result is never longer than their first argument (substr, trim, upper, ...)."""
    args = call_args(node)
    return b(args[0]) if isinstance(node, exp.Anonymous) and args else b(node.this)


def _json(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    """JSON builders: text arguments may grow 6x when escaped (``\\u001f``); JSON arguments are kept."""
    parts = [b(a) if _rule_of(a) is _json else b(a).scale(6) for a in call_args(node)]
    return _sum(parts).plus(_SCALAR)


def _concat(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return _sum(b(a) for a in call_args(node))


def _escaped(factor: float) -> Rule:
    def rule(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
        return _concat(node, b).scale(factor).plus(_SCALAR)

    return rule


def _chars(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    return Bound(0.0, 4.0 * max(1, len(call_args(node))))


def _replace(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = call_args(node) if isinstance(node, exp.Anonymous) else [node.this, node.args.get("expression"),
                                                                 node.args.get("replacement")]  # fmt: skip
    if len(args) != 3:
        raise resource_error("replace() takes exactly three arguments")
    text, pattern, replacement = args
    found = _string_literal(pattern)
    if found is None:
        raise resource_error("replace() needs a literal string as its pattern (second argument)")
    rb = b(replacement)
    if rb.f or rb.s:
        raise resource_error("replace() needs a replacement of constant size (a literal)")
    ratio = max(1.0, rb.c / len(found)) if found else 1.0
    return b(text).scale(ratio)


def _repeat(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = call_args(node)
    times = _int_literal(node.args.get("times") or (args[1] if len(args) > 1 else None))
    if times is None or times > MAX_WIDTH:
        raise resource_error(f"replicate()/repeat() needs a literal count of at most {MAX_WIDTH}")
    # An anonymous call (replicate() outside T-SQL) keeps its name in ``this``; its text is the first argument.
    text = args[0] if isinstance(node, exp.Anonymous) and args else node.this
    return b(text).scale(times)


def _space(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = call_args(node)
    count = _int_literal(args[0] if isinstance(node, exp.Anonymous) and args else node.this)
    if count is None or count > MAX_WIDTH:
        raise resource_error(f"space() needs a literal count of at most {MAX_WIDTH}")
    return Bound(0.0, float(count))


def _str(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = call_args(node)
    if len(args) < 2:
        return SCALAR
    width = _int_literal(args[1])
    if width is None or width > MAX_WIDTH:
        raise resource_error(f"str() needs a literal length of at most {MAX_WIDTH}")
    return Bound(0.0, float(max(width, 1)))


_PRINTF_SPEC = re.compile(r"%([-+ 0#!,]*)(\d*|\*)(?:\.(\d*|\*))?(ll|l)?([a-zA-Z%])")


def _printf(node: exp.Expr, b: Callable[[exp.Expr | None], Bound]) -> Bound:
    args = call_args(node)
    fmt = _string_literal(args[0]) if args else None
    name = _name(node)
    if fmt is None:
        raise resource_error(f"{name}() needs a literal format string as its first argument")
    if re.search(r"%\d+\$", fmt):
        # PostgreSQL's format('%1$s%1$s...') repeats one argument without a conversion per copy.
        raise resource_error(f"{name}() format: positional arguments (%n$) are not allowed")
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
        raise resource_error(f"{name}() format {spec.group(0)!r}: '*' widths and precisions are not allowed")
    # Check the digit count first: int() refuses strings of more than 4,300 digits.
    too_long = len(width or "") > 6 or len(precision or "") > 6
    w = int(width) if width and not too_long else 0
    p = int(precision) if precision and not too_long else None
    if too_long or w > MAX_WIDTH or (p is not None and p > MAX_WIDTH):
        raise resource_error(f"{name}() format {spec.group(0)!r}: widths and precisions are limited to {MAX_WIDTH}")
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
        raise resource_error("FORMAT()/strftime() needs a literal format string")
    numbers = [int(n) for n in re.findall(r"\d{1,6}", text)]
    if len(text) > 100 or re.search(r"\d{7}", text) or any(n > MAX_WIDTH for n in numbers):
        raise resource_error(f"FORMAT()/strftime() format {text[:40]!r} is too long or has a number above {MAX_WIDTH}")
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


_RULES.update({n: same_rule for n in _SAME_NAMES.split()})


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
            return same_rule
    return None


def is_operator(node: exp.Expr) -> bool:
    """Whether a sqlglot Func node is really an operator (AND, ->, REGEXP, ...), not a call."""
    return isinstance(node, exp.Binary | exp.Unary | exp.Predicate | exp.Connector)
