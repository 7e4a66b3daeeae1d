"""Check an HTTP answer against the OpenAPI document: the operation of its method and path, the schema of its status."""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012


def operation_of(doc: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    """The operation whose path template matches ``path`` (fixed segments win over parameters)."""
    found = []
    for template, item in doc["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if method.lower() in item and re.match(pattern, path):
            found.append((template.count("{"), item[method.lower()]))
    return min(found, key=lambda pair: pair[0])[1] if found else None


def schema_problems(doc: dict[str, Any], method: str, path: str, status: int, body: Any) -> list[str]:
    """What is wrong with an answer by the document (nothing: it is an answer the document describes)."""
    op = operation_of(doc, method, path)
    if op is None:
        return [f"{method} {path}: no operation in the document"]
    response = op["responses"].get(str(status))
    if response is None:
        return [f"{method} {path}: status {status} is not documented ({sorted(op['responses'])})"]
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return []
    registry: Registry[Any] = Registry().with_resource("urn:doc", DRAFT202012.create_resource(doc))
    ref = {"$ref": "urn:doc#" + schema["$ref"][1:]} if "$ref" in schema else schema
    validator = Draft202012Validator(ref, registry=registry)
    return [f"{method} {path} {status} {list(e.absolute_path)}: {e.message}"[:400] for e in validator.iter_errors(body)]
