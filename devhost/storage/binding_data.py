"""Binding data and binding expressions: what ``{name}``, ``{rand-guid}`` and ``{DateTime}`` resolve to.

The trigger's binding data (``binding_data``) is what the host exposes: route and query values and JSON body
properties for HTTP, the blob path's ``{name}`` parts, a queue message's metadata and JSON properties, an
activity's ``instanceId`` and input properties. ``resolve_expression`` resolves a binding's path, queue or table
name or key against it, as the host does.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from devhost.functions.model import FunctionInfo

_TOKEN = re.compile(r"(\{\{|\}\}|\{[^{}]*\})")
_NET_DATE = re.compile(r"yyyy|yy|MM|dd|HH|hh|mm|ss|fff|tt")
_NET_TO_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "hh": "%I", "mm": "%M", "ss": "%S"}


class BindingError(Exception):
    """A binding cannot be resolved, read or written; the invocation fails with this message."""


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
