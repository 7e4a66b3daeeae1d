"""Storage input and output bindings (blob, queue, table) as the Functions host and the Python worker run them.

Each function's non-trigger bindings are planned once (``bindings_for``): a blob, queue or table binding whose
connection setting holds a connection string (Azurite's when devhost runs it, devhost/storage.py) is run; any
other binding is listed at load with the reason (``binding_notes``) and gets None (in) or a value sink whose value
is discarded (out), so the app still loads and runs.

Around one invocation (``run_bound``): the binding expressions of paths, queue and table names and keys are
resolved against the trigger's binding data (``binding_data``: route and query values and JSON body properties
for HTTP, the blob path's ``{name}`` parts, a queue message's metadata and JSON properties, an activity's
``instanceId`` and input properties; ``{rand-guid}`` and ``{DateTime}`` as the host resolves them); inputs are
read before the function runs; outputs are written only after it returned without raising (``$return`` when the
binding's name is ``$return``). Values are what the worker passes: a blob input is an ``InputStream``, or
``str``/``bytes`` when the parameter is annotated so (a missing blob gives None); a table input is the JSON text
of one entity (None when missing) or of a list; queue messages are Base64 text unless host.json
``extensions.queues.messageEncoding`` is ``none``, as the queue trigger reads them back.

This module plans the bindings and runs an invocation with them; ``binding_data`` holds the binding data and
expressions, ``binding_io`` the reads and writes of blobs, queues and tables.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from devhost.functions.model import FunctionInfo, LoadedApp
from devhost.storage.binding_data import binding_data
from devhost.storage.binding_io import (
    StorageBinding,
    blob_value,
    name_of,
    read_blob,
    read_table,
    send_messages,
    write_blob,
    write_entities,
)
from devhost.storage.connections import DEFAULT_CONNECTION, connection_problem

log = logging.getLogger("devhost.bindings")

STORAGE_TYPES = ("blob", "queue", "table")
# Bindings another part of the devhost runs (the trigger itself is skipped by name).
_HOST_RUN = {"durableclient", "http", "httptrigger", "activitytrigger", "orchestrationtrigger", "entitytrigger"}
_RESOURCE_KEY = {"blob": "path", "queue": "queueName", "table": "tableName"}
_BLOB_TYPES = "InputStream, str, bytes"
_SETTING_REF = re.compile(r"%([^%]+)%")


def is_out(binding: Mapping[str, Any]) -> bool:
    """Whether a binding's direction is out (``OUT``, ``out`` or 1)."""
    return name_of(binding.get("direction", "in")) in ("out", "1")


@dataclass(frozen=True)
class FunctionBindings:
    """What the devhost does with one function's bindings: the runnable ones, and a note per other one."""

    bound: tuple[StorageBinding, ...] = ()
    notes: tuple[str, ...] = ()


_EMPTY = FunctionBindings()
_plans: dict[int, tuple[FunctionInfo, FunctionBindings]] = {}


def bindings_for(fn: FunctionInfo, environ: Mapping[str, str] | None = None) -> FunctionBindings:
    """The function's plan (made on first use, with the settings as they are then)."""
    cached = _plans.get(id(fn))
    if cached is not None and cached[0] is fn:
        return cached[1]
    plan = plan_bindings(fn, os.environ if environ is None else environ)
    _plans[id(fn)] = (fn, plan)
    return plan


