"""Executor registry, keyed by executor_type.

Adding an executor type means one module in this package that calls ``register`` on import; the
activities blueprint registers one activity per entry and the planner learns its description, so
nothing else has to change.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.contracts import ExecutorInput, ExecutorOutput

if TYPE_CHECKING:
    from shared.clients import Clients

ExecutorFn = Callable[[ExecutorInput, "Clients"], ExecutorOutput]


@dataclass(frozen=True)
class ExecutorSpec:
    """One registered executor."""

    executor_type: str
    description: str
    run: ExecutorFn
    uses_llm: bool
    # Internal executors (planner, supervisor) are not offered to the planner as step kinds.
    internal: bool = False


_REGISTRY: dict[str, ExecutorSpec] = {}
_LOADED = False
_LOCK = threading.Lock()
# Modules of this package that are infrastructure, not executors.
_NOT_EXECUTORS = {"runner", "common"}


def register(
    executor_type: str, *, description: str, uses_llm: bool, internal: bool = False
) -> Callable[[ExecutorFn], ExecutorFn]:
    """Decorator: register a function as the executor for ``executor_type``."""

    def decorate(fn: ExecutorFn) -> ExecutorFn:
        if executor_type in _REGISTRY and _REGISTRY[executor_type].run is not fn:
            raise ValueError(f"executor type {executor_type!r} is registered twice")
        _REGISTRY[executor_type] = ExecutorSpec(executor_type, description, fn, uses_llm, internal)
        return fn

    return decorate


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        for module in pkgutil.iter_modules(__path__):
            if module.name not in _NOT_EXECUTORS and not module.name.startswith("_"):
                importlib.import_module(f"{__name__}.{module.name}")
        _LOADED = True


def executor_types() -> list[str]:
    """All registered executor types, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def step_kinds() -> dict[str, str]:
    """Executor types a plan may use as steps, with their descriptions."""
    _load_all()
    return {k: v.description for k, v in sorted(_REGISTRY.items()) if not v.internal}


def get_executor(executor_type: str) -> ExecutorSpec | None:
    """The executor registered for a type, or None."""
    _load_all()
    return _REGISTRY.get(executor_type)
