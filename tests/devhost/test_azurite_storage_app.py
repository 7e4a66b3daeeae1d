"""A storage app on Azurite under devhost (tests/apps/storage_blobs): devhost starts Azurite for its
``UseDevelopmentStorage=true`` setting, the app writes and reads its own blobs and queues, and the queue and
blob triggers run with the host's semantics (dequeue count, poison queue, one firing per blob version, receipts
that survive a restart); Azurite stops with the host, also when the host is killed."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from devhost.storage.azurite import AzuriteEndpoints
from tests.devhost.hostproc import APPS_DIR, DevHostProcess, wait_for

APP = APPS_DIR / "storage_blobs"
QUEUE = "note-events"
_ENDPOINTS = re.compile(
    r"Storage: Azurite \(development storage for AzureWebJobsStorage\) at blob http://127\.0\.0\.1:(\d+)/\S+, "
    r"queue http://127\.0\.0\.1:(\d+)/\S+, table http://127\.0\.0\.1:(\d+)/"
)


def azurite_pids(location: Path) -> list[int]:
    """Processes running Azurite on ``location`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"--location" in cmdline and str(location).encode() in cmdline:
            found.append(int(entry.name))
    return found


class Storage:
    """The test's own view of the Azurite the host started (ports from its banner)."""

    def __init__(self, host: DevHostProcess) -> None:
        match = _ENDPOINTS.search(host.output(since_launch=True))
        assert match, host.output()
        blob, queue, table = (int(port) for port in match.groups())
        self.connection_string = AzuriteEndpoints("127.0.0.1", blob, queue, table).connection_string
        self.blobs = BlobServiceClient.from_connection_string(self.connection_string)

    def queue(self, name: str, *, base64_text: bool = True) -> QueueClient:
        policy = TextBase64EncodePolicy() if base64_text else None
        return QueueClient.from_connection_string(self.connection_string, name, message_encode_policy=policy)

    def names(self, container: str, prefix: str = "") -> list[str]:
        client = self.blobs.get_container_client(container)
        if not client.exists():
            return []
        return sorted(blob.name for blob in client.list_blobs(name_starts_with=prefix or None))

    def read(self, container: str, name: str) -> bytes | None:
        blob = self.blobs.get_blob_client(container, name)
        return blob.download_blob().readall() if blob.exists() else None

    def upload(self, name: str, data: bytes) -> str:
        """Write ``notes/<name>`` straight to storage; its ETag (unquoted)."""
        container = self.blobs.get_container_client("notes")
        if not container.exists():
            container.create_container()
        container.upload_blob(name, data, overwrite=True)
        return str(container.get_blob_client(name).get_blob_properties().etag).strip('"')

    def fires(self, note: str) -> list[str]:
        """The ETags of each firing of the blob trigger on ``notes/<note>``, in name order."""
        return [name.split("/", 1)[1].rsplit("-", 1)[0] for name in self.names("fires", f"{note}/")]

    def settle(self, marker: str) -> None:
        """Wait until the blob trigger has fired on a fresh marker note, so earlier blobs were scanned again."""
        self.upload(marker, b"marker")
        wait_for(f"the marker {marker}", lambda: self.read("summaries", marker))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("storage-app")


@pytest.fixture(scope="module")
def host(data_dir: Path) -> Iterator[DevHostProcess]:
    process = DevHostProcess(APP, data_dir, no_auth=True)
    process.start(timeout_s=120)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def storage(host: DevHostProcess) -> Storage:
    return Storage(host)


def test_the_banner_names_azurite_and_each_storage_function(host: DevHostProcess, data_dir: Path) -> None:
    out = host.output(since_launch=True)
    assert f"data in {data_dir / 'azurite'}" in out
    assert "on_note_event: queue 'note-events' on AzureWebJobsStorage" in out
    assert "on_note: blobs 'notes/{name}' on AzureWebJobsStorage" in out
    assert "elsewhere: not run: the connection IdentityStorage is identity-based" in out
    assert "from_event_grid: not run: source=EventGrid" in out
    assert len(azurite_pids(data_dir / "azurite")) == 1


def test_the_app_writes_and_reads_its_blobs_on_azurite(host: DevHostProcess, storage: Storage) -> None:
    assert host.client.put("/api/notes/first", content=b"hello storage").status_code == 201
    got = host.client.get("/api/notes/first")
    assert (got.status_code, got.text) == (200, "hello storage")
    # The same Azurite the banner names: what the app wrote is there for any client.
    assert storage.read("notes", "first") == b"hello storage"
    assert host.client.get("/api/notes/never-written").status_code == 404


def test_the_queue_trigger_runs_once_and_deletes_the_message(host: DevHostProcess, storage: Storage) -> None:
    assert host.client.put("/api/notes/queued", content=b"via the queue").status_code == 201
    audit = wait_for("the audit of 'queued'", lambda: _audits(storage, "queued"))
    assert [(record["dequeue_count"], json.loads(record["body"])) for record in audit] == [(1, {"name": "queued"})]
    queue = storage.queue(QUEUE)
    wait_for("the message to be deleted", lambda: queue.get_queue_properties().approximate_message_count == 0)


def test_a_failing_message_is_tried_max_dequeue_count_times_then_poisoned(storage: Storage) -> None:
    body = json.dumps({"name": "fail-1"})
    sent = storage.queue(QUEUE).send_message(body)
    poison = storage.queue(f"{QUEUE}-poison")
    poisoned = wait_for("the poison message", lambda: _messages(poison, body))
    assert [message.content for message in poisoned] == [base64.b64encode(body.encode()).decode()]
    counts = [record["dequeue_count"] for record in _audits(storage, "fail-1")]
    assert counts == [1, 2, 3, 4, 5]
    assert storage.names("audit", f"{sent.id}/") == [f"{sent.id}/{n}" for n in range(1, 6)]


def test_a_message_that_is_not_base64_is_poisoned_without_a_call(storage: Storage) -> None:
    storage.queue(QUEUE, base64_text=False).send_message("{not base64}")
    poison = storage.queue(f"{QUEUE}-poison")
    wait_for("the raw message in the poison queue", lambda: _messages(poison, "{not base64}", encoded=False))


def test_each_blob_version_fires_once(storage: Storage) -> None:
    first = storage.upload("versioned", b"version one")
    wait_for("the first summary", lambda: storage.read("summaries", "versioned") == b"11 bytes: version one")
    second = storage.upload("versioned", b"version two!")
    wait_for("the second summary", lambda: storage.read("summaries", "versioned") == b"12 bytes: version two!")
    storage.settle("marker-1")
    assert sorted(storage.fires("versioned")) == sorted([first, second])


def test_a_failing_blob_is_tried_five_times_then_poisoned(storage: Storage) -> None:
    etag = storage.upload("boom-1", b"boom goes the note")
    poison = storage.queue("webjobs-blobtrigger-poison")
    messages = wait_for("the blob poison message", lambda: _messages(poison, "boom-1", contains=True))
    record = json.loads(base64.b64decode(messages[0].content))
    assert record == {
        "Type": "BlobTrigger",
        "FunctionId": "Host.Functions.on_note",
        "BlobType": "BlockBlob",
        "ContainerName": "notes",
        "BlobName": "boom-1",
        "ETag": etag,
    }
    storage.settle("marker-2")
    assert storage.fires("boom-1") == [etag] * 5
    assert storage.read("summaries", "boom-1") is None


def test_a_restart_keeps_the_data_and_fires_no_blob_again(
    host: DevHostProcess, storage: Storage, data_dir: Path
) -> None:
    before = {note: storage.fires(note) for note in ("first", "versioned", "boom-1")}
    assert all(before.values())
    assert host.stop() == 0
    assert azurite_pids(data_dir / "azurite") == [], "Azurite outlived the host"
    host.start(timeout_s=120)
    restarted = Storage(host)
    assert host.client.get("/api/notes/first").text == "hello storage"
    restarted.settle("marker-3")
    assert {note: restarted.fires(note) for note in before} == before


def test_a_killed_host_leaves_no_azurite(tmp_path: Path) -> None:
    process = DevHostProcess(APP, tmp_path / "data", no_auth=True)
    process.start(timeout_s=120)
    try:
        pids = azurite_pids(tmp_path / "data" / "azurite")
        assert len(pids) == 1
        process.kill()
        wait_for("Azurite to end with its host", lambda: not azurite_pids(tmp_path / "data" / "azurite"))
    finally:
        process.stop()


def test_no_azurite_leaves_the_setting_and_says_why_triggers_do_not_run(tmp_path: Path) -> None:
    process = DevHostProcess(APP, tmp_path / "data", no_auth=True, extra_args=["--no-azurite"])
    process.start(timeout_s=120)
    try:
        out = process.output(since_launch=True)
        assert "Storage: Azurite" not in out
        assert "on_note_event: not run: AzureWebJobsStorage asks for development storage but Azurite is off" in out
        assert not (tmp_path / "data" / "azurite").exists()
    finally:
        process.stop()


def test_azurite_missing_is_a_clear_start_error(tmp_path: Path) -> None:
    process = DevHostProcess(APP, tmp_path / "data", no_auth=True, env={"DEVHOST_AZURITE": str(tmp_path / "none")})
    code, out = process.run_to_exit(timeout_s=120)
    assert code == 1, out
    assert "the app's settings ask for development storage (AzureWebJobsStorage=UseDevelopmentStorage=true)" in out
    assert "--no-azurite" in out


def _audits(storage: Storage, name: str) -> list[dict[str, Any]]:
    records = [json.loads(storage.read("audit", blob) or b"{}") for blob in storage.names("audit")]
    return sorted((r for r in records if r.get("name") == name), key=lambda r: r["dequeue_count"])


def _messages(queue: QueueClient, text: str, *, encoded: bool = True, contains: bool = False) -> list[Any]:
    """Messages on ``queue`` (peeked, left in place) whose text is (or contains) ``text``."""
    try:
        peeked = queue.peek_messages(max_messages=32)
    except ResourceNotFoundError:
        return []
    found = []
    for message in peeked:
        plain = content = str(message.content)
        if encoded:
            try:
                plain = base64.b64decode(content, validate=True).decode(errors="replace")
            except binascii.Error:
                continue
        if (text in plain) if contains else (plain == text):
            found.append(message)
    return found
