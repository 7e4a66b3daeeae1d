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
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import enum
import json
import logging
import os
import re
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from devhost.functions.model import FunctionInfo, LoadedApp
from devhost.storage.connections import DEFAULT_CONNECTION, connection_problem, queue_options

log = logging.getLogger("devhost.bindings")
_sdk_log = logging.getLogger("devhost.bindings.sdk")
_sdk_log.setLevel(logging.WARNING)

STORAGE_TYPES = ("blob", "queue", "table")
# Bindings another part of the devhost runs (the trigger itself is skipped by name).
_HOST_RUN = {"durableclient", "http", "httptrigger", "activitytrigger", "orchestrationtrigger", "entitytrigger"}
_RESOURCE_KEY = {"blob": "path", "queue": "queueName", "table": "tableName"}
_BLOB_TYPES = "InputStream, str, bytes"
_SETTING_REF = re.compile(r"%([^%]+)%")
_TOKEN = re.compile(r"(\{\{|\}\}|\{[^{}]*\})")
_NET_DATE = re.compile(r"yyyy|yy|MM|dd|HH|hh|mm|ss|fff|tt")
_NET_TO_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "hh": "%I", "mm": "%M", "ss": "%S"}


class BindingError(Exception):
    """A binding cannot be resolved, read or written; the invocation fails with this message."""


def _name_of(value: Any) -> str:
    """Lower-case text of a binding field that may be an enum of azure.functions (``DataType.STRING``)."""
    return (value.name if isinstance(value, enum.Enum) else str(value)).lower()


def is_out(binding: Mapping[str, Any]) -> bool:
    """Whether a binding's direction is out (``OUT``, ``out`` or 1)."""
    return _name_of(binding.get("direction", "in")) in ("out", "1")


@dataclass(frozen=True)
class StorageBinding:
    """One blob, queue or table binding the devhost runs."""

    name: str
    kind: str  # blob | queue | table
    out: bool
    connection_string: str
    settings: dict[str, Any]  # the binding's fields, %SETTING% references resolved
    annotation: Any  # the parameter's type (the Out[...] argument for outputs), or None


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


