"""The schema-safety module: each barrier on its own (no retrieval, RE2 patterns, bounds, work and time)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.runtime import schema_safety
from shared.runtime.schema_safety import (
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_KEYWORDS,
    SafeValidator,
    SchemaLimitExceeded,
    UnsafeSchema,
    pattern_problem,
    safe_validator,
    schema_problems,
)
from tests.fakes.counting_server import CountingServer

CATASTROPHIC = r"^([\s\S]+)+Z$"


@pytest.fixture
def counting() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


def paths(schema: Any) -> list[str]:
    return [".".join(p.path) for p in schema_problems(schema)]


# --- References ------------------------------------------------------------------------------------------


def test_a_remote_ref_is_refused_with_its_path_and_never_fetched(counting: CountingServer) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": f"{counting.url}/x.json"}}}
    problems = schema_problems(schema)
    assert [".".join(p.path) for p in problems] == ["properties.a.$ref"]
    assert "not a local reference" in problems[0].message and not problems[0].invalid
    with pytest.raises(UnsafeSchema):
        safe_validator(schema)
    # Even a validator built past the static check (as a caller might) refuses to retrieve.
    with pytest.raises(UnsafeSchema, match="does not resolve"):
        SafeValidator(schema).errors({"a": 1})
    assert counting.hits == 0


def test_a_file_ref_is_refused_and_the_file_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["TOP SECRET"]}')
    schema = {"type": "object", "properties": {"a": {"$ref": secret.as_uri()}}}
    assert paths(schema) == ["properties.a.$ref"]
    with pytest.raises(UnsafeSchema) as caught:
        SafeValidator(schema).errors({"a": 1})
    assert "TOP SECRET" not in str(caught.value)


def test_dynamic_refs_and_ids_are_refused_too(counting: CountingServer) -> None:
    assert paths({"$dynamicRef": f"{counting.url}/m"}) == ["$dynamicRef"]
    assert paths({"$defs": {"a": {"$id": f"{counting.url}/a.json"}}}) == ["$defs.a.$id"]
    assert paths({"$ref": "http://169.254.169.254/latest/meta-data"}) == ["$ref"]
    assert counting.hits == 0


def test_local_pointers_resolve_and_validate() -> None:
    schema = {
        "type": "object",
        "$defs": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "properties": {"a": {"$ref": "#/$defs/code"}, "self": {"$ref": "#"}},
    }
    assert schema_problems(schema) == []
    validator = safe_validator(schema)
    assert validator.errors({"a": "EUR"}) == []
    error = validator.first_error({"a": "euro"})
    assert error is not None and list(error.absolute_path) == ["a"]


def test_a_local_pointer_that_does_not_resolve_is_named() -> None:
    assert paths({"properties": {"a": {"$ref": "#/$defs/missing"}}}) == ["properties.a.$ref"]


def test_a_property_named_like_a_keyword_is_a_name_not_a_reference() -> None:
    schema = {"type": "object", "properties": {"$ref": {"type": "string"}, "$id": {"type": "string"}}}
    assert schema_problems(schema) == []
    assert safe_validator(schema).errors({"$ref": "http://example.invalid/x"}) == []


def test_data_keywords_are_not_walked_as_schemas_but_a_pointer_into_them_is() -> None:
    assert schema_problems({"enum": [{"$ref": "http://x.invalid/"}], "default": {"pattern": "(?=a)"}}) == []
    hidden = {"x-stash": {"pattern": "(a)\\1"}, "$ref": "#/x-stash"}
    assert paths(hidden) == ["x-stash.pattern"]


# --- Patterns --------------------------------------------------------------------------------------------


def test_a_catastrophic_pattern_runs_in_linear_time_on_re2() -> None:
    validator = safe_validator({"type": "object", "properties": {"a": {"type": "string", "pattern": CATASTROPHIC}}})
    # Python's re would take on the order of 2**100000 steps here; RE2 reads the string once.
    error = validator.first_error({"a": "x" * 100_000})
    assert error is not None and "does not match" in error.message
    assert len(error.message) < 300  # the instance is shortened in the message
    assert validator.errors({"a": "x" * 1000 + "Z"}) == []


def test_pattern_properties_run_on_re2() -> None:
    validator = safe_validator({"type": "object", "patternProperties": {CATASTROPHIC: {"type": "integer"}}})
    assert validator.errors({"x" * 5000: "not checked: the key does not match"}) == []
    error = validator.first_error({"abcZ": "text"})
    assert error is not None and list(error.absolute_path) == ["abcZ"]


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape"),
        (r"(?=a)b", "invalid perl operator"),
        (r"(?<!a)b", "invalid perl operator"),
        ("a" * (MAX_PATTERN_CHARS + 1), "at most"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused(pattern: str, why: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and why in problem
    assert paths({"properties": {"a": {"pattern": pattern}}}) == ["properties.a.pattern"]
    assert paths({"patternProperties": {pattern: {}}}) == [f"patternProperties.{pattern}"]


# --- Bounds ----------------------------------------------------------------------------------------------


def test_an_oversized_schema_is_refused() -> None:
    big = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    assert "characters" in schema_problems(big)[0].message
    many = {"type": "object", "properties": {str(i): {} for i in range(MAX_SCHEMA_KEYWORDS)}}
    assert "keywords" in schema_problems(many)[0].message
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_SCHEMA_DEPTH + 5):
        node["not"] = {}
        node = node["not"]
    assert "deeper" in schema_problems(deep)[0].message
    with pytest.raises(UnsafeSchema):
        safe_validator(deep)


def test_a_very_deep_schema_is_refused_without_recursing() -> None:
    deep: Any = {}
    for _ in range(100_000):
        deep = {"not": deep}
    assert "deeper" in schema_problems(deep)[0].message


def test_an_invalid_schema_is_reported_as_invalid() -> None:
    problems = schema_problems({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert problems[0].invalid and problems[0].path[:2] == ("properties", "a")
    assert schema_problems("not a schema")[0].invalid


def test_an_oversized_instance_is_a_clear_error() -> None:
    validator = safe_validator({"type": "object"})
    with pytest.raises(SchemaLimitExceeded, match="characters"):
        validator.errors({"a": "x" * (schema_safety.MAX_INSTANCE_CHARS + 1)})
    deep: Any = 1
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(SchemaLimitExceeded, match="deeper"):
        validator.errors(deep)


def exponential_schema(levels: int) -> dict[str, Any]:
    """A small schema whose local references double the work at every level."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_work_is_bounded_and_the_verdict_is_the_same_every_time() -> None:
    validator = safe_validator(exponential_schema(40))  # 2**40 evaluations unbounded
    messages = set()
    for _ in range(2):
        with pytest.raises(SchemaLimitExceeded) as caught:
            validator.errors("text", time_s=None)
        messages.add(str(caught.value))
    assert messages == {f"validation stopped: it needs more than {schema_safety.MAX_WORK} units of work"}


