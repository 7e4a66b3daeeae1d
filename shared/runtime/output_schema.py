"""Whether an output schema from a definition may go to a model: its size, nesting and safety (pure checks).

The generate_response step and the LLM providers both refuse a schema here, before any model is asked.
"""

from __future__ import annotations

import json
from typing import Any

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.schema_safety import schema_problems

# What of an output schema may go into a prompt: its compact JSON, at most this many characters (about 4,000
# tokens; OpenAI's strict mode also caps a schema's total property-name and enum text near 15,000).
MAX_SCHEMA_CHARS = 16_000
# Nesting bound, checked before anything walks the schema recursively (a deep schema is small in characters).
MAX_SCHEMA_DEPTH = 32


def schema_chars(schema: dict[str, Any]) -> int:
    """The size of a schema as it goes into a prompt: its compact JSON."""
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


def _depth(node: Any) -> int:
    """Nesting depth of a JSON value, counted without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, level)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, level + 1) for child in children)
    return deepest


def check_output_schema(schema: Any) -> dict[str, Any]:
    """The schema, if it may go to a model; else ``ProviderError(OUTPUT_SCHEMA_REFUSED)`` saying why."""
    if not isinstance(schema, dict):
        raise ProviderError(ErrorCode.OUTPUT_SCHEMA_REFUSED, "the output schema is not a JSON object")
    size = schema_chars(schema)
    if size > MAX_SCHEMA_CHARS:
        raise ProviderError(
            ErrorCode.OUTPUT_SCHEMA_REFUSED,
            f"the output schema is {size} characters as compact JSON; at most {MAX_SCHEMA_CHARS} go to a model "
            "(shorten its descriptions or split the agent)",
        )
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ProviderError(
            ErrorCode.OUTPUT_SCHEMA_REFUSED,
            f"the output schema nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} go to a model",
        )
    problems = schema_problems(schema)
    if problems:  # a remote $ref, a pattern RE2 cannot run, ...: refused before any model is asked
        raise ProviderError(ErrorCode.OUTPUT_SCHEMA_REFUSED, f"the output schema cannot be used: {problems[0]}")
    return schema
