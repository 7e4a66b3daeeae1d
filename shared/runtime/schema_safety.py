"""The one place that builds validators for JSON Schemas the app did not write: they are untrusted code.

Schemas come from definitions (an agent's ``output_schema``), MCP servers (a tool's ``inputSchema``), HTTP
tool entries (``TOOLS_HTTP`` parameters) and models. jsonschema's defaults would fetch a remote ``$ref`` (or
read a ``file://`` one) and run ``pattern`` on Python's backtracking ``re``, so every validator of such a
schema is built here, never with jsonschema directly:

- only local references (``#`` or ``#/...`` JSON pointers) resolve: the registry refuses every retrieval,
  and ``schema_problems`` names each other ``$ref``/``$dynamicRef`` (and any ``$id``) with its path;
- ``pattern`` and ``patternProperties`` run on RE2 (linear time); a pattern RE2 cannot run (backreferences,
  lookarounds) is refused;
- the schema's size, depth, keyword count and pattern length are bounded, and so are the instance's size
  and the work of one validation: a count of keyword evaluations (deterministic, so an orchestrator replays
  the same verdict) and, where the caller gives one, a wall-clock bound. Past a bound: ``SchemaLimitExceeded``.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import re2
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

# Bounds of a schema (checked before anything else reads it).
MAX_SCHEMA_CHARS = 64_000
MAX_SCHEMA_DEPTH = 32  # nesting of JSON objects and arrays
MAX_SCHEMA_KEYWORDS = 4_000  # object keys in the whole schema
MAX_PATTERN_CHARS = 1_000
# RE2's memory for one compiled pattern (its own bound on a pattern's size once expanded).
RE2_MAX_MEM = 8 << 20
# Bounds of one validation.
MAX_INSTANCE_CHARS = 512_000  # the instance's size as JSON
MAX_INSTANCE_DEPTH = 64
MAX_WORK = 50_000  # keyword evaluations, a pattern search counting one per 256 characters it reads
DEFAULT_TIME_S = 2.0
# At most this many errors are collected from one validation.
MAX_ERRORS = 20

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose value is a schema, a list of schemas or a map of schemas (Draft 4 to 2020-12); the values
# of other keywords (enum, const, default, examples, ...) are data and never walked as schemas.
_ONE_SCHEMA = frozenset(
    {
        "additionalItems", "additionalProperties", "contains", "contentSchema", "else", "if", "items", "not",
        "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties",
    }
)  # fmt: skip
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAP = frozenset({"$defs", "definitions", "dependentSchemas", "patternProperties", "properties", "dependencies"})


class UnsafeSchema(ValueError):
    """A schema that may not be run: each problem with its path inside the schema."""

    def __init__(self, problems: list[SchemaProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


class SchemaLimitExceeded(ValueError):
    """A validation stopped at one of its bounds (instance size, work, time)."""


@dataclass(frozen=True)
class SchemaProblem:
    """One problem of a schema: where (path parts from the schema's root) and why."""

    path: tuple[str, ...]
    message: str
    # True when the schema is not a valid JSON Schema at all; False when it is one this app will not run.
    invalid: bool = False

    def at(self, prefix: str) -> str:
        """The problem's path as a dotted JSON path under ``prefix`` (e.g. ``output_schema.properties.a``)."""
        return ".".join([prefix, *self.path] if prefix else self.path)

    def __str__(self) -> str:
        return f"{'.'.join(self.path) or '(root)'}: {self.message}"


# --- Static checks ---------------------------------------------------------------------------------------


def schema_problems(schema: Any) -> list[SchemaProblem]:
    """Every reason this schema may not be run (empty: it is safe); the bounds first, then the rest."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, dict):
        return [SchemaProblem((), "a JSON Schema must be an object (or true/false)", True)]
    try:
        return list(_static_problems(_canonical(schema)))
    except UnsafeSchema as exc:
        return exc.problems


@functools.lru_cache(maxsize=256)
def _static_problems(text: str) -> tuple[SchemaProblem, ...]:
    schema = json.loads(text)
    if len(text) > MAX_SCHEMA_CHARS:
        return (SchemaProblem((), f"the schema is {len(text)} characters as JSON; at most {MAX_SCHEMA_CHARS}"),)
    keywords = _count_keys(schema)
    if keywords > MAX_SCHEMA_KEYWORDS:
        return (SchemaProblem((), f"the schema has {keywords} keywords; at most {MAX_SCHEMA_KEYWORDS}"),)
    # References and patterns first: the metaschema check compiles each pattern with Python's re.
    walked = _Walk(schema).run()
    if walked:
        return tuple(walked)
    try:
        _draft_of(schema).check_schema(schema)
    except SchemaError as exc:
        return (SchemaProblem(tuple(str(p) for p in exc.path), f"not a valid JSON Schema: {exc.message[:300]}", True),)
    except RecursionError:
        return (SchemaProblem((), "the schema could not be checked: it recurses too deep"),)
    return ()


def _canonical(schema: dict[str, Any]) -> str:
    """The schema as compact JSON, refusing one nested past the depth bound before anything recurses into it."""
    depth = _depth(schema, MAX_SCHEMA_DEPTH)
    if depth > MAX_SCHEMA_DEPTH:
        raise UnsafeSchema([SchemaProblem((), f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")])
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _depth(value: Any, limit: int) -> int:
    """How deep a JSON value nests, counted without recursion and stopping once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level > limit:
                return level
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest


def _count_keys(value: Any) -> int:
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _draft_of(schema: Any) -> type[Validator]:
    # A "$schema" the library knows picks its draft; any other (or none) is 2020-12. Nothing is fetched.
    found: type[Validator] = validator_for(schema, default=Draft202012Validator)
    return found


class _Walk:
    """The schema walked keyword by keyword (the targets of local references too), collecting problems."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.problems: list[SchemaProblem] = []
        self.seen: set[tuple[str, ...]] = set()

    def run(self) -> list[SchemaProblem]:
        pending: list[tuple[Any, tuple[str, ...]]] = [(self.root, ())]
        while pending:
            node, path = pending.pop()
            if path in self.seen or not isinstance(node, dict):
                continue
            self.seen.add(path)
            pending.extend(self._schema(node, path))
        return sorted(set(self.problems), key=lambda p: p.path)

    def _schema(self, node: dict[str, Any], path: tuple[str, ...]) -> Iterator[tuple[Any, tuple[str, ...]]]:
        """Check one schema object; yield the schemas under it (and the targets of its references)."""
        for key, value in node.items():
            here = (*path, key)
            if key in _REF_KEYWORDS:
                target = self._reference(value, here)
                if target is not None:
                    yield target
            elif key == "$id":
                self.problems.append(SchemaProblem(here, "$id is not allowed: a schema here refers only within itself"))
            elif key == "pattern" and isinstance(value, str):
                self._pattern(value, here)
            if key == "patternProperties" and isinstance(value, dict):
                for pattern in value:
                    self._pattern(pattern, (*here, pattern))
            if key in _ONE_SCHEMA and isinstance(value, dict):
                yield value, here
            if key in _SCHEMA_LIST and isinstance(value, list):
                yield from ((item, (*here, str(i))) for i, item in enumerate(value))
            if key in _SCHEMA_MAP and isinstance(value, dict):
                yield from ((item, (*here, name)) for name, item in value.items())

    def _reference(self, ref: Any, path: tuple[str, ...]) -> tuple[Any, tuple[str, ...]] | None:
        if not isinstance(ref, str):
            return None  # the metaschema check has refused it already
        if ref != "#" and not ref.startswith("#/"):
            shown = ref if len(ref) <= 200 else ref[:199] + "…"
            self.problems.append(
                SchemaProblem(path, f"{shown!r} is not a local reference: only '#/...' pointers into this schema")
            )
            return None
        parts = tuple(_unescape(p) for p in ref[2:].split("/")) if ref != "#" else ()
        target: Any = self.root
        for part in parts:
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                self.problems.append(SchemaProblem(path, f"{ref!r} does not resolve within this schema"))
                return None
        return target, parts

    def _pattern(self, pattern: str, path: tuple[str, ...]) -> None:
        problem = pattern_problem(pattern)
        if problem:
            self.problems.append(SchemaProblem(path, problem))


def _unescape(part: str) -> str:
    return unquote(part).replace("~1", "/").replace("~0", "~")


def pattern_problem(pattern: str) -> str | None:
    """Why a regular expression from outside may not be run (None: RE2 runs it in linear time)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"the pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}"
    try:
        _re2(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return (
            f"the pattern {pattern[:100]!r} is not accepted by RE2, the linear-time engine patterns run on "
            f"({reason[:200]}; backreferences and lookarounds are not supported)"
        )
    return None


@functools.lru_cache(maxsize=1024)
def _re2(pattern: str) -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False
    return re2.compile(pattern, options)


# --- Validators ------------------------------------------------------------------------------------------


class _Budget:
    """The work one validation may still do, and (optionally) the moment it must have finished by."""

    def __init__(self, work: int, deadline: float | None) -> None:
        self.left = work
        self.deadline = deadline
        self._since_clock = 0

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise SchemaLimitExceeded(f"validation stopped: it needs more than {MAX_WORK} units of work")
        self._since_clock += units
        if self.deadline is not None and self._since_clock >= 256:
            self._since_clock = 0
            if time.monotonic() > self.deadline:
                raise SchemaLimitExceeded("validation stopped: it ran past its time bound")


_BUDGET: ContextVar[_Budget | None] = ContextVar("schema_budget", default=None)


def _spend(units: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(units)


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:79] + "…"


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string"):
        _spend(1 + len(instance) // 256)
        if not _runnable(pattern).search(instance):
            yield ValidationError(f"{_short(instance)!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = _runnable(pattern)
        for key, value in instance.items():
            _spend(1 + len(key) // 256)
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _runnable(pattern: str) -> Any:
    problem = pattern_problem(pattern)
    if problem:  # reached only through a path the static walk does not take; refused all the same
        raise UnsafeSchema([SchemaProblem((), problem)])
    return _re2(pattern)


def _counted(keyword: Callable[..., Any], cost: Callable[[Any, Any], int] | None = None) -> Callable[..., Any]:
    """A keyword that spends from the validation's budget before it runs."""

    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend(1 if cost is None else cost(value, instance))
        return keyword(validator, value, instance, schema)

    return run


def _unique_cost(value: Any, instance: Any) -> int:
    # jsonschema compares unsortable items pairwise: the square of the array's length.
    return 1 + (len(instance) ** 2 // 64 if value and isinstance(instance, list) else 0)


def _enum_cost(value: Any, instance: Any) -> int:
    return 1 + (len(value) if isinstance(value, list) else 0)


_CACHE_LOCK = threading.Lock()
_SAFE_CLASSES: dict[str, type[Validator]] = {}


def _safe_class(base: type[Validator]) -> type[Validator]:
    """``base`` with RE2 patterns and every keyword counted against the budget (built once per draft)."""
    key = f"{base.__module__}.{base.__qualname__}"
    with _CACHE_LOCK:
        found = _SAFE_CLASSES.get(key)
    if found is None:
        found = _SAFE_CLASSES[key] = _extended(base)
    return found


def _extended(base: type[Validator]) -> type[Validator]:
    costs: dict[str, Callable[[Any, Any], int]] = {"uniqueItems": _unique_cost, "enum": _enum_cost}
    keywords = {name: _counted(fn, costs.get(name)) for name, fn in base.VALIDATORS.items()}
    if "pattern" in keywords:
        keywords["pattern"] = _pattern
    if "patternProperties" in keywords:
        keywords["patternProperties"] = _pattern_properties
    safe: type[Validator] = extend(base, keywords)
    return safe


def _refuse(uri: str) -> Any:
    """The registry's retrieve function: nothing outside the schema is ever fetched or read."""
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class: mypy misses its __init__


class SafeValidator:
    """A validator of one checked schema: local references only, RE2 patterns, bounded work."""

    def __init__(self, schema: dict[str, Any] | bool) -> None:
        self.schema = schema
        cls = _safe_class(_draft_of(schema))
        self._validator = cls(schema, registry=Registry(retrieve=_refuse))  # type: ignore[call-arg]

    def errors(self, instance: Any, *, time_s: float | None = DEFAULT_TIME_S) -> list[ValidationError]:
        """The instance's errors (at most ``MAX_ERRORS``), in the order jsonschema finds them.

        ``time_s=None`` leaves out the wall-clock bound (orchestrators: the same verdict on every replay);
        the work bound always holds. Raises ``SchemaLimitExceeded`` past a bound.
        """
        _check_instance(instance)
        token = _BUDGET.set(_Budget(MAX_WORK, None if time_s is None else time.monotonic() + time_s))
        try:
            found: list[ValidationError] = []
            for error in self._validator.iter_errors(instance):
                found.append(error)
                if len(found) >= MAX_ERRORS:
                    break
        except Unresolvable as exc:
            raise UnsafeSchema([SchemaProblem((), f"a reference does not resolve within the schema: {exc}")]) from None
        except RecursionError:
            raise SchemaLimitExceeded("validation stopped: the schema's references recurse too deep") from None
        finally:
            _BUDGET.reset(token)
        return found

    def first_error(self, instance: Any, *, time_s: float | None = DEFAULT_TIME_S) -> ValidationError | None:
        """The most relevant error (jsonschema's ``best_match``), or None when the instance fits."""
        found = self.errors(instance, time_s=time_s)
        return best_match(found) if found else None


def _check_instance(instance: Any) -> None:
    if _depth(instance, MAX_INSTANCE_DEPTH) > MAX_INSTANCE_DEPTH:
        raise SchemaLimitExceeded(f"the value nests deeper than {MAX_INSTANCE_DEPTH} levels")
    size = len(json.dumps(instance, default=str))
    if size > MAX_INSTANCE_CHARS:
        raise SchemaLimitExceeded(f"the value is {size} characters as JSON; at most {MAX_INSTANCE_CHARS} are checked")


_CACHE: dict[str, SafeValidator] = {}
_CACHE_SIZE = 256


def safe_validator(schema: Any) -> SafeValidator:
    """The validator of an untrusted schema; ``UnsafeSchema`` (with every problem and its path) if it may not run."""
    if isinstance(schema, bool):
        return SafeValidator(schema)
    if not isinstance(schema, dict):
        raise UnsafeSchema([SchemaProblem((), "a JSON Schema must be an object (or true/false)")])
    text = _canonical(schema)
    with _CACHE_LOCK:
        cached = _CACHE.get(text)
    if cached is not None:
        return cached
    problems = _static_problems(text)
    if problems:
        raise UnsafeSchema(list(problems))
    built = SafeValidator(json.loads(text))
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[text] = built
    return built
