"""An agent's output schema in a structured-output call: its bound, the schema sent, and checking the reply.

The answer writer's output type (``AnswerResult``) has a text field, ``answer``, and ``citations``. With an
agent's output schema the model is asked for ``{"answer": <an object of that schema>, "citations": [...]}``:
the object sits where the prose would, its citations stay beside it (so they work exactly as without a
schema), and the provider's structured output can hold the object to the schema. After the call the object
is checked against the agent's schema (the model's output is untrusted) and its JSON text is put in the text
field, so executors and the orchestrator see the usual output type (``answer`` holds the object's JSON).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.output_schema import MAX_SCHEMA_CHARS as MAX_SCHEMA_CHARS
from shared.runtime.output_schema import MAX_SCHEMA_DEPTH as MAX_SCHEMA_DEPTH
from shared.runtime.output_schema import check_output_schema as check_output_schema
from shared.runtime.output_schema import schema_chars as schema_chars
from shared.runtime.schema_safety import SchemaLimitExceeded, UnsafeSchema, safe_validator

# Keywords that make no sense once the schema is nested inside the request's schema.
_ROOT_ONLY = ("$schema", "$id", "$defs", "definitions")
# The agent schema's definitions are hoisted to the root under these prefixes, clear of the output type's own.
_DEFS_PREFIX = {"$defs": "output_", "definitions": "output_definitions_"}


def _rewrite_refs(node: Any, field: str) -> Any:
    """Local ``$ref``s of the agent's schema, pointed at where its parts sit inside the request's schema."""
    if isinstance(node, list):
        return [_rewrite_refs(item, field) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewrite_refs(value, field) for key, value in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = _moved_ref(ref, field)
    return out


def _moved_ref(ref: str, field: str) -> str:
    for key, prefix in _DEFS_PREFIX.items():
        head = f"#/{key}/"
        if ref.startswith(head):
            return f"#/$defs/{prefix}{ref[len(head) :]}"
    # The root ("#") and any other pointer into the schema now live under the field.
    return f"#/properties/{field}{ref[1:]}"


def wire_schema(output_type: type[BaseModel], field: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The output type's schema with ``field`` replaced by the agent's object schema (its definitions hoisted)."""
    wire = copy.deepcopy(output_type.model_json_schema())
    defs: dict[str, Any] = wire.setdefault("$defs", {})
    for key, prefix in _DEFS_PREFIX.items():
        for name, sub in (schema.get(key) or {}).items():
            defs[f"{prefix}{name}"] = _rewrite_refs(sub, field)
    if not defs:
        del wire["$defs"]
    wire["properties"][field] = _rewrite_refs({k: v for k, v in schema.items() if k not in _ROOT_ONLY}, field)
    required = wire.setdefault("required", [])
    if field not in required:
        required.insert(0, field)
    return wire


def requires_all(node: Any) -> bool:
    """Whether every object in the schema requires all of its properties (then strict mode changes nothing).

    Strict structured output makes every property required; sending an agent's schema with optional
    properties as strict would make the model invent values the schema lets it leave out, so such a schema
    goes as non-strict (the reply is checked against it afterwards either way).
    """
    if isinstance(node, list):
        return all(requires_all(item) for item in node)
    if not isinstance(node, dict):
        return True
    props = node.get("properties")
    if isinstance(props, dict) and not set(props) <= set(node.get("required") or []):
        return False
    return all(requires_all(value) for key, value in node.items() if key not in ("enum", "const", "examples"))


def shape_reply(data: dict[str, Any], field: str, schema: dict[str, Any], model: str, text: str) -> dict[str, Any]:
    """The reply with the agent's object checked against its schema and put in ``field`` as JSON text.

    Raises ``ProviderError(BAD_REQUEST)`` (carrying the output, so the model can be shown it) when the object
    is missing or does not fit, naming where.
    """
    value = data.get(field)
    if isinstance(value, str):  # a model in plain JSON mode may write the object as a string
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict):
        raise ProviderError(
            ErrorCode.BAD_REQUEST, f"{model!r} returned no JSON object in {field!r} for the output schema", output=text
        )
    try:
        problem = next(iter(safe_validator(schema).errors(value)), None)
    except UnsafeSchema as exc:  # an unresolvable $ref, say: the schema's fault, not the model's
        raise ProviderError(ErrorCode.OUTPUT_SCHEMA_REFUSED, f"cannot check against the output schema: {exc}") from exc
    except SchemaLimitExceeded as exc:  # the object is too big or too costly to check: the model's output
        raise ProviderError(
            ErrorCode.BAD_REQUEST, f"{model!r} returned an object that cannot be checked: {exc}"
        ) from exc
    if problem is not None:
        where = ".".join(str(p) for p in problem.path) or "(root)"
        raise ProviderError(
            ErrorCode.BAD_REQUEST,
            f"{model!r} returned an object that does not fit the output schema at {where}: {problem.message}"[:1500],
            output=text,
        )
    return {**data, field: json.dumps(value, ensure_ascii=False)}
