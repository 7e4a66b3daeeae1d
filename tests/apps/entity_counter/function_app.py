"""Counter entity (the public samples' first entity): HTTP signals and reads, orchestrations call and signal it.

An operation named ``crash_at`` in ``ENTITY_CRASH_FILE`` (a count) makes ``add`` kill the whole host with
SIGKILL once the counter reaches that count: the kill -9 test uses it to die in the middle of a batch.
"""

import json
import os
import signal
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


def _crash_if_told(value: int) -> None:
    """Die like kill -9 when the crash file names this value (tests only)."""
    marker = os.environ.get("ENTITY_CRASH_FILE")
    if marker and Path(marker).is_file() and Path(marker).read_text().strip() == str(value):
        os.kill(os.getpid(), signal.SIGKILL)


@app.entity_trigger(context_name="context")
def counter(context: df.DurableEntityContext) -> None:
    """add / reset / get / fail / delete as the public counter sample has them; poison breaks the batch."""
    current = context.get_state(lambda: 0)
    operation = context.operation_name
    if operation == "add":
        current += context.get_input()
        context.set_state(current)
        _crash_if_told(current)
    elif operation == "reset":
        context.set_state(0)
    elif operation == "get":
        context.set_result(current)
    elif operation == "fail":
        raise ValueError(f"counter cannot {context.get_input()}")
    elif operation == "delete":
        context.destruct_on_exit()
    elif operation == "poison":
        context.set_state(object())  # cannot be serialised: the whole batch fails, the state stays
    else:
        raise ValueError(f"unknown operation {operation}")


@app.route(route="counter/{key}/{op}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def signal_counter(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Signal the counter through the SDK's client (body: the operation's input)."""
    body = req.get_json() if req.get_body() else None
    entity = df.EntityId("counter", req.route_params["key"])
    await client.signal_entity(entity, req.route_params["op"], body)
    return func.HttpResponse(status_code=202)


@app.route(route="counter/{key}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def read_counter(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Read the counter's state through the SDK's client."""
    state = await client.read_entity_state(df.EntityId("counter", req.route_params["key"]))
    body = {"exists": state.entity_exists, "state": state.entity_state}
    return func.HttpResponse(json.dumps(body), mimetype="application/json")


@app.route(route="orchestrators/{functionName}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the orchestrator named in the URL with the JSON body as input."""
    body = req.get_json() if req.get_body() else None
    instance_id = await client.start_new(req.route_params["functionName"], client_input=body)
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def count_up(context: df.DurableOrchestrationContext):
    """Add each number to the counter ``key`` and return what ``get`` says after every call."""
    args = context.get_input()
    entity = df.EntityId("counter", args["key"])
    seen = []
    for number in args["numbers"]:
        yield context.call_entity(entity, "add", number)
        seen.append((yield context.call_entity(entity, "get")))
    return seen


@app.orchestration_trigger(context_name="context")
def catch_failure(context: df.DurableOrchestrationContext):
    """An operation that raises fails the call; the orchestration catches it and goes on."""
    entity = df.EntityId("counter", context.get_input()["key"])
    try:
        yield context.call_entity(entity, "fail", "divide by zero")
        caught = None
    except Exception as exc:  # the entity's error, as the SDK raises it
        caught = str(exc)
    yield context.call_entity(entity, "add", 5)
    total = yield context.call_entity(entity, "get")
    return {"caught": caught, "total": total}


@app.orchestration_trigger(context_name="context")
def fail_uncaught(context: df.DurableOrchestrationContext):
    """An entity error nobody catches fails the orchestration with the entity's message."""
    yield context.call_entity(df.EntityId("counter", context.get_input()["key"]), "fail", "carry on")
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def signal_then_read(context: df.DurableOrchestrationContext):
    """Fire-and-forget signals run before a later call to the same entity (one queue per entity, in order)."""
    entity = df.EntityId("counter", context.get_input()["key"])
    for _ in range(3):
        context.signal_entity(entity, "add", 10)
    total = yield context.call_entity(entity, "get")
    context.signal_entity(entity, "delete")
    return total


@app.orchestration_trigger(context_name="context")
def call_unknown_entity(context: df.DurableOrchestrationContext):
    """Calling an entity no function implements fails the orchestration, naming the known entities."""
    yield context.call_entity(df.EntityId("nosuch", "k"), "get")
    return "unreachable"


@app.orchestration_trigger(context_name="context")
def fan_out_adds(context: df.DurableOrchestrationContext):
    """Many calls in parallel to one entity: each add runs alone, the total is exact."""
    args = context.get_input()
    entity = df.EntityId("counter", args["key"])
    yield context.task_all([context.call_entity(entity, "add", 1) for _ in range(args["count"])])
    return (yield context.call_entity(entity, "get"))