def binding_data(fn: FunctionInfo, trigger_value: Any, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The trigger's binding data, keyed case-insensitively (lower-case keys), as the host exposes it."""
    data: dict[str, Any] = {}
    builder = _DATA_BUILDERS.get(fn.kind)
    if builder is not None:
        builder(fn, trigger_value, data)
    for key, value in (extra or {}).items():
        data[key.lower()] = value
    if fn.kind == "blob":
        data.update(_blob_captures(str(fn.trigger.get("path", "")), data.get("blobtrigger")))
    return data


def _merge_json(data: dict[str, Any], text: Any) -> None:
    """Add a JSON object's top-level properties (the host does so for JSON payloads)."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except ValueError:
            return
    if isinstance(text, dict):
        for key, value in text.items():
            data.setdefault(str(key).lower(), value)


def _http_data(fn: FunctionInfo, req: Any, data: dict[str, Any]) -> None:
    for key, value in dict(getattr(req, "route_params", None) or {}).items():
        data[key.lower()] = value
    params = dict(getattr(req, "params", None) or {})
    data["query"] = {key.lower(): value for key, value in params.items()}
    data["headers"] = {key.lower(): value for key, value in dict(getattr(req, "headers", None) or {}).items()}
    get_body = getattr(req, "get_body", None)
    if callable(get_body):
        _merge_json(data, get_body())
    for key, value in params.items():
        data.setdefault(key.lower(), value)


def _queue_data(fn: FunctionInfo, msg: Any, data: dict[str, Any]) -> None:
    body = msg.get_body() if hasattr(msg, "get_body") else msg
    text = body.decode("utf-8", "replace") if isinstance(body, bytes | bytearray) else str(body)
    data["queuetrigger"] = text
    for key, attr in (("id", "id"), ("dequeuecount", "dequeue_count"), ("poppreceipt", "pop_receipt")):
        value = getattr(msg, attr, None)
        if value is not None:
            data[key] = value
    _merge_json(data, text)


def _blob_data(fn: FunctionInfo, blob: Any, data: dict[str, Any]) -> None:
    for key, attr in (("blobtrigger", "name"), ("uri", "uri")):
        value = getattr(blob, attr, None)
        if value:
            data[key] = value


def _activity_data(fn: FunctionInfo, value: Any, data: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            data.setdefault(str(key).lower(), item)


_DATA_BUILDERS: dict[str, Callable[[FunctionInfo, Any, dict[str, Any]], None]] = {
    "http": _http_data,
    "queue": _queue_data,
    "blob": _blob_data,
    "activity": _activity_data,
}


def _blob_captures(pattern: str, blob_path: Any) -> dict[str, str]:
    """The ``{name}`` parts of a blob trigger's path for one blob (``container/name``)."""
    if not isinstance(blob_path, str) or not pattern:
        return {}
    regex, names = [], []
    for token in _TOKEN.split(pattern.strip("/")):
        if token in ("{{", "}}"):
            regex.append(re.escape(token[0]))
        elif token.startswith("{") and token.endswith("}"):
            names.append(token[1:-1].strip().lower())
            regex.append(f"(?P<g{len(names) - 1}>.+?)")
        else:
            regex.append(re.escape(token))
    match = re.fullmatch("".join(regex), blob_path.strip("/"))
    if match is None:
        return {}
    return {name: match.group(f"g{index}") for index, name in enumerate(names)}


def resolve_expression(
    template: str, data: Mapping[str, Any], now: dt.datetime | None = None, escape: Callable[[str], str] | None = None
) -> str:
    """Replace ``{name}`` parts (binding data, ``{rand-guid}``, ``{DateTime}``); ``{{``/``}}`` are braces.

    ``escape`` applies to the values put in, never to the template (a table filter's quoting).
    Raises BindingError naming the parameter when the data has no primitive value for it, as the host does.
    """
    out = []
    for token in _TOKEN.split(template):
        if token in ("{{", "}}"):
            out.append(token[0])
        elif token.startswith("{") and token.endswith("}"):
            value = _resolve_one(token[1:-1].strip(), data, now)
            out.append(escape(value) if escape is not None else value)
        else:
            out.append(token)
    return "".join(out)


def _resolve_one(expression: str, data: Mapping[str, Any], now: dt.datetime | None) -> str:
    name, _, fmt = expression.partition(":")
    lowered = name.lower()
    if lowered == "rand-guid":
        return _guid_text(uuid.uuid4(), fmt)
    if lowered == "datetime" and "datetime" not in data:  # binding data named DateTime wins, as in the host
        return _date_text(now or dt.datetime.now(dt.UTC), fmt)
    value = _lookup(data, expression)
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str | int | float):
        return str(value)
    raise BindingError(f"No value for named parameter '{expression}'.")


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = next((item for key, item in value.items() if str(key).lower() == part.lower()), None)
    return value


def _guid_text(value: uuid.UUID, fmt: str) -> str:
    text = str(value)
    return {"N": value.hex, "B": "{" + text + "}", "P": "(" + text + ")"}.get(fmt.upper(), text)


def _date_text(moment: dt.datetime, fmt: str) -> str:
    if not fmt:
        return moment.strftime("%Y-%m-%dT%H-%M-%SZ")  # the host's default: 2018-02-16T17-59-55Z
    return _NET_DATE.sub(lambda m: _net_token(moment, m.group(0)), fmt)


def _net_token(moment: dt.datetime, token: str) -> str:
    if token == "fff":
        return f"{moment.microsecond // 1000:03d}"
    if token == "tt":
        return moment.strftime("%p")
    return moment.strftime(_NET_TO_STRFTIME[token])


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
            kwargs[binding.name] = _blob_value(binding, _read_blob(binding, data))
        else:
            kwargs[binding.name] = _read_table(binding, data)


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
            _write_blob(binding, value, data)
        elif binding.kind == "queue":
            _send_messages(binding, value, data, dict(host_json))
        else:
            _write_entities(binding, value, data)


