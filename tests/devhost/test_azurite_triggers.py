"""The parts of devhost's storage support that need no process: which settings ask for development storage,
host.json's queue options, blob path patterns, and why a storage-triggered function is or is not run."""

from __future__ import annotations

import inspect
from pathlib import Path

import azure.functions as func
import pytest

from devhost.functions.model import AppLoadError, FunctionInfo, FunctionKind
from devhost.storage.azurite import ACCOUNT_KEY, AzuriteEndpoints, AzuriteError
from devhost.storage.connections import (
    QueueOptions,
    asks_for_development_storage,
    default_host_storage,
    development_storage_settings,
    queue_options,
    start_development_storage,
)
from devhost.storage.triggers import StorageTarget, blob_pattern, plan_function, trigger_parameter_type

CONNECTION = AzuriteEndpoints("127.0.0.1", 1, 2, 3).connection_string


def _queue_message(msg: func.QueueMessage) -> None: ...


def _text(msg: str) -> None: ...


def _stream(blob: func.InputStream) -> None: ...


def _untyped(blob) -> None:  # unannotated on purpose
    ...


class BlobClient:  # stands for azurefunctions.extensions.bindings.blob.BlobClient (an SDK-type binding)
    """Not a type the devhost can pass."""


def _sdk_type(client: BlobClient) -> None: ...


def function(kind: FunctionKind, user_function: object, **trigger: object) -> FunctionInfo:
    """A FunctionInfo as the loader builds it for a queue or blob trigger."""
    name = next(iter(inspect.signature(user_function).parameters))  # type: ignore[arg-type]
    trigger_type = "queueTrigger" if kind == "queue" else "blobTrigger"
    return FunctionInfo(
        name=f"fn_{kind}",
        kind=kind,
        trigger={"type": trigger_type, "name": name, "direction": "IN", **trigger},
        bindings=[],
        user_function=user_function,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("value", "asks"),
    [
        ("UseDevelopmentStorage=true", True),
        ("usedevelopmentstorage=TRUE;", True),
        (" UseDevelopmentStorage = true ", True),
        ("UseDevelopmentStorage=false", False),
        (CONNECTION, False),
        ("", False),
        (None, False),
    ],
)
def test_which_values_ask_for_development_storage(value: str | None, asks: bool) -> None:
    assert asks_for_development_storage(value) is asks


def test_any_setting_can_ask_for_development_storage() -> None:
    env = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "MyStorage": "UseDevelopmentStorage=true", "X": "y"}
    assert development_storage_settings(env) == ["AzureWebJobsStorage", "MyStorage"]
    assert development_storage_settings({"X": CONNECTION}) == []
    assert (
        f"AccountKey={ACCOUNT_KEY};" in CONNECTION and "QueueEndpoint=http://127.0.0.1:2/devstoreaccount1" in CONNECTION
    )


def test_queue_options_follow_host_json() -> None:
    assert queue_options({}) == QueueOptions()
    options = queue_options(
        {
            "extensions": {
                "queues": {
                    "batchSize": 4,
                    "maxPollingInterval": "00:00:02",
                    "visibilityTimeout": "00:00:30",
                    "maxDequeueCount": 2,
                    "messageEncoding": "none",
                }
            }
        }
    )
    assert options == QueueOptions(
        batch_size=4, max_polling_s=2.0, visibility_timeout_s=30.0, max_dequeue_count=2, base64=False
    )
    assert queue_options({"extensions": {"queues": {"maxPollingInterval": 1500}}}).max_polling_s == 1.5


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"batchSize": 0}, "batchSize"),
        ({"batchSize": 33}, "batchSize"),
        ({"maxDequeueCount": "5"}, "maxDequeueCount"),
        ({"maxPollingInterval": "soon"}, "maxPollingInterval"),
        ({"visibilityTimeout": -1}, "visibilityTimeout"),
        ({"messageEncoding": "utf8"}, "messageEncoding"),
    ],
)
def test_bad_queue_options_are_refused_at_start(section: dict[str, object], named: str) -> None:
    with pytest.raises(AppLoadError, match=named):
        queue_options({"extensions": {"queues": section}})


