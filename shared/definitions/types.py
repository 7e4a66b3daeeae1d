"""The small type system of definitions: every value is described by a JSON Schema, and a mapping is
type-checked by comparing the schema of its source with the schema of the field it fills."""

from __future__ import annotations

from typing import Any

JsonSchema = dict[str, Any]
# The JSON types a workflow input or a mapped field may have.
VALUE_TYPES = ("string", "number", "integer", "boolean", "object", "array")
ANY: JsonSchema = {}


def types_of(schema: JsonSchema) -> set[str] | None:
    """The JSON types a schema admits (None: any type, or too complex to say)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        found = {declared}
    elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        found = set(declared)
    else:
        options = schema.get("anyOf") or schema.get("oneOf")
        if not isinstance(options, list) or not options:
            return None
        found = set()
        for option in options:
            inner = types_of(option) if isinstance(option, dict) else None
            if inner is None:
                return None
            found |= inner
    return found


def compatible(source: JsonSchema, target: JsonSchema) -> bool:
    """Whether every value ``source`` admits may fill a field of schema ``target`` (unknown types pass)."""
    have, want = types_of(source), types_of(target)
    if have is None or want is None:
        return True
    if "number" in want:
        want = want | {"integer"}
    # A nullable source may still fill a required field: null is checked when the run gets the value.
    return bool(have - {"null"}) and (have - {"null"}) <= want


def describe(schema: JsonSchema) -> str:
    """A schema's types for a message: "string", "integer or null", "any"."""
    found = types_of(schema)
    return " or ".join(sorted(found)) if found else "any"


def resolve_refs(schema: JsonSchema, root: JsonSchema) -> JsonSchema:
    """Follow a local ``$ref`` (``#/$defs/X``), as pydantic writes them; other refs stay unknown (any)."""
    seen = 0
    while isinstance(schema.get("$ref"), str) and seen < 8:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return ANY
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return ANY
        schema, seen = node, seen + 1
    return schema


def field_schema(schema: JsonSchema, path: list[str], root: JsonSchema | None = None) -> JsonSchema | str:
    """The schema of ``path`` inside ``schema``, or a message saying which part does not exist."""
    root = root if root is not None else schema
    current = resolve_refs(schema, root)
    for index, part in enumerate(path):
        kinds = types_of(current)
        if part.isdigit() and kinds is not None and "array" in kinds:
            # An item of a list by its index (``rows.0.0``: the first row's first value), as a run resolves it.
            items = current.get("items")
            current = resolve_refs(items, root) if isinstance(items, dict) else ANY
            continue
        if kinds is not None and "object" not in kinds:
            where = ".".join(path[:index]) or "the output"
            return f"{where} is {describe(current)}, it has no field {part!r}"
        props = current.get("properties")
        if isinstance(props, dict) and part in props:
            current = resolve_refs(props[part], root)
        elif isinstance(props, dict) and current.get("additionalProperties") is False:
            known = ", ".join(sorted(props)) or "none"
            return f"there is no field {part!r} (known: {known})"
        elif isinstance(props, dict) and props and kinds is not None:
            known = ", ".join(sorted(props))
            return f"there is no field {part!r} (known: {known})"
        else:
            current = ANY
    return current


def object_schema(fields: dict[str, JsonSchema], required: list[str] | None = None) -> JsonSchema:
    """A closed object schema with these fields."""
    return {"type": "object", "properties": fields, "required": required or [], "additionalProperties": False}
