"""Queue and blob triggers: run ``@app.queue_trigger`` and ``@app.blob_trigger`` functions against storage.

The connection a trigger names (``connection``, default ``AzureWebJobsStorage``) must hold a connection
string: the development account's when devhost runs Azurite (devhost/storage.py), or a real account's.
A function devhost cannot run is listed with the reason (identity-based connection, EventGrid source, a
parameter type the worker would bind through an SDK extension) and never called.

Queues, as the host's queue listener: poll with a back-off from 100 ms to ``maxPollingInterval``; take up
to ``batchSize`` messages at once, invisible for 10 minutes while they run; a success deletes the message;
a failure makes it visible again after ``visibilityTimeout``; once a message has been dequeued
``maxDequeueCount`` times (5) and fails again it moves to ``<queue>-poison``. Messages are Base64 text
unless ``messageEncoding`` is ``none`` (host.json ``extensions.queues``). The lease is not renewed: a run
longer than 10 minutes may see its message delivered twice.

Blobs, as the host's polling blob listener: each blob version (ETag) under the trigger's path fires once,
existing blobs included; a receipt blob in ``azure-webjobs-hosts`` (``blobreceipts/<host id>/<function
id>/<etag>/<container>/<blob>``) records it, so a restart on the same data does not fire it again. A failed
run is tried again up to 5 times, then a message for the blob goes to ``webjobs-blobtrigger-poison``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import json
import logging
import re
import typing
from dataclasses import dataclass
from typing import Any

from devhost.functions.loader import _resolve_env_refs
from devhost.functions.model import FunctionInfo
from devhost.functions.triggers import Host, TriggerLoops
from devhost.storage.connections import DEFAULT_CONNECTION, QueueOptions, connection_problem, queue_options

log = logging.getLogger("devhost.storage")
# The SDK logs every request at INFO; the listeners' polling is not the app's traffic.
_sdk_log = logging.getLogger("devhost.storage.sdk")
_sdk_log.setLevel(logging.WARNING)

LEASE_S = 600  # how long a running message stays invisible (the host's default)
BLOB_MAX_ATTEMPTS = 5
BLOB_POISON_QUEUE = "webjobs-blobtrigger-poison"
RECEIPTS_CONTAINER = "azure-webjobs-hosts"


# ----- what each function gets -----------------------------------------------------------------------------

_PASSABLE = {"queue": ("QueueMessage", "str", "bytes"), "blob": ("InputStream", "str", "bytes")}


def trigger_parameter_type(fn: FunctionInfo) -> str:
    """How the trigger parameter is annotated: ``QueueMessage``/``InputStream`` (also when unannotated),
    ``str``, ``bytes``, or the annotation's name when the worker would need an SDK-type extension."""
    import azure.functions as func  # noqa: PLC0415 - keep the devhost importable without side effects

    name = str(fn.trigger.get("name", ""))
    try:
        annotation: Any = typing.get_type_hints(fn.user_function).get(name, inspect.Parameter.empty)
    except Exception:  # unresolvable string annotations: fall back to the text
        annotation = inspect.signature(fn.user_function).parameters.get(name, None)
        annotation = getattr(annotation, "annotation", inspect.Parameter.empty)
    default = "QueueMessage" if fn.kind == "queue" else "InputStream"
    if annotation is inspect.Parameter.empty or annotation is None:
        return default
    if annotation in (str, bytes):
        return str(annotation.__name__)
    if inspect.isclass(annotation) and issubclass(annotation, func.QueueMessage | func.InputStream):
        return default
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return str(text).rsplit(".", 1)[-1]


@dataclass(frozen=True)
class StorageTarget:
    """One storage-triggered function the devhost runs: what it listens on, with which connection."""

    fn: FunctionInfo
    connection: str
    connection_string: str
    resource: str  # the queue name, or the blob path pattern (container/pattern)
    param_type: str


def plan_function(fn: FunctionInfo, environ: typing.Mapping[str, str]) -> StorageTarget | str:
    """The target a queue or blob function listens on, or why the devhost does not run it."""
    setting = str(fn.trigger.get("connection") or DEFAULT_CONNECTION)
    resource_key = "queueName" if fn.kind == "queue" else "path"
    resource = _resolve_env_refs(fn.trigger.get(resource_key))
    param_type = trigger_parameter_type(fn)
    problem = _trigger_problem(fn, resource_key, resource, param_type) or connection_problem(setting, environ)
    if problem is not None or resource is None:
        return f"not run: {problem}"
    return StorageTarget(fn, setting, environ[setting], resource.strip("/"), param_type)


