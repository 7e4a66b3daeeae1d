"""Durable client test app: HTTP triggers that call every DurableOrchestrationClient method."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

Handler = Callable[[], Awaitable[func.HttpResponse]]


def _json(payload: Any, status: int = 200) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(payload), status_code=status, mimetype="application/json")


async def _guard(handler: Handler) -> func.HttpResponse:
    """Report client-side exceptions as a 409 with the SDK's message, so tests can assert on it."""
    try:
        return await handler()
    except Exception as exc:  # the SDK raises plain Exception for unexpected status codes
        return _json({"error": str(exc), "type": type(exc).__name__}, 409)


def _status_json(status: df.DurableOrchestrationStatus) -> dict[str, Any]:
    if not status:
        # A 404 yields a falsy status (to_json() cannot render it: it has no timestamps).
        return {"truthy": False, "message": getattr(status, "message", None)}
    body: dict[str, Any] = dict(status.to_json())
    body["truthy"] = bool(status)
    body["historyEvents"] = getattr(status, "historyEvents", None)
    return body


def _flag(req: func.HttpRequest, name: str) -> bool:
    return req.params.get(name, "").lower() == "true"


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# ----- orchestrations and activities ------------------------------------------------------


@app.activity_trigger(input_name="name")
def greet(name: str) -> str:
    return f"Hello {name}!"


@app.activity_trigger(input_name="seconds")
def nap(seconds: float) -> float:
    threading.Event().wait(seconds)
    return seconds


@app.orchestration_trigger(context_name="context")
def nap_chain(context: df.DurableOrchestrationContext):
    data = context.get_input()
    slept = yield context.call_activity("nap", data["seconds"] if isinstance(data, dict) else data)
    greeting = yield context.call_activity("greet", "after nap")
    return [slept, greeting]


_failed_once: set[str] = set()
_failed_lock = threading.Lock()


@app.activity_trigger(input_name="key")
def fail_first_time(key: str) -> str:
    """Fail on the first call for ``key`` and succeed afterwards (a rewind re-runs it)."""
    with _failed_lock:
        first = key not in _failed_once
        _failed_once.add(key)
    if first:
        raise RuntimeError(f"first attempt for {key} fails")
    return f"{key} recovered"


@app.orchestration_trigger(context_name="context")
def rewindable(context: df.DurableOrchestrationContext):
    before = yield context.call_activity("greet", "rewind")
    recovered = yield context.call_activity("fail_first_time", context.instance_id)
    return [before, recovered]


@app.orchestration_trigger(context_name="context")
def greet_chain(context: df.DurableOrchestrationContext):
    # Client-started instances get the list back from get_input(); a raw webhook body must be an object
    # (the SDK only re-serialises dict inputs), so accept {"names": [...]} as well.
    data = context.get_input()
    names = (data.get("names") if isinstance(data, dict) else data) or ["Tokyo", "Seattle", "London"]
    results = []
    for name in names:
        results.append((yield context.call_activity("greet", name)))
    return results


@app.orchestration_trigger(context_name="context")
def wait_approval(context: df.DurableOrchestrationContext):
    context.set_custom_status("waiting for approval")
    payload = yield context.wait_for_external_event("Approval")
    context.set_custom_status("approved")
    return {"received": payload}


@app.orchestration_trigger(context_name="context")
def failing(context: df.DurableOrchestrationContext):
    yield context.call_activity("greet", "before failure")
    raise ValueError("planned failure")


@app.orchestration_trigger(context_name="context")
def echo_input(context: df.DurableOrchestrationContext):
    yield context.call_activity("greet", "x")
    return context.get_input()


@app.orchestration_trigger(context_name="context")
def version_echo(context: df.DurableOrchestrationContext):
    yield context.call_activity("greet", "v")
    return context.version


# ----- client triggers ---------------------------------------------------------------------


@app.activity_trigger(input_name="target")
@app.durable_client_input(client_name="client")
async def raise_on(target: dict[str, str], client: df.DurableOrchestrationClient) -> str:
    """An activity with a durable client: raises an event on another orchestration."""
    await client.raise_event(target["instance"], target["event"], {"from": "activity"})
    return "raised"


@app.orchestration_trigger(context_name="context")
def ping_self(context: df.DurableOrchestrationContext):  # noqa: ANN201
    """Has an activity raise an event on this very instance, then waits for it."""
    raised = yield context.call_activity("raise_on", {"instance": context.instance_id, "event": "ping"})
    ping = yield context.wait_for_external_event("ping")
    return {"activity": raised, "ping": ping}


