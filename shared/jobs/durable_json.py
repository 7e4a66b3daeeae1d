"""Durable history payloads as values: the one decoder the domain, the ledger and forks share."""

from __future__ import annotations

import json
from typing import Any


def decode(value: Any) -> Any:
    """Undo the JSON-in-JSON encodings of Durable history inputs and results."""
    for _ in range(4):
        if not isinstance(value, str):
            return value
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return value
