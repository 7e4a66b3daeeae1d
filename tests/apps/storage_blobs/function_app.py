"""A storage app as Core Tools runs it on Azurite: its own blobs and queues, a queue trigger and a blob trigger.

- ``PUT /api/notes/{name}`` writes ``notes/<name>`` and queues ``{"name": ...}`` on ``%NOTES_QUEUE%`` (Base64,
  as the host reads queue messages); ``GET /api/notes/{name}`` reads a note back.
- ``on_note_event`` (queue trigger) records each delivery as ``audit/<message id>/<dequeue count>``; a
  message whose ``name`` starts with ``fail`` raises, so it is retried and finally moved to the poison queue.
- ``on_note`` (blob trigger on ``notes/{name}``) writes ``summaries/<name>`` and records each firing as
  ``fires/<name>/<etag>-<uuid>``; a note whose text starts with ``boom`` raises.
- ``elsewhere`` and ``from_event_grid`` cannot run locally (identity-based connection, Event Grid source):
  devhost lists them with the reason.
"""

import json
import os
import uuid

import azure.functions as func
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


def _blobs() -> BlobServiceClient:
    # The connection devhost hands the app: Azurite's development account, not "UseDevelopmentStorage=true".
    return BlobServiceClient.from_connection_string(os.environ["AzureWebJobsStorage"])


def _write(container: str, name: str, data: bytes) -> None:
    client = _blobs().get_container_client(container)
    try:
        client.create_container()
    except ResourceExistsError:
        pass
    client.upload_blob(name, data, overwrite=True)


@app.route(route="notes/{name}", methods=["PUT"])
def put_note(req: func.HttpRequest) -> func.HttpResponse:
    name = req.route_params["name"]
    _write("notes", name, req.get_body())
    queue = QueueClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], os.environ["NOTES_QUEUE"], message_encode_policy=TextBase64EncodePolicy()
    )
    try:
        queue.create_queue()
    except ResourceExistsError:
        pass
    queue.send_message(json.dumps({"name": name}))
    return func.HttpResponse(status_code=201)


@app.route(route="notes/{name}", methods=["GET"])
def get_note(req: func.HttpRequest) -> func.HttpResponse:
    try:
        data = _blobs().get_blob_client("notes", req.route_params["name"]).download_blob().readall()
    except ResourceNotFoundError:
        return func.HttpResponse("no such note", status_code=404)
    return func.HttpResponse(data, mimetype="text/plain")


@app.queue_trigger(arg_name="msg", queue_name="%NOTES_QUEUE%", connection="AzureWebJobsStorage")
def on_note_event(msg: func.QueueMessage) -> None:
    name = msg.get_json()["name"]
    record = {"name": name, "dequeue_count": msg.dequeue_count, "body": msg.get_body().decode()}
    _write("audit", f"{msg.id}/{msg.dequeue_count}", json.dumps(record).encode())
    if name.startswith("fail"):
        raise RuntimeError(f"cannot handle {name}")


@app.blob_trigger(arg_name="note", path="notes/{name}", connection="AzureWebJobsStorage")
def on_note(note: func.InputStream) -> None:
    data = note.read()
    name = (note.name or "").removeprefix("notes/")
    # The worker's InputStream carries the blob's properties; the abstract type does not declare them.
    etag = (getattr(note, "blob_properties", None) or {}).get("ETag", "").strip('"')
    _write("fires", f"{name}/{etag}-{uuid.uuid4().hex}", b"")
    if data.startswith(b"boom"):
        raise RuntimeError(f"cannot summarise {name}")
    _write("summaries", name, f"{note.length} bytes: {data.decode()[:40]}".encode())


@app.queue_trigger(arg_name="msg", queue_name="jobs", connection="IdentityStorage")
def elsewhere(msg: func.QueueMessage) -> None:
    raise AssertionError("devhost must not run a trigger on an identity-based connection")


@app.blob_trigger(
    arg_name="blob", path="uploads/{name}", connection="AzureWebJobsStorage", source=func.BlobSource.EVENT_GRID
)
def from_event_grid(blob: func.InputStream) -> None:
    raise AssertionError("devhost must not run an Event Grid blob trigger")
