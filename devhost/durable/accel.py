"""Host-level accelerations of the Durable Python SDK's replay path (behaviour-preserving).

- Timestamps: see ``devhost.durable.timeutil.install_fast_timestamp_parser`` (dateutil → fromisoformat).
- ``TaskOrchestrationExecutor.__init__`` builds a new ``namedtuple`` class on every orchestrator
  invocation (about 0.1 ms each, a large share of a short episode). The module's ``namedtuple``
  name is replaced with a memoised version: same typename and fields give the same class, whose
  instances behave identically.
- ``DurableOrchestrationContext.from_json`` JSON-decodes the whole history on every episode. Inside
  ``predecoded(text, value)`` a call with that very string object takes ``value`` (what
  ``json.loads(text)`` gives, built by ``devhost.durable.decoded`` from a cached prefix) instead;
  any other string is decoded as before.
- ``azure.functions``' Durable JSON codec reads ``AZURE_FUNCTIONS_DURABLE_STRICT_TYPING`` through
  ``os.environ.get`` on every payload it encodes or decodes (each task result, on every replay). The
  replacement reads the same live variable from ``os.environ``'s own dict (POSIX), a plain dict lookup.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import json
import os
from collections.abc import Iterator
from typing import Any

from devhost.durable.timeutil import install_fast_timestamp_parser

_installed = False
# (context text, its decoded value) while an episode runs, else None. Only the dispatcher's thread
# sets it; from_json on other threads never matches the text object, so it decodes as before.
_predecoded: tuple[str, dict[str, Any]] | None = None


@functools.cache
def _cached_namedtuple(typename: str, field_names: tuple[str, ...]) -> Any:
    return collections.namedtuple(typename, field_names)  # noqa: PYI024 - mirrors the SDK's call


def cached_namedtuple(typename: str, field_names: Any, **kwargs: Any) -> Any:
    """``collections.namedtuple`` memoised for hashable, keyword-free calls."""
    if kwargs:
        return collections.namedtuple(typename, field_names, **kwargs)  # noqa: PYI024
    key = tuple(field_names.replace(",", " ").split()) if isinstance(field_names, str) else tuple(field_names)
    return _cached_namedtuple(typename, key)


@contextlib.contextmanager
def predecoded(text: str, value: dict[str, Any]) -> Iterator[None]:
    """While inside, ``from_json(text)`` (that same object) uses ``value`` instead of decoding ``text``."""
    global _predecoded
    _predecoded = (text, value)
    try:
        yield
    finally:
        _predecoded = None


def _from_json(cls: Any, json_string: str) -> Any:
    """The SDK's ``from_json`` (``cls(**json.loads(json_string))``), taking a predecoded value when offered."""
    global _predecoded
    offered = _predecoded
    if offered is not None and offered[0] is json_string:
        _predecoded = None  # used once: the SDK gets a dict no one else holds
        return cls(**offered[1])
    return cls(**json.loads(json_string))


def _fast_strict_mode(codec: Any) -> Any:
    """``codec._is_strict_mode`` reading the variable from ``os.environ._data``; None where that is not POSIX's."""
    if os.name != "posix" or not isinstance(getattr(os.environ, "_data", None), dict):
        return None
    original = codec._is_strict_mode
    key = os.environ.encodekey(codec._STRICT_ENV_VAR)
    truthy = codec._TRUTHY

    def is_strict_mode() -> bool:
        environ = os.environ
        try:
            raw = environ._data.get(key)  # type: ignore[attr-defined]
        except AttributeError:  # os.environ replaced by something else (a test's patch)
            return bool(original())
        return raw is not None and environ.decodevalue(raw).strip().lower() in truthy

    return is_strict_mode


def install_sdk_accelerations() -> None:
    """Install all SDK accelerations (idempotent)."""
    global _installed
    if _installed:
        return
    install_fast_timestamp_parser()
    executor = importlib.import_module("azure.durable_functions.models.TaskOrchestrationExecutor")
    if getattr(executor, "namedtuple", None) is collections.namedtuple:
        setattr(executor, "namedtuple", cached_namedtuple)  # noqa: B010 - module attribute patch
    context = importlib.import_module("azure.durable_functions.models.DurableOrchestrationContext")
    context_cls = context.DurableOrchestrationContext
    context_cls.from_json = classmethod(_from_json)
    codec = importlib.import_module("azure.functions._durable_functions")
    fast = _fast_strict_mode(codec) if hasattr(codec, "_is_strict_mode") else None
    if fast is not None:
        setattr(codec, "_is_strict_mode", fast)  # noqa: B010 - module attribute patch
    _installed = True