def test_a_time_bound_stops_a_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_safety, "MAX_WORK", 10**12)
    validator = safe_validator(exponential_schema(40))
    with pytest.raises(SchemaLimitExceeded, match="time bound"):
        validator.errors("text", time_s=0.05)


def test_unique_items_is_charged_by_its_quadratic_cost() -> None:
    validator = safe_validator({"type": "array", "uniqueItems": True})
    assert validator.errors([{"a": i} for i in range(100)]) == []
    with pytest.raises(SchemaLimitExceeded):
        validator.errors([{"a": i} for i in range(20_000)], time_s=None)


def test_older_drafts_get_the_same_barriers() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": CATASTROPHIC}},
        "definitions": {"r": {"$ref": "http://127.0.0.1:9/x"}},
    }
    assert paths(schema) == ["definitions.r.$ref"]
    del schema["definitions"]
    error = safe_validator(schema).first_error({"a": "y" * 50_000})
    assert error is not None and "does not match" in error.message


def test_no_other_app_module_builds_a_jsonschema_validator() -> None:
    """One place builds validators for untrusted schemas: a new caller cannot reach jsonschema around it."""
    root = Path(__file__).resolve().parents[2]
    module = root / "shared" / "runtime" / "schema_safety.py"
    found = []
    for package in ("api", "activities", "orchestrators", "shared"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if path != module and re.search(r"^\s*(import|from) (jsonschema|referencing)\b", text, re.MULTILINE):
                found.append(str(path.relative_to(root)))
    assert found == []
