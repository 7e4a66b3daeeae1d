"""Host-level accelerations of the Durable Python SDK's replay path (behaviour-preserving).

- Timestamps: see ``devhost.durable.timeutil.install_fast_timestamp_parser`` (dateutil → fromisoformat).
- ``TaskOrchestrationExecutor.__init__`` builds a new ``namedtuple`` class on every orchestrator
  invocation (about 0.1 ms each, a large share of a short episode). The module's ``namedtuple``
  name is replaced with a memoised version: same typename and fields give the same class, whose
  instances behave identically.
"""

from __future__ import annotations

import collections
import functools
import importlib
from typing import Any

from devhost.durable.timeutil import install_fast_timestamp_parser

_installed = False


@functools.cache
def _cached_namedtuple(typename: str, field_names: tuple[str, ...]) -> Any:
    return collections.namedtuple(typename, field_names)  # noqa: PYI024 - mirrors the SDK's call


def cached_namedtuple(typename: str, field_names: Any, **kwargs: Any) -> Any:
    """``collections.namedtuple`` memoised for hashable, keyword-free calls."""
    if kwargs:
        return collections.namedtuple(typename, field_names, **kwargs)  # noqa: PYI024
    key = tuple(field_names.replace(",", " ").split()) if isinstance(field_names, str) else tuple(field_names)
    return _cached_namedtuple(typename, key)


def install_sdk_accelerations() -> None:
    """Install all SDK accelerations (idempotent)."""
    global _installed
    if _installed:
        return
    install_fast_timestamp_parser()
    executor = importlib.import_module("azure.durable_functions.models.TaskOrchestrationExecutor")
    if getattr(executor, "namedtuple", None) is collections.namedtuple:
        setattr(executor, "namedtuple", cached_namedtuple)  # noqa: B010 - module attribute patch
    _installed = True
