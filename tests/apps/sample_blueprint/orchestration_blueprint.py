"""Durable functions defined on a blueprint, registered by function_app.py into a plain FunctionApp."""

import azure.durable_functions as df
import azure.functions as func

bp = df.Blueprint()


@bp.route(route="startOrchestrator", methods=["POST"])
@bp.durable_client_input(client_name="client")
async def start_orchestrator(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the sequence and return the check-status response."""
    instance_id = await client.start_new("blueprint_sequence")
    return client.create_check_status_response(req, instance_id)


@bp.orchestration_trigger(context_name="context")
def blueprint_sequence(context: df.DurableOrchestrationContext):
    """Three sequential greetings."""
    results = []
    for city in ("Tokyo", "Seattle", "London"):
        results.append((yield context.call_activity("blueprint_hello", city)))
    return results


@bp.activity_trigger(input_name="city")
def blueprint_hello(city: str) -> str:
    """Build one greeting."""
    return f"Hello {city}!"
