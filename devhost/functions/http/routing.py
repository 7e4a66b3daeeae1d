"""ASP.NET-style route templates as the Functions host uses them for HTTP triggers.

Supported: literal segments, ``{name}``, optional ``{name?}``, defaults ``{name=value}``, catch-all
``{*rest}`` / ``{**rest}``, complex segments such as ``{file}.{ext?}``, and the common inline
constraints (``int``, ``long``, ``bool``, ``guid``, ``alpha``, ``datetime``, ``decimal``, ``double``,
``float``, ``min(n)``, ``max(n)``, ``range(a,b)``, ``length(n)``, ``length(a,b)``, ``minlength(n)``,
``maxlength(n)``, ``regex(expr)``, ``required``, ``file``, ``nonfile``). Literals match
case-insensitively; values are percent-decoded per segment.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Generic, TypeVar
from urllib.parse import unquote

T = TypeVar("T")

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INT_RE = re.compile(r"^[+-]?\d+$")
_NUM_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class RouteTemplateError(ValueError):
    """A route template that cannot be parsed."""


Check = Callable[[str], bool]


def _int_in(value: str, bounds: tuple[int, int]) -> bool:
    return bool(_INT_RE.match(value)) and bounds[0] <= int(value) <= bounds[1]


def _is_guid(value: str) -> bool:
    try:
        uuid.UUID(value.strip("{}()"))
    except ValueError:
        return False
    return True


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _is_decimal(value: str) -> bool:
    if not _NUM_RE.match(value):
        return False
    try:
        Decimal(value)
    except InvalidOperation:
        return False
    return True


def _long_args(name: str, args: list[str], count: int) -> list[int]:
    if len(args) != count or not all(_INT_RE.match(a.strip()) for a in args):
        raise RouteTemplateError(f"constraint '{name}' needs {count} integer argument(s)")
    return [int(a) for a in args]


def _make_check(spec: str) -> Check:
    """Build the predicate for one inline constraint such as ``int`` or ``range(1,5)``."""
    m = re.fullmatch(r"([A-Za-z]+)(?:\((.*)\))?", spec, re.DOTALL)
    if not m:
        raise RouteTemplateError(f"invalid constraint '{spec}'")
    name, raw_args = m.group(1).lower(), m.group(2)
    if name == "regex":
        if raw_args is None:
            raise RouteTemplateError("constraint 'regex' needs a pattern")
        raw_args = raw_args.replace("{{", "{").replace("}}", "}")
        try:
            pattern = re.compile(raw_args, re.IGNORECASE)
        except re.error as exc:
            raise RouteTemplateError(f"invalid regex constraint '{raw_args}': {exc}") from exc
        return lambda v: pattern.search(v) is not None
    args = [] if raw_args is None else raw_args.split(",")
    simple: dict[str, Check] = {
        "int": lambda v: _int_in(v, _INT32),
        "long": lambda v: _int_in(v, _INT64),
        "bool": lambda v: v.lower() in ("true", "false"),
        "guid": _is_guid,
        "alpha": lambda v: re.fullmatch(r"[A-Za-z]+", v) is not None,
        "datetime": _is_datetime,
        "decimal": _is_decimal,
        "double": _is_decimal,
        "float": _is_decimal,
        "required": lambda v: v != "",
        "file": lambda v: "." in v.rsplit("/", 1)[-1],
        "nonfile": lambda v: "." not in v.rsplit("/", 1)[-1],
    }
    if name in simple:
        if raw_args is not None:
            raise RouteTemplateError(f"constraint '{name}' takes no arguments")
        return simple[name]
    if name == "min":
        (lo,) = _long_args(name, args, 1)
        return lambda v: _int_in(v, _INT64) and int(v) >= lo
    if name == "max":
        (hi,) = _long_args(name, args, 1)
        return lambda v: _int_in(v, _INT64) and int(v) <= hi
    if name == "range":
        lo, hi = _long_args(name, args, 2)
        return lambda v: _int_in(v, _INT64) and lo <= int(v) <= hi
    if name == "length":
        if len(args) == 1:
            (n,) = _long_args(name, args, 1)
            return lambda v: len(v) == n
        lo, hi = _long_args(name, args, 2)
        return lambda v: lo <= len(v) <= hi
    if name == "minlength":
        (n,) = _long_args(name, args, 1)
        return lambda v: len(v) >= n
    if name == "maxlength":
        (n,) = _long_args(name, args, 1)
        return lambda v: len(v) <= n
    raise RouteTemplateError(f"unknown route constraint '{name}'")


@dataclass
class _Param:
    name: str
    optional: bool = False
    default: str | None = None
    catch_all: bool = False
    checks: list[Check] = field(default_factory=list)

    def accepts(self, value: str) -> bool:
        return all(check(value) for check in self.checks)


@dataclass
class _Segment:
    parts: list[str | _Param]
    regexes: list[re.Pattern[str]] = field(default_factory=list)

    @property
    def single_param(self) -> _Param | None:
        return self.parts[0] if len(self.parts) == 1 and isinstance(self.parts[0], _Param) else None

    @property
    def literal(self) -> str | None:
        return self.parts[0] if len(self.parts) == 1 and isinstance(self.parts[0], str) else None


def _split_outside_parens(text: str, sep: str) -> list[str]:
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _parse_param(body: str) -> _Param:
    catch_all = body.startswith("*")
    body = body.lstrip("*")
    default: str | None = None
    # A default follows the last constraint; '=' inside a regex(...) argument is not a default.
    pieces = _split_outside_parens(body, "=")
    if len(pieces) > 1:
        body, default = pieces[0], "=".join(pieces[1:])
    optional = False
    if body.endswith("?"):
        optional, body = True, body[:-1]
    name, *constraints = _split_outside_parens(body, ":")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise RouteTemplateError(f"invalid parameter name '{name}'")
    if optional and default is not None:
        raise RouteTemplateError(f"parameter '{name}' cannot be both optional and have a default")
    return _Param(
        name=name,
        optional=optional or catch_all,
        default=default,
        catch_all=catch_all,
        checks=[_make_check(c) for c in constraints],
    )


def _parse_segment(text: str) -> _Segment:
    parts: list[str | _Param] = []
    i, literal = 0, []
    while i < len(text):
        ch = text[i]
        if text.startswith("{{", i) or text.startswith("}}", i):
            literal.append(ch)
            i += 2
            continue
        if ch == "}":
            raise RouteTemplateError(f"unmatched '}}' in segment '{text}'")
        if ch == "{":
            end = text.find("}", i)
            # regex constraints may contain '}' (quantifiers); take the closing brace after balanced parens
            depth, j = 0, i + 1
            while j < len(text):
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                elif text[j] == "}" and depth <= 0:
                    end = j
                    break
                j += 1
            if end < 0 or j >= len(text):
                raise RouteTemplateError(f"unmatched '{{' in segment '{text}'")
            if literal:
                parts.append("".join(literal))
                literal = []
            if parts and isinstance(parts[-1], _Param):
                raise RouteTemplateError(f"two parameters must be separated by literal text in '{text}'")
            parts.append(_parse_param(text[i + 1 : end]))
            i = end + 1
            continue
        literal.append(ch)
        i += 1
    if literal:
        parts.append("".join(literal))
    seg = _Segment(parts)
    if len(parts) > 1:
        seg.regexes = _complex_regexes(parts, text)
    return seg


def _complex_regexes(parts: list[str | _Param], text: str) -> list[re.Pattern[str]]:
    """Regexes to try in order; "{file}.{ext?}" first with the separator and extension, then without."""
    pattern = []
    for idx, part in enumerate(parts):
        if isinstance(part, str):
            pattern.append(re.escape(part))
            continue
        if part.catch_all:
            raise RouteTemplateError(f"a catch-all parameter cannot be part of a complex segment '{text}'")
        if part.optional and idx != len(parts) - 1:
            raise RouteTemplateError(f"an optional parameter must be last in segment '{text}'")
        # Greedy captures: the separator literal is taken from the right, as ASP.NET matches complex segments.
        pattern.append(f"(?P<p{idx}>.+)")
    flags = re.IGNORECASE | re.DOTALL
    full = re.compile("".join(pattern), flags)
    last = parts[-1]
    if isinstance(last, _Param) and last.optional and len(parts) >= 3 and isinstance(parts[-2], str):
        return [full, re.compile("".join(pattern[:-2]), flags)]
    return [full]


def _can_skip(param: _Param | None) -> bool:
    """Whether a segment holding only ``param`` may be missing from the path."""
    return param is not None and (param.optional or param.default is not None)


def _match_catch_all(param: _Param, rest: Sequence[str], values: dict[str, str]) -> bool:
    """Match the remaining path segments against a catch-all parameter."""
    joined = "/".join(rest)
    if joined == "" and param.default is not None:
        joined = param.default
    if joined == "":
        return True
    if not param.accepts(joined):
        return False
    values[param.name] = joined
    return True


class RouteTemplate:
    """One parsed route template (without the host's route prefix)."""

    def __init__(self, template: str) -> None:
        """Parse ``template``; raises RouteTemplateError with the reason when it is invalid."""
        self.text = template
        self.segments = self._parse_segments(template)
        self._check_unique_names()
        self._check_catch_all_last()
        self._check_optional_tail()

    @staticmethod
    def _parse_segments(template: str) -> list[_Segment]:
        """Parse the template's segments, ignoring a leading ``~/`` and surrounding slashes."""
        cleaned = template.strip()
        if cleaned.startswith("~/"):
            cleaned = cleaned[2:]
        cleaned = cleaned.strip("/")
        raw_segments = cleaned.split("/") if cleaned else []
        if any(s == "" for s in raw_segments):
            raise RouteTemplateError(f"route '{template}' contains an empty segment")
        try:
            return [_parse_segment(s) for s in raw_segments]
        except RouteTemplateError as exc:
            raise RouteTemplateError(f"route '{template}': {exc}") from None

    def _params(self) -> list[tuple[int, _Param]]:
        """Every parameter of the template with the index of its segment."""
        return [(idx, p) for idx, seg in enumerate(self.segments) for p in seg.parts if isinstance(p, _Param)]

    def _check_unique_names(self) -> None:
        names = [p.name.lower() for _, p in self._params()]
        if len(names) != len(set(names)):
            raise RouteTemplateError(f"route '{self.text}' uses a parameter name twice")

    def _check_catch_all_last(self) -> None:
        last = len(self.segments) - 1
        if any(p.catch_all and idx != last for idx, p in self._params()):
            raise RouteTemplateError(f"route '{self.text}': a catch-all parameter must be the last segment")

    def _check_optional_tail(self) -> None:
        """Optional parameters are only allowed when every later segment is optional as well."""
        seen_optional = False
        for seg in self.segments:
            can_skip = _can_skip(seg.single_param)
            if seen_optional and not can_skip:
                raise RouteTemplateError(
                    f"route '{self.text}': an optional segment must not be followed by required ones"
                )
            seen_optional = seen_optional or can_skip

    @property
    def precedence(self) -> tuple[int, ...]:
        """Lower sorts first: literals, complex segments, constrained, plain parameters, catch-all."""
        key = []
        for seg in self.segments:
            p = seg.single_param
            if seg.literal is not None:
                key.append(1)
            elif p is None:
                key.append(2)
            elif p.catch_all:
                key.append(5)
            elif p.checks:
                key.append(3)
            else:
                key.append(4)
        return tuple(key)

    def match(self, path: Sequence[str]) -> dict[str, str] | None:
        """Match decoded path segments; returns route values or None."""
        values: dict[str, str] = {}
        for idx, seg in enumerate(self.segments):
            p = seg.single_param
            if p is not None and p.catch_all:
                return values if _match_catch_all(p, path[idx:], values) else None
            if idx >= len(path):
                if not _can_skip(p):
                    return None
                if p is not None and p.default is not None:
                    values[p.name] = p.default
                continue
            if not self._match_segment(seg, path[idx], values):
                return None
        return values if len(path) <= len(self.segments) else None

    @classmethod
    def _match_segment(cls, seg: _Segment, value: str, values: dict[str, str]) -> bool:
        """Match one present path segment, adding its route values to ``values``."""
        if seg.literal is not None:
            return value.lower() == seg.literal.lower()
        p = seg.single_param
        if p is None:
            return cls._match_complex(seg, value, values)
        if value == "" or not p.accepts(value):
            return False
        values[p.name] = value
        return True

    @staticmethod
    def _match_complex(seg: _Segment, value: str, values: dict[str, str]) -> bool:
        for regex in seg.regexes:
            m = regex.fullmatch(value)
            if m is None:
                continue
            found: dict[str, str] = {}
            for idx, part in enumerate(seg.parts):
                if not isinstance(part, _Param):
                    continue
                got = m.groupdict().get(f"p{idx}")
                if got is None:
                    if part.default is not None:
                        found[part.name] = part.default
                    continue
                if not part.accepts(got):
                    break
                found[part.name] = got
            else:
                values.update(found)
                return True
        return False


def split_path(raw_path: str) -> list[str]:
    """Split a raw (still percent-encoded) URL path into decoded segments, ignoring one trailing slash."""
    path = raw_path.lstrip("/")
    if path.endswith("/"):
        path = path[:-1]
    if path == "":
        return []
    return [unquote(s) for s in path.split("/")]


@dataclass
class Route(Generic[T]):
    """A route template bound to a target (the function) and the HTTP methods it accepts."""

    template: RouteTemplate
    methods: frozenset[str] | None
    target: T
    order: int


class RouteTable(Generic[T]):
    """All HTTP trigger routes under one route prefix, ordered by ASP.NET precedence."""

    def __init__(self, route_prefix: str) -> None:
        """Create an empty table for ``route_prefix`` (may be empty)."""
        self._prefix_text = [s for s in route_prefix.strip("/").split("/") if s]
        self.prefix = [s.lower() for s in self._prefix_text]
        self._routes: list[Route[T]] = []

    def add(self, template: str, methods: Sequence[str] | None, target: T) -> Route[T]:
        """Register a route; raises RouteTemplateError for a bad template."""
        route = Route(
            template=RouteTemplate(template),
            methods=frozenset(m.upper() for m in methods) if methods else None,
            target=target,
            order=len(self._routes),
        )
        self._routes.append(route)
        self._routes.sort(key=lambda r: (r.template.precedence, r.order))
        return route

    def resolve(self, method: str, raw_path: str) -> tuple[Route[T], dict[str, str]] | None:
        """Find the route for a request; a wrong method counts as no match (the real host answers 404)."""
        segments = split_path(raw_path)
        n = len(self.prefix)
        if [s.lower() for s in segments[:n]] != self.prefix:
            return None
        rest = segments[n:]
        for route in self._routes:
            if route.methods is not None and method.upper() not in route.methods:
                continue
            values = route.template.match(rest)
            if values is not None:
                return route, values
        return None

    @property
    def routes(self) -> list[Route[T]]:
        """Registered routes in matching order."""
        return list(self._routes)

    def url_path(self, route: Route[T]) -> str:
        """The printable path of a route, e.g. ``/api/orders/{id}``."""
        parts = [*self._prefix_text, route.template.text.strip("/")]
        return "/" + "/".join(p for p in parts if p)