# ----- blobs -----------------------------------------------------------------------------------------------


def _client_kwargs() -> dict[str, Any]:
    return {"logger": _sdk_log, "retry_total": 2}


def _blob_client(binding: StorageBinding, data: Mapping[str, Any]) -> Any:
    """The container client of the binding's resolved path, and the blob's name in it."""
    from azure.storage.blob import ContainerClient  # noqa: PLC0415

    path = resolve_expression(str(binding.settings["path"]), data).strip("/")
    container, _, blob = path.partition("/")
    if not container or not blob:
        raise BindingError(f"the blob path '{path}' of binding '{binding.name}' must be container/blob")
    client = ContainerClient.from_connection_string(binding.connection_string, container, **_client_kwargs())
    return client, blob


def _read_blob(binding: StorageBinding, data: Mapping[str, Any]) -> bytes | None:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

    container, blob = _blob_client(binding, data)
    try:
        return bytes(container.download_blob(blob).readall())
    except ResourceNotFoundError:  # no container or no blob: the host binds null
        return None


def _blob_value(binding: StorageBinding, content: bytes | None) -> Any:
    """What the worker passes for a blob's content: by the annotation (generic str/bytes) or an InputStream."""
    if content is None:
        return None
    if binding.annotation in (str, bytes):
        data_type = _name_of(binding.settings.get("dataType", "undefined"))
        wants_text = data_type == "string" or (data_type != "binary" and binding.annotation is str)
        return content.decode("utf-8") if wants_text else content
    from azure.functions.blob import BlobConverter  # noqa: PLC0415
    from azure.functions.meta import Datum  # noqa: PLC0415

    return BlobConverter.decode(Datum(content, "bytes"), trigger_metadata=None)


def _blob_bytes(binding: StorageBinding, value: Any) -> bytes:
    if callable(getattr(value, "read", None)):
        value = value.read()
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, dict | list):
        return json.dumps(value).encode("utf-8")
    raise BindingError(f"the blob output '{binding.name}' cannot write a {type(value).__name__} (str, bytes, a stream)")


def _write_blob(binding: StorageBinding, value: Any, data: Mapping[str, Any]) -> None:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

    content = _blob_bytes(binding, value)
    container, blob = _blob_client(binding, data)
    try:
        container.upload_blob(blob, content, overwrite=True)
    except ResourceNotFoundError:  # the host creates the container the first time
        _create(container.create_container)
        container.upload_blob(blob, content, overwrite=True)


def _create(create: Callable[[], Any]) -> None:
    from azure.core.exceptions import ResourceExistsError  # noqa: PLC0415

    try:
        create()
    except ResourceExistsError:
        pass


# ----- queues ----------------------------------------------------------------------------------------------


