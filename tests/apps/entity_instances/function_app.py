"""Entities seen through the instance endpoints, as the extension's e2e app uses them from Python.

An orchestration touches a ``Dummy`` entity; HTTP routes purge an instance by id (``@dummy@key`` for the
entity, as the extension's PurgeEntity test does), list every instance (``get_status_all``) and read one
status (``get_status``), all through the SDK's client.
"""

import json

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.entity_trigger(context_name="context")
def Dummy(context: df.DurableEntityContext) -> None:  # noqa: N802 - the entity's public name
    """set / get / delete."""
    if context.operation_name == "set":
        context.set_state(context.get_input())
    elif context.operation_name == "get":
        context.set_result(context.get_state(lambda: None))
    elif context.operation_name == "delete":
        context.destruct_on_exit()


@app.orchestration_trigger(context_name="context")
def invoke_dummy(context: df.DurableOrchestrationContext):
    """Set the entity named by the input to a value, then read it back."""
    key = context.get_input()
    entity = df.EntityId("Dummy", key)
    yield context.call_entity(entity, "set", {"key": key})
    value = yield context.call_entity(entity, "get")
    return value


@app.route(route="invoke/{key}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start invoke_dummy for one entity key."""
    instance_id = await client.start_new("invoke_dummy", client_input=req.route_params["key"])
    return client.create_check_status_response(req, instance_id)


@app.route(route="purge", methods=["POST"])
@app.durable_client_input(client_name="client")
async def purge(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Purge one instance by id (``?instanceId=``), as the extension's e2e purge function does."""
    result = await client.purge_instance_history(req.params["instanceId"])
    return func.HttpResponse(f"Purged {result.instances_deleted} records")


@app.route(route="instances", methods=["GET"])
@app.durable_client_input(client_name="client")
async def list_all(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Every instance as the SDK's get_status_all returns it."""
    rows = await client.get_status_all()
    return func.HttpResponse(json.dumps([r.to_json() for r in rows]), mimetype="application/json")


@app.route(route="status", methods=["GET"])
@app.durable_client_input(client_name="client")
async def status(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """One instance's status through the SDK (404 when it has none)."""
    st = await client.get_status(req.params["instanceId"], show_input=True)
    if st.runtime_status is None:
        return func.HttpResponse(status_code=404)
    return func.HttpResponse(json.dumps(st.to_json()), mimetype="application/json")