@pytest.mark.parametrize(
    ("path", "container", "prefix", "matches", "misses"),
    [
        ("notes/{name}", "notes", "", ["a", "a/b.txt"], []),
        ("images/in/{name}.png", "images", "in/", ["in/cat.png", "in/x/y.png"], ["in/cat.jpg", "out/cat.png"]),
        ("c/{a}-{b}.json", "c", "", ["x-y.json"], ["xy.json"]),
        ("c/{{literal}}/{name}", "c", "{literal}/", ["{literal}/f"], ["literal/f"]),
    ],
)
def test_blob_paths_match_as_the_host_reads_them(
    path: str, container: str, prefix: str, matches: list[str], misses: list[str]
) -> None:
    got_container, got_prefix, regex = blob_pattern(path)
    assert (got_container, got_prefix) == (container, prefix)
    assert all(regex.fullmatch(name) for name in matches)
    assert not any(regex.fullmatch(name) for name in misses)


def test_parameter_types_the_worker_would_pass() -> None:
    assert trigger_parameter_type(function("queue", _queue_message, queueName="q")) == "QueueMessage"
    assert trigger_parameter_type(function("queue", _text, queueName="q")) == "str"
    assert trigger_parameter_type(function("blob", _stream, path="c/{n}")) == "InputStream"
    assert trigger_parameter_type(function("blob", _untyped, path="c/{n}")) == "InputStream"
    assert trigger_parameter_type(function("blob", _sdk_type, path="c/{n}")) == "BlobClient"


def test_a_runnable_function_gets_its_connection_and_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTES_QUEUE", "note-events")
    plan = plan_function(
        function("queue", _queue_message, queueName="%NOTES_QUEUE%"), {"AzureWebJobsStorage": CONNECTION}
    )
    assert isinstance(plan, StorageTarget)
    assert (plan.connection, plan.connection_string, plan.resource) == (
        "AzureWebJobsStorage",
        CONNECTION,
        "note-events",
    )
    blob = plan_function(function("blob", _stream, path="/notes/{name}/", connection="Mine"), {"Mine": CONNECTION})
    assert isinstance(blob, StorageTarget) and blob.resource == "notes/{name}"


@pytest.mark.parametrize(
    ("fn", "environ", "reason"),
    [
        (
            function("queue", _queue_message, queueName="q", connection="Ident"),
            {"Ident__queueServiceUri": "https://a.queue.core.windows.net"},
            "Ident is identity-based",
        ),
        (
            function("queue", _queue_message, queueName="q"),
            {"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
            "Azurite is off (--no-azurite)",
        ),
        (function("queue", _queue_message, queueName="q"), {}, "AzureWebJobsStorage is not a connection string"),
        (function("queue", _queue_message, queueName="%UNSET_QUEUE_SETTING%"), {}, "names an unset app setting"),
        (function("blob", _stream, path="c/{n}", source="EventGrid"), {}, "source=EventGrid"),
        (function("blob", _stream, path="justacontainer"), {"AzureWebJobsStorage": CONNECTION}, "container/blob"),
        (function("blob", _sdk_type, path="c/{n}"), {"AzureWebJobsStorage": CONNECTION}, "BlobClient needs an SDK"),
    ],
)
def test_a_function_devhost_cannot_run_says_why(fn: FunctionInfo, environ: dict[str, str], reason: str) -> None:
    plan = plan_function(fn, environ)
    assert isinstance(plan, str) and plan.startswith("not run: ") and reason in plan, plan


def test_an_unset_host_storage_defaults_to_development_storage() -> None:
    env: dict[str, str] = {}
    assert default_host_storage(env) and env == {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}
    for kept in ({"AzureWebJobsStorage": CONNECTION}, {"AzureWebJobsStorage__accountName": "acct"}):
        given = dict(kept)
        assert not default_host_storage(given) and given == kept


def test_the_default_is_dropped_with_a_warning_when_azurite_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DEVHOST_AZURITE", str(tmp_path / "no-azurite"))
    env: dict[str, str] = {}
    assert start_development_storage(tmp_path, env) is None
    assert env == {} and "AzureWebJobsStorage is not set" in caplog.text
    asked = {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}
    with pytest.raises(AzuriteError, match="ask for development storage"):
        start_development_storage(tmp_path, asked)  # asked for by the app: still a clear refusal