def _trigger_problem(fn: FunctionInfo, resource_key: str, resource: str | None, param_type: str) -> str | None:
    """What in the trigger itself keeps the devhost from running it (None when nothing does)."""
    if fn.kind == "blob" and str(fn.trigger.get("source", "")).lower() == "eventgrid":
        return "source=EventGrid needs Event Grid (the devhost polls: drop source or use LogsAndContainerScan)"
    if param_type not in _PASSABLE[fn.kind]:
        allowed = ", ".join(_PASSABLE[fn.kind])
        return f"the parameter type {param_type} needs an SDK-type binding extension (devhost passes {allowed})"
    if not resource:
        return f"{resource_key} {fn.trigger.get(resource_key)!r} is empty or names an unset app setting"
    if fn.kind == "blob" and "/" not in resource.strip("/"):
        return f"the path {resource!r} must be container/blob-pattern"
    return None


def _decode_queue_body(content: str, options: QueueOptions) -> bytes:
    if not options.base64:
        return content.encode("utf-8")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "the message is not Base64 text (host.json extensions.queues.messageEncoding is 'base64'; "
            "send with TextBase64EncodePolicy or set it to 'none')"
        ) from None


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def queue_trigger_value(target: StorageTarget, message: Any, body: bytes) -> Any:
    """The trigger argument the worker would build for a queue message."""
    from azure.functions.meta import Datum  # noqa: PLC0415
    from azure.functions.queue import QueueMessageInConverter  # noqa: PLC0415

    if target.param_type == "str":
        return body.decode("utf-8")
    if target.param_type == "bytes":
        return body
    metadata = {
        "Id": Datum(message.id, "string"),
        "DequeueCount": Datum(int(message.dequeue_count or 0), "int"),
        "ExpirationTime": Datum(_iso(message.expires_on), "string"),
        "InsertionTime": Datum(_iso(message.inserted_on), "string"),
        "NextVisibleTime": Datum(_iso(message.next_visible_on), "string"),
        "PopReceipt": Datum(message.pop_receipt, "string"),
    }
    return QueueMessageInConverter.decode(Datum(body, "bytes"), trigger_metadata=metadata)


def queue_binding_metadata(message: Any) -> dict[str, Any]:
    """A message's trigger metadata for binding expressions (``{Id}``, ``{DequeueCount}``, ...)."""
    return {
        "Id": message.id,
        "DequeueCount": int(message.dequeue_count or 0),
        "PopReceipt": message.pop_receipt,
        "InsertionTime": _iso(message.inserted_on),
        "ExpirationTime": _iso(message.expires_on),
        "NextVisibleTime": _iso(message.next_visible_on),
    }


def blob_trigger_value(target: StorageTarget, path: str, url: str, data: bytes, props: Any) -> Any:
    """The trigger argument the worker would build for a blob."""
    from azure.functions.blob import BlobConverter  # noqa: PLC0415
    from azure.functions.meta import Datum  # noqa: PLC0415

    if target.param_type == "str":
        return data.decode("utf-8")
    if target.param_type == "bytes":
        return data
    properties = {"Length": props.size, "ETag": props.etag, "ContentType": props.content_settings.content_type}
    metadata = {
        "BlobTrigger": Datum(path, "string"),
        "Uri": Datum(url, "string"),
        "Properties": Datum(json.dumps(properties), "json"),
        "Metadata": Datum(json.dumps(dict(props.metadata or {})), "json"),
    }
    return BlobConverter.decode(Datum(data, "bytes"), trigger_metadata=metadata)


def blob_pattern(path: str) -> tuple[str, str, re.Pattern[str]]:
    """Split ``container/pattern``: the container, the literal name prefix, and a regex for blob names.

    ``{name}`` parts match any text (slashes included), ``{{``/``}}`` are literal braces, as the host reads them.
    """
    container, _, pattern = path.partition("/")
    out, literal_prefix, seen_param = [], [], False
    for token in re.split(r"(\{\{|\}\}|\{[^{}]*\})", pattern):
        if token in ("{{", "}}"):
            out.append(re.escape(token[0]))
        elif token.startswith("{") and token.endswith("}"):
            out.append(".+?")
            seen_param = True
            continue
        else:
            out.append(re.escape(token))
        if not seen_param:
            literal_prefix.append(token[0] if token in ("{{", "}}") else token)
    return container, "".join(literal_prefix), re.compile("".join(out))


# ----- the runners ------------------------------------------------------------------------------------------


