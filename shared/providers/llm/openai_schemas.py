"""Output schemas for OpenAI-compatible endpoints: strict JSON schemas, shaped agent outputs, grammar-safe bounds.

See ``shared.providers.llm.openai`` for how the modes use them.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import openai
from pydantic import BaseModel

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.llm.shaped import check_output_schema, requires_all, wire_schema

if TYPE_CHECKING:
    pass
from shared.providers.llm.openai_errors import EndpointKind, WireMode, error_detail
from shared.providers.llm.openai_stream import stream_field

# Keywords that strict structured output does not accept everywhere (Azure lags OpenAI here);
# pydantic validates them after the call anyway.
_STRICT_DROP = frozenset(
    {
        "default",
        "title",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "examples",
    }
)


@dataclass(frozen=True)
class OutputSchema:
    """The JSON schema sent for an output type, and whether it is sent as strict."""

    name: str
    schema: dict[str, Any]
    strict: bool
    full_schema: dict[str, Any]


class _NotStrict(Exception):
    pass


# Keywords strict mode cannot express at all: a schema using one is sent as non-strict.
_STRICT_UNSUPPORTED = frozenset({"prefixItems", "patternProperties", "propertyNames", "if", "then", "else"})


# What makes a non-object schema typed enough for strict mode.
_STRICT_TYPED = ("type", "anyOf", "allOf", "enum", "const", "$defs")


def _strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        # Strict mode rejects siblings of $ref.
        return {"$ref": node["$ref"]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _STRICT_DROP:
            _strict_entry(out, key, value)
    if out.get("type") == "object" or "properties" in out:
        _close_object(out)
    elif not any(k in out for k in _STRICT_TYPED):
        raise _NotStrict("untyped value")
    return out


def _strict_entry(out: dict[str, Any], key: str, value: Any) -> None:
    """Put one keyword of a schema into ``out`` in its strict form, or raise ``_NotStrict``."""
    if key in _STRICT_UNSUPPORTED:
        raise _NotStrict(key)
    if key in ("properties", "$defs"):
        out[key] = {name: _strictify(sub) for name, sub in value.items()}
    elif key == "items" and isinstance(value, list):
        raise _NotStrict("tuple items")
    elif key in ("items", "anyOf", "allOf", "not"):
        out[key] = _strictify(value)
    elif key == "oneOf":
        out["anyOf"] = _strictify(value)
    else:
        out[key] = value


def _close_object(out: dict[str, Any]) -> None:
    """Make an object schema strict: closed, with every property required; open objects cannot be."""
    extra = out.get("additionalProperties")
    if "properties" not in out or (extra is not None and extra is not False):
        raise _NotStrict("open object")
    out["type"] = "object"
    out["additionalProperties"] = False
    out["required"] = list(out["properties"])


_SCHEMA_CACHE: dict[type[BaseModel], OutputSchema] = {}


def output_schema(output_type: type[BaseModel]) -> OutputSchema:
    """The schema for ``output_type``: strict when every object in it is closed and typed.

    Strict mode needs every property required and no open objects, so optional fields stay
    nullable and fields with a non-null default become required. Types with an open
    ``dict[str, Any]`` (the plan's step inputs) are sent as a non-strict schema.
    """
    cached = _SCHEMA_CACHE.get(output_type)
    if cached is not None:
        return cached
    full = output_type.model_json_schema()
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", output_type.__name__)[:64] or "output"
    try:
        result = OutputSchema(name, _strictify(copy.deepcopy(full)), True, full)
    except _NotStrict:
        result = OutputSchema(name, full, False, full)
    _SCHEMA_CACHE[output_type] = result
    return result


# The name an agent's output schema is sent under (``response_format.json_schema.name``).
SHAPED_SCHEMA_NAME = "agent_output"


def shaped_output_schema(output_type: type[BaseModel], agent_schema: dict[str, Any]) -> OutputSchema:
    """The schema sent when ``output_type``'s text field must hold an object of an agent's output schema.

    Strict only when the agent's schema already requires every property (see ``shaped.requires_all``) and
    strict mode can express it; else sent as non-strict. Raises ``ProviderError(OUTPUT_SCHEMA_REFUSED)``
    for a schema too large or too deep to send.
    """
    check_output_schema(agent_schema)
    field = stream_field(output_type)
    if field is None:
        raise ProviderError(ErrorCode.INVALID_INPUT, f"{output_type.__name__} has no text field for an output schema")
    full = wire_schema(output_type, field, agent_schema)
    if requires_all(agent_schema):
        try:
            return OutputSchema(SHAPED_SCHEMA_NAME, _strictify(copy.deepcopy(full)), True, full)
        except _NotStrict:
            pass
    return OutputSchema(SHAPED_SCHEMA_NAME, full, False, full)


# Item counts a grammar may keep: small ones cost a few rules, and they stop a small model that repeats a list item
# (a plan's step) until max_tokens cuts it.
_GRAMMAR_MAX_ITEMS = 16


# String lengths a grammar may keep (one rule per character): they stop a small model that repeats itself inside a
# string (Gemma 3 270M wrote a plan step's title until max_tokens).
_GRAMMAR_MAX_LENGTH = 400


def grammar_safe(node: Any) -> Any:
    """The schema without length and pattern bounds, or large counts, for servers that compile it to a grammar.

    llama.cpp expands ``maxLength: 20000`` into 20,000 nested rules and dies on it; pydantic checks the
    bounds after the call anyway. Item counts up to ``_GRAMMAR_MAX_ITEMS`` and lengths up to ``_GRAMMAR_MAX_LENGTH``
    stay.
    """
    if isinstance(node, list):
        return [grammar_safe(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("minItems", "maxItems") and isinstance(value, int) and 0 <= value <= _GRAMMAR_MAX_ITEMS:
            out[key] = value
            continue
        if key == "maxLength" and isinstance(value, int) and 0 <= value <= _GRAMMAR_MAX_LENGTH:
            out[key] = value
            continue
        if key in _STRICT_DROP or key == "description":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: grammar_safe(sub) for name, sub in value.items()}
        else:
            out[key] = grammar_safe(value)
    return out


def _json_mode_instructions(schema: OutputSchema) -> str:
    return (
        "\n\nYour whole reply must be one JSON object, with no text around it, that conforms to this "
        f"JSON schema:\n{json.dumps(schema.full_schema, separators=(',', ':'))}"
    )


# A grammar-carried schema up to this size is shown in the prompt as well (the SQL draft's is 509 characters; a
# plan's, with one step shape per kind, about 6,600).
PROMPT_SCHEMA_MAX_CHARS = 1_000


def format_instructions(schema: OutputSchema, mode: WireMode, kind: EndpointKind, shaped: bool) -> str:
    """What the system message says about the output's shape, beyond the prompt file."""
    if mode == "json_mode":
        return _json_mode_instructions(schema)
    if shaped and kind == "openai_compatible" and mode in ("json_schema", "json_object_schema"):
        # OpenAI and Azure OpenAI show a json_schema response format to the model; OpenAI-compatible servers
        # (vLLM, Ollama, llama.cpp) only turn it into a grammar, so the model would never read the agent's
        # field names' meaning (descriptions): the schema goes into the prompt as well (it is bounded).
        return _json_mode_instructions(schema)
    if mode == "json_object_schema" and len(instructions := _json_mode_instructions(schema)) <= PROMPT_SCHEMA_MAX_CHARS:
        # A small schema costs little and tells the model where a field ends: without it Gemma 3 270M wrote a
        # SQL statement on until max_tokens inside the grammar's "sql" string.
        return instructions
    # Otherwise the schema is a grammar (json_object_schema) or the server's own structured output: it constrains
    # every token, and the prompt file says the reply's shape in words. Measured on Gemma 3 270M, the plan schema
    # alone was 1,650 of a planning prompt's 4,900 tokens.
    return ""


# Words of an error that blames the schema itself rather than the response format (OpenAI: "Invalid schema for
# response_format 'agent_output': In context=(...), ...").
_BAD_SCHEMA_WORDS = ("invalid schema", "invalid_json_schema", "invalid json schema", "schema is invalid")


def names_bad_schema(exc: openai.APIStatusError) -> bool:
    """Whether an error blames the schema that was sent."""
    code, message = error_detail(exc)
    text = f"{code} {message}".lower()
    return any(word in text for word in _BAD_SCHEMA_WORDS)


def schema_refused(exc: openai.APIStatusError) -> ProviderError:
    """OUTPUT_SCHEMA_REFUSED with the endpoint's reason."""
    _code, message = error_detail(exc)
    return ProviderError(
        ErrorCode.OUTPUT_SCHEMA_REFUSED,
        f"the LLM endpoint refused the output schema ({exc.status_code}): {message}"[:1500],
    )