def _message_texts(binding: StorageBinding, value: Any) -> list[bytes]:
    """The messages one output value stands for (a list or tuple is one message per item)."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item.encode("utf-8"))
        elif isinstance(item, bytes | bytearray):
            out.append(bytes(item))
        elif callable(getattr(item, "get_body", None)):  # a QueueMessage: its body
            out.append(bytes(item.get_body()))
        elif isinstance(item, dict | int | float | bool):
            out.append(json.dumps(item).encode("utf-8"))
        else:
            raise BindingError(f"the queue output '{binding.name}' cannot send a {type(item).__name__}")
    return out


def _send_messages(binding: StorageBinding, value: Any, data: Mapping[str, Any], host_json: dict[str, Any]) -> None:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415
    from azure.storage.queue import QueueClient  # noqa: PLC0415

    options = queue_options(host_json)
    bodies = _message_texts(binding, value)
    name = resolve_expression(str(binding.settings["queueName"]), data).lower()
    client = QueueClient.from_connection_string(binding.connection_string, name, **_client_kwargs())
    for body in bodies:
        text = base64.b64encode(body).decode("ascii") if options.base64 else body.decode("utf-8")
        try:
            client.send_message(text)
        except ResourceNotFoundError:  # the host creates the queue the first time
            _create(client.create_queue)
            client.send_message(text)


# ----- tables ----------------------------------------------------------------------------------------------


def _table_client(binding: StorageBinding, data: Mapping[str, Any]) -> Any:
    from azure.data.tables import TableClient  # noqa: PLC0415

    name = resolve_expression(str(binding.settings["tableName"]), data)
    return TableClient.from_connection_string(binding.connection_string, name, **_client_kwargs())


def _setting(binding: StorageBinding, key: str, data: Mapping[str, Any]) -> str | None:
    value = binding.settings.get(key)
    return None if value in (None, "") else resolve_expression(str(value), data)


def _odata_quote(value: str) -> str:
    """A value inside an OData string literal: single quotes doubled."""
    return value.replace("'", "''")


def _entity_json(entity: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    metadata = getattr(entity, "metadata", None) or {}
    for key, value in dict(entity).items():
        out[key] = _json_value(value)
    if metadata.get("timestamp") is not None:
        out["Timestamp"] = _json_value(metadata["timestamp"])
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    inner = getattr(value, "value", None)
    if inner is not None and not isinstance(value, str | int | float | bool):
        return _json_value(inner)
    return value


def _read_table(binding: StorageBinding, data: Mapping[str, Any]) -> str | None:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

    client = _table_client(binding, data)
    partition, row = _setting(binding, "partitionKey", data), _setting(binding, "rowKey", data)
    if row is not None:
        if partition is None:
            raise BindingError(f"the table input '{binding.name}' has a rowKey but no partitionKey")
        try:
            return json.dumps(_entity_json(client.get_entity(partition, row)))
        except ResourceNotFoundError:  # no table or no entity: the host binds null
            return None
    return json.dumps(_query(binding, client, partition, data))


def _query(binding: StorageBinding, client: Any, partition: str | None, data: Mapping[str, Any]) -> list[Any]:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

    clauses = []
    if partition is not None:
        clauses.append("PartitionKey eq '" + partition.replace("'", "''") + "'")
    raw_filter = binding.settings.get("filter")
    # As the host's OData filter policy: a value put into the filter is quoted text, it cannot end the string.
    user_filter = resolve_expression(str(raw_filter), data, escape=_odata_quote) if raw_filter else None
    if user_filter:
        clauses.append(f"({user_filter})" if clauses else user_filter)
    take = binding.settings.get("take")
    limit = int(take) if isinstance(take, int | str) and str(take).isdigit() and int(take) > 0 else None
    rows: list[Any] = []
    try:
        entities = client.query_entities(" and ".join(clauses)) if clauses else client.list_entities()
        for entity in entities:
            rows.append(_entity_json(entity))
            if limit is not None and len(rows) >= limit:
                break
    except ResourceNotFoundError:
        return []
    return rows


def _entities(binding: StorageBinding, value: Any, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BindingError(f"the table output '{binding.name}' got text that is not JSON: {exc}") from None
    items = value if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise BindingError(f"the table output '{binding.name}' takes JSON objects, got {type(item).__name__}")
        entity = dict(item)
        for key in ("PartitionKey", "RowKey"):
            default = _setting(binding, key[0].lower() + key[1:], data)
            if entity.get(key) in (None, "") and default is not None:
                entity[key] = default
            if entity.get(key) in (None, ""):
                raise BindingError(f"the table output '{binding.name}': an entity has no {key}")
            entity[key] = str(entity[key])
        out.append(entity)
    return out


def _write_entities(binding: StorageBinding, value: Any, data: Mapping[str, Any]) -> None:
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415
    from azure.data.tables import UpdateMode  # noqa: PLC0415

    entities = _entities(binding, value, data)
    client = _table_client(binding, data)
    for entity in entities:
        try:
            client.upsert_entity(entity, mode=UpdateMode.REPLACE)
        except ResourceNotFoundError:  # the host creates the table the first time
            _create(client.create_table)
            client.upsert_entity(entity, mode=UpdateMode.REPLACE)