class StorageTriggers(TriggerLoops):
    """Runs the app's queue and blob triggers until stopped; lists those it does not run and why."""

    def __init__(self, host: Host, environ: typing.Mapping[str, str], host_id: str) -> None:
        """Plan every storage function now: a bad host.json section is reported at start."""
        super().__init__(host, log)
        self.host_id = host_id
        self.options = queue_options(host.app.host.raw)
        self.plans: dict[str, StorageTarget | str] = {}
        for fn in host.app.functions:
            if fn.kind in ("queue", "blob"):
                self.plans[fn.name] = plan_function(fn, environ)
        self.runs = dict.fromkeys(self.plans, 0)

    def describe(self) -> list[str]:
        """One line per storage-triggered function: what it listens on, or why it does not run."""
        lines = []
        for name, plan in self.plans.items():
            if isinstance(plan, str):
                lines.append(f"{name}: {plan}")
            else:
                what = "queue" if plan.fn.kind == "queue" else "blobs"
                lines.append(f"{name}: {what} '{plan.resource}' on {plan.connection}")
        return lines

    def start(self) -> None:
        """Start one polling loop per runnable function (on the running event loop)."""
        for name, plan in self.plans.items():
            if isinstance(plan, StorageTarget):
                loop = QueueListener(self, plan) if plan.fn.kind == "queue" else BlobListener(self, plan)
                self.spawn(loop.run(), f"devhost-storage-{name}")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop polling and let runs in progress finish for up to ``grace_s`` seconds, then cancel them.

        A cancelled run's queue message comes back when its lease ends; a blob without a receipt fires again.
        """
        await super().stop(grace_s)


def _client_kwargs() -> dict[str, Any]:
    # ``logger`` reaches the SDK's HttpLoggingPolicy, which logs every request at INFO by default.
    return {"logger": _sdk_log, "retry_total": 2}


class QueueListener:
    """One queue-triggered function's listener."""

    def __init__(self, triggers: StorageTriggers, target: StorageTarget) -> None:
        from azure.storage.queue import QueueClient  # noqa: PLC0415

        self.triggers = triggers
        self.target = target
        self.options = triggers.options
        self.queue = QueueClient.from_connection_string(target.connection_string, target.resource, **_client_kwargs())
        self.poison = QueueClient.from_connection_string(
            target.connection_string, f"{target.resource}-poison", **_client_kwargs()
        )

    async def run(self) -> None:
        """Poll until cancelled."""
        await self.triggers.poll(self.step, self.options.max_polling_s, self.target.fn.name)

    def _receive(self) -> list[Any]:
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        try:
            pages = self.queue.receive_messages(
                messages_per_page=self.options.batch_size,
                visibility_timeout=LEASE_S,
                max_messages=self.options.batch_size,
            )
            return list(pages)
        except ResourceNotFoundError:  # the queue does not exist yet: nothing to do
            return []

    async def step(self) -> bool:
        """Take one batch and run it; whether there were messages."""
        messages = await asyncio.to_thread(self._receive)
        await asyncio.gather(*(self.handle(message) for message in messages))
        return bool(messages)

    async def handle(self, message: Any) -> None:
        """Run the function on one message, then delete it, let it come back, or move it to the poison queue."""
        fn = self.target.fn
        try:
            body = _decode_queue_body(message.content or "", self.options)
            value = queue_trigger_value(self.target, message, body)
        except ValueError as exc:
            log.error(
                "Message %s on queue '%s' cannot be passed to %s: %s", message.id, self.target.resource, fn.name, exc
            )
            ok = False
        else:
            reason = f"New queue message detected on '{self.target.resource}'."
            ok = await self.triggers.invoke(fn, value, reason, queue_binding_metadata(message))
        if ok:
            await asyncio.to_thread(self.queue.delete_message, message)
        elif int(message.dequeue_count or 0) >= self.options.max_dequeue_count:
            await asyncio.to_thread(self._to_poison, message)
        else:
            await asyncio.to_thread(
                self.queue.update_message, message, visibility_timeout=int(self.options.visibility_timeout_s)
            )

    def _to_poison(self, message: Any) -> None:
        from azure.core.exceptions import ResourceExistsError  # noqa: PLC0415

        log.warning(
            "Message has reached MaxDequeueCount of %d. Moving message to queue '%s-poison'.",
            self.options.max_dequeue_count,
            self.target.resource,
        )
        try:
            self.poison.create_queue()
        except ResourceExistsError:
            pass
        self.poison.send_message(message.content)
        self.queue.delete_message(message)