def binding_notes(app: LoadedApp | Iterable[FunctionInfo], environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per binding the devhost does not run, naming the function and the reason."""
    functions = app.functions if isinstance(app, LoadedApp) else app
    return [note for fn in functions for note in bindings_for(fn, environ).notes]


def plan_bindings(fn: FunctionInfo, environ: Mapping[str, str]) -> FunctionBindings:
    """Plan each non-trigger binding of ``fn``: run it, or say why not."""
    hints = _type_hints(fn)
    bound: list[StorageBinding] = []
    notes: list[str] = []
    trigger_name = str(fn.trigger.get("name", ""))
    for binding in fn.bindings:
        name = str(binding.get("name", ""))
        kind = str(binding.get("type", "")).lower()
        if name == trigger_name and kind == str(fn.trigger.get("type", "")).lower():
            continue
        if kind in _HOST_RUN:
            continue
        out = is_out(binding)
        if kind not in STORAGE_TYPES:
            effect = "its output value is discarded" if out else "the function receives None for it"
            notes.append(
                f"Function '{fn.name}': binding '{name}' of type {binding.get('type')} is not implemented by the "
                f"devhost; {effect}."
            )
            continue
        planned = _plan_storage(fn, binding, kind, out, hints.get(name), environ)
        if isinstance(planned, str):
            effect = "its output value is discarded" if out else "the function receives None for it"
            notes.append(f"Function '{fn.name}': {kind} binding '{name}' is not run ({planned}); {effect}.")
        else:
            bound.append(planned)
    return FunctionBindings(tuple(bound), tuple(notes)) if bound or notes else _EMPTY


def _plan_storage(
    fn: FunctionInfo, binding: Mapping[str, Any], kind: str, out: bool, hint: Any, environ: Mapping[str, str]
) -> StorageBinding | str:
    setting = str(binding.get("connection") or DEFAULT_CONNECTION)
    problem = connection_problem(setting, environ)
    if problem is not None:
        return problem
    settings: dict[str, Any] = {}
    for key, value in binding.items():
        if isinstance(value, str) and "%" in value:
            resolved = _app_setting_refs(value, environ)
            if resolved is None:
                return f"{key} {value!r} names an unset app setting"
            value = resolved
        settings[key] = value
    if not settings.get(_RESOURCE_KEY[kind]):
        return f"{_RESOURCE_KEY[kind]} is empty"
    if kind == "blob" and "/" not in str(settings["path"]).strip("/"):
        return f"the path {settings['path']!r} must be container/blob"
    if kind == "queue" and not out:
        return "a queue binding can only be an output"
    annotation = typing.get_args(hint)[0] if out and typing.get_args(hint) else hint
    if kind == "blob" and not out and not _passable_blob_type(annotation):
        shown = getattr(annotation, "__name__", repr(annotation))
        return f"the parameter type {shown} needs an SDK-type binding extension (devhost passes {_BLOB_TYPES})"
    return StorageBinding(str(binding.get("name")), kind, out, environ[setting], settings, annotation)


def _passable_blob_type(annotation: Any) -> bool:
    """Whether the worker passes a blob input as this type without an SDK-type extension (BlobClient, ...)."""
    import azure.functions as func  # noqa: PLC0415

    if annotation is None or annotation in (str, bytes):
        return True
    return isinstance(annotation, type) and issubclass(annotation, func.InputStream)


def _app_setting_refs(value: str, environ: Mapping[str, str]) -> str | None:
    """Resolve ``%NAME%`` app-setting references, as the host does at load; None when one is unset or empty."""
    missing = False

    def repl(match: re.Match[str]) -> str:
        nonlocal missing
        found = environ.get(match.group(1), "")
        missing = missing or not found
        return found

    text = _SETTING_REF.sub(repl, value)
    return None if missing or not text else text


def _type_hints(fn: FunctionInfo) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn.user_function)
    except Exception:  # noqa: BLE001 - unresolvable annotations count as none, as the worker's fallback
        return {}


# ----- binding data and expressions ------------------------------------------------------------------------


class OutValue:
    """``azure.functions.Out`` as the worker passes it: holds the value an output binding writes afterwards."""

    def __init__(self) -> None:
        self._value: Any = None

    def set(self, val: Any) -> None:
        """Store the value."""
        self._value = val

    def get(self) -> Any:
        """The stored value."""
        return self._value


def add_binding_arguments(fn: FunctionInfo, kwargs: dict[str, Any], params: set[str] | None = None) -> None:
    """Give each other binding's parameter its starting argument: an ``OutValue`` for outputs, else None.

    Inputs are read just before the call (run_bound); bindings the devhost does not run keep None or a sink
    whose value is discarded, so the function still runs. With ``params``, only parameters the function has.
    """
    for binding in fn.bindings:
        name = str(binding.get("name", ""))
        if name and name != "$return" and name not in kwargs and (params is None or name in params):
            kwargs[name] = OutValue() if is_out(binding) else None


# ----- running one invocation ------------------------------------------------------------------------------


async def run_bound(
    fn: FunctionInfo,
    kwargs: dict[str, Any],
    call: Callable[[], Awaitable[Any]],
    host_json: Mapping[str, Any],
    trigger_value: Any,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """Read the inputs into ``kwargs``, run ``call``, then write the outputs (only when it returned).

    Binding expressions resolve against the binding data of ``trigger_value`` and ``metadata`` (built only for a
    function with storage bindings, so the hot paths pay nothing); ``host_json`` is the app's host.json (its
    queue message encoding applies to queue outputs).
    """
    plan = bindings_for(fn)
    if not plan.bound:
        return await call()
    data = binding_data(fn, trigger_value, metadata)
    await asyncio.to_thread(read_inputs, plan, kwargs, data)
    result = await call()
    await asyncio.to_thread(write_outputs, plan, kwargs, result, data, host_json)
    return result


def read_inputs(plan: FunctionBindings, kwargs: dict[str, Any], data: Mapping[str, Any]) -> None:
    """Fill the parameters of the input bindings (blob and table)."""
    for binding in plan.bound:
        if binding.out:
            continue
        if binding.kind == "blob":
            kwargs[binding.name] = blob_value(binding, read_blob(binding, data))
        else:
            kwargs[binding.name] = read_table(binding, data)


def write_outputs(
    plan: FunctionBindings,
    kwargs: Mapping[str, Any],
    result: Any,
    data: Mapping[str, Any],
    host_json: Mapping[str, Any],
) -> None:
    """Write the values the function set (or returned, for ``$return``) to their blobs, queues and tables."""
    for binding in plan.bound:
        if not binding.out:
            continue
        if binding.name == "$return":
            value = result
        else:
            getter = getattr(kwargs.get(binding.name), "get", None)
            value = getter() if callable(getter) else None
        if value is None:
            continue  # never set: the host writes nothing
        if binding.kind == "blob":
            write_blob(binding, value, data)
        elif binding.kind == "queue":
            send_messages(binding, value, data, dict(host_json))
        else:
            write_entities(binding, value, data)
