"""The parts of devhost's storage bindings that need no storage: binding expressions, the trigger's binding
data, which bindings are run or named at load, and the values the worker would pass or the host would write."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import azure.functions as func
import pytest

from devhost.functions.model import FunctionInfo, FunctionKind
from devhost.storage.binding_data import BindingError, binding_data, resolve_expression
from devhost.storage.binding_io import StorageBinding, _blob_bytes, _entities, _message_texts, blob_value
from devhost.storage.bindings import OutValue, add_binding_arguments, plan_bindings

# Never dialled: these tests need no storage (and stay out of the slow set, which is marked by what a module names).
CONNECTION = "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:1/acct;"
ENV = {"AzureWebJobsStorage": CONNECTION, "CONTAINER": "docs", "Ident__queueServiceUri": "https://x"}
NOON = dt.datetime(2026, 2, 16, 17, 59, 55, 123000, tzinfo=dt.UTC)


def _http(req: func.HttpRequest, doc: func.Out[str], src: str) -> None: ...


def _queue(msg: func.QueueMessage, doc: func.Out[str]) -> None: ...


class BlobClient:  # stands for azurefunctions.extensions.bindings.blob.BlobClient (an SDK-type binding)
    """Not a type the devhost can pass."""


def _sdk_type(req: func.HttpRequest, client: BlobClient, stream: func.InputStream, raw) -> None:  # noqa: ANN001
    ...


def function(
    kind: FunctionKind, user_function: Any, trigger: dict[str, Any], *bindings: dict[str, Any]
) -> FunctionInfo:
    """A FunctionInfo as the loader builds it (the trigger is one of the bindings)."""
    return FunctionInfo(
        name=f"fn_{kind}", kind=kind, trigger=trigger, bindings=[trigger, *bindings], user_function=user_function
    )


def blob(name: str, path: str, direction: str = "OUT", **extra: Any) -> dict[str, Any]:
    return {"type": "blob", "name": name, "direction": direction, "path": path, **extra}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("docs/{name}.txt", "docs/report.txt"),
        ("docs/{NAME}", "docs/report"),  # case-insensitive, as the host's binding data
        ("{Query.page}/{headers.x-id}", "3/abc"),
        ("{{literal}}/{n}/{flag}", "{literal}/7/True"),
        ("{DateTime}", "2026-02-16T17-59-55Z"),
        ("{DateTime:yyyy/MM/dd HH.mm.ss.fff}", "2026/02/16 17.59.55.123"),
    ],
)
def test_binding_expressions(template: str, expected: str) -> None:
    data = {"name": "report", "query": {"page": "3"}, "headers": {"x-id": "abc"}, "n": 7, "flag": True}
    assert resolve_expression(template, data, now=NOON) == expected


def test_rand_guid_and_binding_data_named_datetime() -> None:
    plain = resolve_expression("{rand-guid}", {})
    assert len(plain) == 36 and plain.count("-") == 4
    assert len(resolve_expression("{rand-guid:N}", {})) == 32
    assert resolve_expression("{rand-guid}", {}) != plain
    assert resolve_expression("{DateTime}", {"datetime": "mine"}, now=NOON) == "mine"


@pytest.mark.parametrize("data", [{}, {"name": {"nested": 1}}, {"name": None}])
def test_an_unresolvable_expression_names_the_parameter(data: dict[str, Any]) -> None:
    with pytest.raises(BindingError, match="No value for named parameter 'name'"):
        resolve_expression("docs/{name}", data)


def test_http_binding_data_has_route_query_headers_and_json_body() -> None:
    fn = function("http", _http, {"type": "httpTrigger", "name": "req"}, blob("doc", "c/{id}"))
    req = func.HttpRequest(
        "POST",
        "http://h/api/x",
        headers={"X-Id": "h1"},
        params={"page": "2", "id": "from-query"},
        route_params={"id": "r1"},
        body=json.dumps({"Id": "from-body", "user": {"name": "ada"}}).encode(),
    )
    data = binding_data(fn, req)
    assert resolve_expression("{id}/{Query.page}/{Headers.x-id}/{user.name}", data) == "r1/2/h1/ada"


def test_queue_and_blob_binding_data() -> None:
    queue_fn = function("queue", _queue, {"type": "queueTrigger", "name": "msg"}, blob("doc", "c/{id}"))
    msg = func.QueueMessage(id="m1", body=json.dumps({"name": "n1"}).encode())
    data = binding_data(queue_fn, msg, {"DequeueCount": 2})
    assert resolve_expression("{queueTrigger}|{id}|{name}|{DequeueCount}", data) == '{"name": "n1"}|m1|n1|2'
    blob_fn = function(
        "blob", _queue, {"type": "blobTrigger", "name": "msg", "path": "in/{folder}/{name}.txt"}, blob("doc", "c/x")
    )
    data = binding_data(blob_fn, b"raw", {"BlobTrigger": "in/a/b/report.txt"})
    assert (data["folder"], data["name"], data["blobtrigger"]) == ("a", "b/report", "in/a/b/report.txt")


def test_which_bindings_run_and_the_notes_for_the_others() -> None:
    fn = function(
        "http",
        _http,
        {"type": "httpTrigger", "name": "req"},
        {"type": "http", "name": "$return", "direction": "OUT"},
        blob("doc", "%CONTAINER%/{name}"),
        {"type": "blob", "name": "src", "direction": "IN", "path": "x/y", "connection": "Ident"},
        {"type": "cosmosDB", "name": "db", "direction": "IN"},
        blob("missing", "%UNSET%/x"),
    )
    plan = plan_bindings(fn, ENV)
    assert [(b.name, b.settings["path"], b.annotation) for b in plan.bound] == [("doc", "docs/{name}", str)]
    assert plan.notes == (
        "Function 'fn_http': blob binding 'src' is not run (the connection Ident is identity-based; the devhost "
        "needs a connection string); the function receives None for it.",
        "Function 'fn_http': binding 'db' of type cosmosDB is not implemented by the devhost; the function "
        "receives None for it.",
        "Function 'fn_http': blob binding 'missing' is not run (path '%UNSET%/x' names an unset app setting); its "
        "output value is discarded.",
    )


def test_a_blob_input_of_an_sdk_type_is_named_and_not_run() -> None:
    fn = function(
        "http",
        _sdk_type,
        {"type": "httpTrigger", "name": "req"},
        *(blob(name, "c/x", "IN") for name in ("client", "stream", "raw")),
    )
    plan = plan_bindings(fn, ENV)
    assert [b.name for b in plan.bound] == ["stream", "raw"]
    assert plan.notes == (
        "Function 'fn_http': blob binding 'client' is not run (the parameter type BlobClient needs an SDK-type "
        "binding extension (devhost passes InputStream, str, bytes)); the function receives None for it.",
    )


def test_arguments_start_as_sinks_for_outputs_and_none_for_inputs() -> None:
    fn = function(
        "activity", _http, {"type": "activityTrigger", "name": "req"}, blob("doc", "c/x"), blob("src", "c/y", "IN")
    )
    kwargs: dict[str, Any] = {"req": 1}
    add_binding_arguments(fn, kwargs)
    assert isinstance(kwargs["doc"], OutValue) and kwargs["src"] is None and kwargs["req"] == 1


def _binding(kind: str, annotation: Any = None, **settings: Any) -> StorageBinding:
    return StorageBinding("b", kind, True, CONNECTION, settings, annotation)


def test_blob_input_values_follow_the_annotation_and_data_type() -> None:
    assert blob_value(_binding("blob", str), b"caf\xc3\xa9") == "café"
    assert blob_value(_binding("blob", bytes), b"raw") == b"raw"
    assert blob_value(_binding("blob", str, dataType=func.DataType.BINARY), b"raw") == b"raw"
    assert blob_value(_binding("blob", bytes, dataType="string"), b"raw") == "raw"
    stream = blob_value(_binding("blob", func.InputStream), b"streamed")
    assert isinstance(stream, func.InputStream) and stream.read() == b"streamed"
    assert blob_value(_binding("blob", str), None) is None


def test_output_values_as_the_host_writes_them() -> None:
    assert _blob_bytes(_binding("blob"), "é") == "é".encode()
    assert _blob_bytes(_binding("blob"), bytearray(b"x")) == b"x"
    with pytest.raises(BindingError, match="cannot write a int"):
        _blob_bytes(_binding("blob"), 3)
    message = func.QueueMessage(body=b"from a message")
    assert _message_texts(_binding("queue"), ["a", b"b", message, {"k": 1}]) == [
        b"a",
        b"b",
        b"from a message",
        b'{"k": 1}',
    ]
    with pytest.raises(BindingError, match="cannot send a object"):
        _message_texts(_binding("queue"), [object()])


def test_table_entities_take_keys_from_the_binding_and_need_them() -> None:
    binding = _binding("table", partitionKey="{pk}")
    assert _entities(binding, '{"RowKey": 1, "A": 2}', {"pk": "p"}) == [{"RowKey": "1", "A": 2, "PartitionKey": "p"}]
    with pytest.raises(BindingError, match="an entity has no RowKey"):
        _entities(binding, [{"A": 1}], {"pk": "p"})
    with pytest.raises(BindingError, match="takes JSON objects, got int"):
        _entities(binding, "[1]", {})
    with pytest.raises(BindingError, match="not JSON"):
        _entities(binding, "{", {})


def test_a_value_put_into_a_table_filter_stays_inside_its_quotes() -> None:
    from devhost.storage.binding_io import _odata_quote

    attempt = {"who": "x' or PartitionKey ne '"}
    made = resolve_expression("Name eq '{who}'", attempt, escape=_odata_quote)
    assert made == "Name eq 'x'' or PartitionKey ne '''"
    assert resolve_expression("Name eq 'it''s {who}'", {"who": "a"}, escape=_odata_quote) == "Name eq 'it''s a'"
