"""Functions turned off by AzureWebJobs.<name>.Disabled, as the extension's e2e app has them.

The test's settings disable off_activity, OffEntity and off_route and leave on_activity on. Orchestrations
calling the disabled activity or entity must fail with the extension's message instead of waiting forever.
"""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="value")
def on_activity(value: str) -> str:
    """Still enabled."""
    return f"on {value}"


@app.activity_trigger(input_name="value")
def off_activity(value: str) -> str:
    """Disabled by its setting."""
    return value


@app.entity_trigger(context_name="context")
def OffEntity(context: df.DurableEntityContext) -> None:  # noqa: N802 - the entity's public name
    """Disabled by its setting."""
    context.set_result(None)


@app.orchestration_trigger(context_name="context")
def call_on(context: df.DurableOrchestrationContext):
    """Calls the enabled activity."""
    return (yield context.call_activity("on_activity", "x"))


@app.orchestration_trigger(context_name="context")
def call_off_activity(context: df.DurableOrchestrationContext):
    """Calls the disabled activity."""
    return (yield context.call_activity("off_activity", "x"))


@app.orchestration_trigger(context_name="context")
def call_off_entity(context: df.DurableOrchestrationContext):
    """Calls an operation of the disabled entity."""
    yield context.call_entity(df.EntityId("OffEntity", "k"), "op")
    return "should not reach here"


@app.route(route="start/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start an orchestration by name."""
    instance_id = await client.start_new(req.route_params["name"])
    return client.create_check_status_response(req, instance_id)


@app.route(route="off", methods=["GET"])
def off_route(req: func.HttpRequest) -> func.HttpResponse:
    """Disabled by its setting: no route."""
    return func.HttpResponse("should not answer")
