"""Reading and writing the storage a binding names: blobs, queue messages and table entities (Azure SDK clients)."""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devhost.storage.binding_data import BindingError, resolve_expression
from devhost.storage.connections import queue_options

log = logging.getLogger("devhost.bindings")
_sdk_log = logging.getLogger("devhost.bindings.sdk")
_sdk_log.setLevel(logging.WARNING)


def name_of(value: Any) -> str:
    """Lower-case text of a binding field that may be an enum of azure.functions (``DataType.STRING``)."""
    return (value.name if isinstance(value, enum.Enum) else str(value)).lower()


@dataclass(frozen=True)
class StorageBinding:
    """One blob, queue or table binding the devhost runs."""

    name: str
    kind: str  # blob | queue | table
    out: bool
    connection_string: str
    settings: dict[str, Any]  # the binding's fields, %SETTING% references resolved
    annotation: Any  # the parameter's type (the Out[...] argument for outputs), or None


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


def read_blob(binding: StorageBinding, data: Mapping[str, Any]) -> bytes | None:
    """The blob the binding's resolved path names, or None when it does not exist."""
    from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

    container, blob = _blob_client(binding, data)
    try:
        return bytes(container.download_blob(blob).readall())
    except ResourceNotFoundError:  # no container or no blob: the host binds null
        return None


def blob_value(binding: StorageBinding, content: bytes | None) -> Any:
    """What the worker passes for a blob's content: by the annotation (generic str/bytes) or an InputStream."""
    if content is None:
        return None
    if binding.annotation in (str, bytes):
        data_type = name_of(binding.settings.get("dataType", "undefined"))
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


def write_blob(binding: StorageBinding, value: Any, data: Mapping[str, Any]) -> None:
    """Write ``value`` to the blob the binding's resolved path names (creating its container)."""
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


def send_messages(binding: StorageBinding, value: Any, data: Mapping[str, Any], host_json: dict[str, Any]) -> None:
    """Send ``value`` (one message or a list) to the binding's queue, encoded as host.json says."""
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


def read_table(binding: StorageBinding, data: Mapping[str, Any]) -> str | None:
    """The JSON text of the entity (or the entities) the binding names; None when the entity is missing."""
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


def write_entities(binding: StorageBinding, value: Any, data: Mapping[str, Any]) -> None:
    """Upsert (replace) the entities ``value`` holds into the binding's table (creating it the first time)."""
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