@app.route(route="client/start/{name}/{instance_id?}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def client_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        body = req.get_body()
        client_input = json.loads(body) if body else None
        instance_id = await client.start_new(
            req.route_params["name"],
            req.route_params.get("instance_id"),
            client_input,
            version=req.params.get("version"),
        )
        return client.create_check_status_response(req, instance_id)

    return await _guard(run)


@app.route(route="client/wait/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def client_wait(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        body = req.get_body()
        instance_id = await client.start_new(req.route_params["name"], None, json.loads(body) if body else None)
        return await client.wait_for_completion_or_create_check_status_response(
            req,
            instance_id,
            timeout_in_milliseconds=int(req.params.get("timeout_ms", "10000")),
            retry_interval_in_milliseconds=int(req.params.get("interval_ms", "100")),
        )

    return await _guard(run)


@app.route(route="client/status/{instance_id}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def client_status(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        status = await client.get_status(
            req.route_params["instance_id"],
            show_history=_flag(req, "show_history"),
            show_history_output=_flag(req, "show_history_output"),
            show_input=_flag(req, "show_input"),
        )
        return _json(_status_json(status))

    return await _guard(run)


@app.route(route="client/all", methods=["GET"])
@app.durable_client_input(client_name="client")
async def client_all(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        return _json([_status_json(s) for s in await client.get_status_all()])

    return await _guard(run)


@app.route(route="client/by", methods=["GET"])
@app.durable_client_input(client_name="client")
async def client_by(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        statuses = req.params.get("status")
        result = await client.get_status_by(
            created_time_from=_when(req.params.get("from")),
            created_time_to=_when(req.params.get("to")),
            runtime_status=[df.OrchestrationRuntimeStatus(s) for s in statuses.split(",")] if statuses else None,
            instance_id_prefix=req.params.get("prefix"),
        )
        return _json([_status_json(s) for s in result])

    return await _guard(run)


@app.route(route="client/event/{instance_id}/{event}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def client_event(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        await client.raise_event(req.route_params["instance_id"], req.route_params["event"], req.get_json())
        return _json({"raised": True}, 202)

    return await _guard(run)


@app.route(route="client/{operation:regex(^(terminate|suspend|resume|rewind)$)}/{instance_id}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def client_operation(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        operation = req.route_params["operation"]
        method = getattr(client, operation)
        await method(req.route_params["instance_id"], req.params.get("reason", f"{operation} by test"))
        return _json({operation: True})

    return await _guard(run)


@app.route(route="client/restart/{instance_id}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def client_restart(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        result = await client.restart(req.route_params["instance_id"], req.params.get("new", "true") == "true")
        return _json({"result": result})

    return await _guard(run)


@app.route(route="client/purge/{instance_id}", methods=["DELETE"])
@app.durable_client_input(client_name="client")
async def client_purge(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        result = await client.purge_instance_history(req.route_params["instance_id"])
        return _json({"deleted": result.instances_deleted})

    return await _guard(run)


@app.route(route="client/purgeby", methods=["DELETE"])
@app.durable_client_input(client_name="client")
async def client_purge_by(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    async def run() -> func.HttpResponse:
        statuses = req.params.get("status")
        result = await client.purge_instance_history_by(
            created_time_from=_when(req.params.get("from")),
            created_time_to=_when(req.params.get("to")),
            runtime_status=[df.OrchestrationRuntimeStatus(s) for s in statuses.split(",")] if statuses else None,
        )
        return _json({"deleted": result.instances_deleted})

    return await _guard(run)


@app.route(route="client/payload/{instance_id}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def client_payload(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    return _json(client.create_http_management_payload(req.route_params["instance_id"]))


@app.route(route="client/binding", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@app.durable_client_input(client_name="client")
async def client_binding(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, context: func.Context
) -> func.HttpResponse:
    bindings = client._orchestration_bindings
    return _json(
        {
            "taskHubName": bindings.task_hub_name,
            "creationUrls": bindings.creation_urls,
            "managementUrls": bindings.management_urls,
            "rpcBaseUrl": bindings.rpc_base_url,
            "clientData": vars(bindings.client_data),
            "invocation_id": context.invocation_id,
            "client_invocation_id": client._function_invocation_id,
        }
    )