class BlobListener:
    """One blob-triggered function's listener: each blob version under its path fires once."""

    def __init__(self, triggers: StorageTriggers, target: StorageTarget) -> None:
        from azure.storage.blob import BlobServiceClient  # noqa: PLC0415
        from azure.storage.queue import QueueClient  # noqa: PLC0415

        self.triggers = triggers
        self.target = target
        self.container_name, self.prefix, self.pattern = blob_pattern(target.resource)
        service = BlobServiceClient.from_connection_string(target.connection_string, **_client_kwargs())
        self.container = service.get_container_client(self.container_name)
        self.receipts = service.get_container_client(RECEIPTS_CONTAINER)
        self.poison = QueueClient.from_connection_string(
            target.connection_string, BLOB_POISON_QUEUE, **_client_kwargs()
        )
        self.function_id = f"Host.Functions.{target.fn.name}"
        self.seen: set[str] | None = None  # receipts, loaded on the first scan
        self.attempts: dict[str, int] = {}

    def receipt_name(self, etag: str, blob_name: str) -> str:
        """Where the receipt of one blob version lives (the host's layout)."""
        return f"blobreceipts/{self.triggers.host_id}/{self.function_id}/{etag}/{self.container_name}/{blob_name}"

    async def run(self) -> None:
        """Scan until cancelled (the back-off caps at 2 s: there is no cheaper way to learn of new blobs)."""
        await self.triggers.poll(self.step, 2.0, self.target.fn.name)

    def _scan(self) -> list[Any]:
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        if self.seen is None:
            self.seen = self._load_receipts()
        try:
            blobs = list(self.container.list_blobs(name_starts_with=self.prefix or None))
        except ResourceNotFoundError:
            return []
        fresh = []
        for blob in blobs:
            if self.pattern.fullmatch(blob.name) and self.receipt_name(_etag(blob.etag), blob.name) not in self.seen:
                fresh.append(blob)
        return fresh

    def _load_receipts(self) -> set[str]:
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        prefix = f"blobreceipts/{self.triggers.host_id}/{self.function_id}/"
        try:
            return {item.name for item in self.receipts.list_blobs(name_starts_with=prefix)}
        except ResourceNotFoundError:
            return set()

    async def step(self) -> bool:
        """Run the function on each new blob version, one at a time; whether there were any."""
        fresh = await asyncio.to_thread(self._scan)
        for blob in fresh:
            if self.triggers.stopping.is_set():
                break  # the rest fire at the next start: they have no receipt
            await self.handle(blob)
        return bool(fresh)

    def _download(self, name: str) -> tuple[bytes, Any, str]:
        client = self.container.get_blob_client(name)
        download = client.download_blob()
        return download.readall(), download.properties, client.url

    async def handle(self, blob: Any) -> None:
        """Fire once for this version; on success (or after the last attempt) write its receipt."""
        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        etag = _etag(blob.etag)
        receipt = self.receipt_name(etag, blob.name)
        path = f"{self.container_name}/{blob.name}"
        try:
            data, props, url = await asyncio.to_thread(self._download, blob.name)
        except ResourceNotFoundError:
            return  # deleted since the scan
        if _etag(props.etag) != etag:
            return  # overwritten since the scan: the next scan fires the new version
        try:
            value = blob_trigger_value(self.target, path, url, data, props)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("Blob '%s' cannot be passed to %s: %s", path, self.target.fn.name, exc)
            ok = False
        else:
            reason = f"New blob detected(LogsAndContainerScan): {path}"
            ok = await self.triggers.invoke(self.target.fn, value, reason, {"BlobTrigger": path, "Uri": url})
        attempts = self.attempts.get(receipt, 0) + 1
        if ok or attempts >= BLOB_MAX_ATTEMPTS:
            await asyncio.to_thread(self._write_receipt, receipt, None if ok else (blob, etag))
            self.attempts.pop(receipt, None)
        else:
            self.attempts[receipt] = attempts

    def _write_receipt(self, receipt: str, poison: tuple[Any, str] | None) -> None:
        from azure.core.exceptions import ResourceExistsError  # noqa: PLC0415

        try:
            self.receipts.create_container()
        except ResourceExistsError:
            pass
        self.receipts.upload_blob(receipt, b"", overwrite=True)
        assert self.seen is not None
        self.seen.add(receipt)
        if poison is None:
            return
        blob, etag = poison
        log.error(
            "Blob '%s/%s' failed %d times in %s; moving it to queue '%s'.",
            self.container_name,
            blob.name,
            BLOB_MAX_ATTEMPTS,
            self.target.fn.name,
            BLOB_POISON_QUEUE,
        )
        try:
            self.poison.create_queue()
        except ResourceExistsError:
            pass
        message = {
            "Type": "BlobTrigger",
            "FunctionId": self.function_id,
            "BlobType": str(blob.blob_type.value if hasattr(blob.blob_type, "value") else blob.blob_type),
            "ContainerName": self.container_name,
            "BlobName": blob.name,
            "ETag": etag,
        }
        self.poison.send_message(base64.b64encode(json.dumps(message).encode()).decode())


def _etag(value: str | None) -> str:
    return (value or "").strip('"')
