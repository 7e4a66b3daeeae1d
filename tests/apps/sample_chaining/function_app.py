"""Function chaining: a generic starter route, one orchestrator calling an activity three times in sequence."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="orchestrators/{functionName}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the orchestrator named in the URL and answer with the check-status links."""
    instance_id = await client.start_new(req.route_params["functionName"])
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def greet_cities(context: df.DurableOrchestrationContext):
    """Greet three cities one after the other; each step waits for the previous one."""
    first = yield context.call_activity(welcome, "Tokyo")
    second = yield context.call_activity(welcome, "Seattle")
    third = yield context.call_activity("welcome", "London")
    return [first, second, third]


@app.activity_trigger(input_name="city")
def welcome(city: str) -> str:
    """Build one greeting."""
    return f"Hello {city}!"
