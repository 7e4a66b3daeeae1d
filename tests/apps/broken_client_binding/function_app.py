"""Broken app: the durable client binding sits on the orchestrator instead of the HTTP starter."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.durable_client_input(client_name="client")
@app.orchestration_trigger(context_name="context")
def work(context: df.DurableOrchestrationContext):  # noqa: ANN201
    return (yield context.call_activity("say", "x"))


@app.route(route="start")
async def start(req: func.HttpRequest, client) -> func.HttpResponse:  # noqa: ANN001 - meant to be the client
    instance_id = await client.start_new("work")
    return client.create_check_status_response(req, instance_id)


@app.activity_trigger(input_name="text")
def say(text: str) -> str:
    return text
