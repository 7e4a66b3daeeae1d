"""Sub-orchestration: a parent calls a child orchestrator, which calls an activity."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="orchestrators/{functionName}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def durable_trigger(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the named orchestrator."""
    instance_id = await client.start_new(req.route_params["functionName"])
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def parent_orchestrator(context: df.DurableOrchestrationContext):
    """Delegate the greeting to a child orchestration with a predictable id."""
    child_id = f"{context.instance_id}:child"
    greeting = yield context.call_sub_orchestrator("child_orchestrator", "Seattle", child_id)
    return greeting


@app.orchestration_trigger(context_name="context")
def child_orchestrator(context: df.DurableOrchestrationContext):
    """Greet the city given as input."""
    city = context.get_input()
    return (yield context.call_activity("hello", city))


@app.activity_trigger(input_name="city")
def hello(city: str) -> str:
    """Build the greeting."""
    return f"Hello {city}"
