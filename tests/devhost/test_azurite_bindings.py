"""Storage input and output bindings under devhost (tests/apps/storage_bindings) on the session's Azurite.

One devhost process for the module, its ``AzureWebJobsStorage`` pointed at the session Azurite (the setting wins
over local.settings.json, so devhost starts no emulator of its own). Each binding is checked through what the
test reads back from storage with its own clients: blob, queue and table inputs and outputs from HTTP,
queue-, blob- and timer-triggered functions and an activity; nothing written when the function raised;
the functions devhost cannot bind are named at start and still run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from azure.data.tables import TableClient
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueClient

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import APPS_DIR, DevHostProcess, wait_for

APP = APPS_DIR / "storage_bindings"


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data_dir = tmp_path_factory.mktemp("bindings-app")
    process = DevHostProcess(APP, data_dir, no_auth=True, env={"AzureWebJobsStorage": azurite.connection_string})
    process.start(timeout_s=120)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def blobs(azurite: Azurite) -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(azurite.connection_string)


def read(blobs: BlobServiceClient, container: str, name: str) -> bytes | None:
    client = blobs.get_blob_client(container, name)
    return client.download_blob().readall() if client.exists() else None


def names(blobs: BlobServiceClient, container: str, prefix: str = "") -> list[str]:
    client = blobs.get_container_client(container)
    if not client.exists():
        return []
    return sorted(blob.name for blob in client.list_blobs(name_starts_with=prefix or None))


def table(azurite: Azurite, name: str) -> TableClient:
    return TableClient.from_connection_string(azurite.connection_string, name)


def test_the_bindings_devhost_cannot_run_are_named_and_their_functions_run(host: DevHostProcess) -> None:
    out = host.output(since_launch=True)
    assert "Storage:" not in out  # no emulator of its own: the setting holds a connection string
    assert (
        "Function 'elsewhere': queue binding 'msg' is not run (the connection IdentityStorage is identity-based; "
        "the devhost needs a connection string); its output value is discarded." in out
    )
    assert "Function 'mailer': binding 'mail' of type sendGrid is not implemented by the devhost" in out
    assert "Function 'put_doc'" not in out  # every storage binding of the app runs
    assert host.client.post("/api/elsewhere").text == "ran"
    assert host.client.post("/api/mailer").text == "ran"


def test_blob_output_and_input_from_http(host: DevHostProcess, blobs: BlobServiceClient) -> None:
    assert host.client.put("/api/docs/first.txt", content=b"hello bindings").status_code == 201
    assert read(blobs, "bind-docs", "first.txt") == b"hello bindings"  # the path's %setting% and {name}
    got = host.client.get("/api/docs/first.txt")
    assert (got.status_code, got.content) == (200, b"hello bindings")
    assert host.client.get("/api/text/first.txt").json() == {"type": "str", "text": "hello bindings"}


def test_a_missing_blob_is_none(host: DevHostProcess) -> None:
    assert host.client.get("/api/docs/never-written").status_code == 404
    assert host.client.get("/api/text/never-written").status_code == 404


def test_nothing_is_written_when_the_function_raises(host: DevHostProcess, blobs: BlobServiceClient) -> None:
    assert host.client.put("/api/docs/failed.txt?fail=1", content=b"never").status_code == 500
    assert read(blobs, "bind-docs", "failed.txt") is None
    # Nor its queue messages: the queue trigger never sees 'failed.txt' (checked after a later success).
    assert host.client.put("/api/docs/after-failure.txt", content=b"ok").status_code == 201
    wait_for("the later message", lambda: read(blobs, "bind-seen", "after-failure.txt.txt"))
    assert read(blobs, "bind-seen", "failed.txt.txt") is None


def test_queue_output_is_base64_for_the_trigger_and_return_and_table_outputs_follow(
    host: DevHostProcess, blobs: BlobServiceClient, azurite: Azurite
) -> None:
    assert host.client.put("/api/docs/queued", content=b"q").status_code == 201
    # Both messages of the list, each read back by the queue trigger ($return to a blob named by {name}).
    assert wait_for("the first", lambda: read(blobs, "bind-seen", "queued.txt")) == b"seen queued (put)"
    assert wait_for("the second", lambda: read(blobs, "bind-seen", "queued-again.txt")) == b"seen queued-again (put)"
    rows = wait_for(
        "the table rows",
        lambda: [r for r in table(azurite, "bindevents").query_entities("Name eq 'queued'")] or None,
    )
    assert [(row["PartitionKey"], row["DequeueCount"]) for row in rows] == [("events", 1)]
    assert len(rows[0]["RowKey"]) == 36  # the message id the trigger saw


def test_queue_messages_are_base64_text_one_per_list_item(host: DevHostProcess, azurite: Azurite) -> None:
    assert host.client.post("/api/outbox").status_code == 202
    queue = QueueClient.from_connection_string(azurite.connection_string, "bind-outbox")  # raw: no decode policy
    raw = [message.content for message in queue.peek_messages(max_messages=32)]
    assert [base64.b64decode(text) for text in raw] == ["text é".encode(), b"\x00bytes", b'{"json": true}']


def test_blob_trigger_with_bytes_and_a_blob_output_named_by_the_trigger_path(
    host: DevHostProcess, blobs: BlobServiceClient
) -> None:
    container = blobs.get_container_client("bind-incoming")
    if not container.exists():
        container.create_container()
    container.upload_blob("sub/dir/note.txt", b"shout", overwrite=True)
    assert wait_for("the processed blob", lambda: read(blobs, "bind-processed", "sub/dir/note.txt")) == b"SHOUT"


def test_system_expressions(host: DevHostProcess, blobs: BlobServiceClient) -> None:
    assert host.client.post("/api/stamped").status_code == 204
    written = names(blobs, "bind-stamped")
    random = [name for name in written if "/" not in name]
    dated = [name for name in written if "/" in name]
    assert len(random) == 1 and len(random[0]) == len("00000000-0000-0000-0000-000000000000.txt")
    assert len(dated) == 1
    year, stamp = dated[0].split("/")
    assert stamp.startswith(f"{year}-") and stamp.endswith("Z.txt") and ":" not in stamp


def test_table_output_and_input(host: DevHostProcess) -> None:
    person = {"Name": "Ada", "Age": 36}
    assert host.client.put("/api/people/p1/ada", content=json.dumps(person)).status_code == 201
    crowd = [
        {"PartitionKey": "p1", "RowKey": "bob", "Name": "Bob", "Age": 20},
        {"PartitionKey": "p1", "RowKey": "cy", "Name": "Cy", "Age": 50},
        {"PartitionKey": "p1", "RowKey": "di", "Name": "Di", "Age": 60},
        {"PartitionKey": "p2", "RowKey": "eve", "Name": "Eve", "Age": 70},
    ]
    assert host.client.post("/api/people", json=crowd).status_code == 201
    got = host.client.get("/api/people/p1/ada").json()
    assert {key: got[key] for key in ("PartitionKey", "RowKey", "Name", "Age")} == {
        "PartitionKey": "p1",
        "RowKey": "ada",
        "Name": "Ada",
        "Age": 36,
    }
    assert "Timestamp" in got
    assert host.client.get("/api/people/p1/nobody").status_code == 404
    listed = host.client.get("/api/people/p1", params={"min": "30"}).json()
    assert [row["RowKey"] for row in listed] == ["ada", "cy"]  # filter Age ge 30 in p1, take 2


def test_a_table_entity_without_keys_fails_the_invocation(host: DevHostProcess) -> None:
    assert host.client.post("/api/people", json=[{"Name": "nobody"}]).status_code == 500
    assert "the table output 'people': an entity has no PartitionKey" in host.output()


def test_an_activity_reads_and_writes_blobs(host: DevHostProcess, blobs: BlobServiceClient) -> None:
    assert host.client.put("/api/docs/source.bin", content=b"\x00\x01payload").status_code == 201
    started = host.client.post("/api/copy/source.bin")
    assert started.status_code == 202
    status_url = started.json()["statusQueryGetUri"]

    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = host.client.get(status_url).json()
        return body if body["runtimeStatus"] in ("Completed", "Failed") else None

    final = wait_for("the orchestration", done)
    assert (final["runtimeStatus"], final["output"]) == ("Completed", 9)
    assert read(blobs, "bind-copies", "source.bin") == b"\x00\x01payload (copy)"


def test_a_timer_function_writes_its_blob_output(host: DevHostProcess, blobs: BlobServiceClient) -> None:
    assert wait_for("the timer's blob", lambda: read(blobs, "bind-timer", "started.txt")) == b"started"
