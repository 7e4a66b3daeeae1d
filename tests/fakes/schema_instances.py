"""Build a JSON value from a JSON schema, as a model held to that schema would: for the fake OpenAI server.

Deterministic and small: the first ``enum``/``const`` value, the first non-null branch of a union, every
property of an object, one item per array (or ``minItems``), strings and numbers at their lower bounds.
``values`` pins the value of a property by name wherever it occurs. The result is then checked against the
schema with ``jsonschema``: a schema this builder cannot satisfy is reported, never answered wrongly.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

MAX_DEPTH = 24


class Unbuildable(Exception):
    """The schema asks for something this builder does not make (or no value fits it)."""


def build_instance(schema: dict[str, Any], values: dict[str, Any] | None = None) -> Any:
    """A value that validates against ``schema``; ``Unbuildable`` says why there is none."""
    value = _Builder(schema, values or {}).build(schema, 0)
    problem = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if problem is not None:
        where = "/".join(str(p) for p in problem.path) or "(root)"
        raise Unbuildable(f"the built value does not fit the schema at {where}: {problem.message}")
    return value


class _Builder:
    def __init__(self, root: dict[str, Any], values: dict[str, Any]) -> None:
        self.root = root
        self.values = values

    def resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#"):
            raise Unbuildable(f"remote $ref {ref!r}")
        node: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise Unbuildable(f"$ref {ref!r} points nowhere")
            node = node[part]
        if not isinstance(node, dict):
            raise Unbuildable(f"$ref {ref!r} is not a schema")
        return node

    def build(self, schema: dict[str, Any], depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Unbuildable("the schema nests too deep to build")
        if "$ref" in schema:
            return self.build(self.resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
                return self.build(options[0], depth + 1)
        if "allOf" in schema:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(part)
            return self.build(merged, depth + 1)
        return self.typed(schema, depth)

    def typed(self, schema: dict[str, Any], depth: int) -> Any:
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            return self.obj(schema, depth)
        if kind == "array":
            count = max(1, int(schema.get("minItems", 1)))
            if schema.get("maxItems") == 0:
                return []
            items = schema.get("items")
            return [self.build(items, depth + 1) if isinstance(items, dict) else "item" for _ in range(count)]
        if kind == "string":
            return "x" * int(schema.get("minLength", 0)) or "fake text"
        if kind in ("integer", "number"):
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
            value = low + 1 if "exclusiveMinimum" in schema else max(low, 1)
            return int(value) if kind == "integer" else float(value)
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        raise Unbuildable(f"type {kind!r}")

    def obj(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sub in (schema.get("properties") or {}).items():
            out[name] = self.values[name] if name in self.values else self.build(sub, depth + 1)
        return out
