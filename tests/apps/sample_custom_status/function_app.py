"""Chaining with custom status: each step publishes progress that clients read from the status endpoint."""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

STEPS = ["fetch", "transform", "store"]


@app.route(route="pipeline", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_pipeline(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the pipeline; ``?wait=1`` waits for the result (wait_for_completion_or_create_check_status_response)."""
    instance_id = await client.start_new("pipeline", None, req.get_json())
    if req.params.get("wait"):
        return await client.wait_for_completion_or_create_check_status_response(req, instance_id, 20000, 100)
    return client.create_check_status_response(req, instance_id)


@app.route(route="pipeline/{instance_id}/go", methods=["POST"])
@app.durable_client_input(client_name="client")
async def release(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Let a pipeline that waits between steps continue."""
    await client.raise_event(req.route_params["instance_id"], "go")
    return func.HttpResponse(status_code=202)


@app.orchestration_trigger(context_name="context")
def pipeline(context: df.DurableOrchestrationContext):
    """Run each step, publishing {"step", "done"} as custom status; optionally pause for "go" after each."""
    options = context.get_input() or {}
    done: list[str] = []
    for step in STEPS:
        context.set_custom_status({"step": step, "done": list(done)})
        done.append((yield context.call_activity("run_step", step)))
        if options.get("pause"):
            context.set_custom_status({"step": step, "done": list(done), "paused": True})
            yield context.wait_for_external_event("go")
    context.set_custom_status({"step": None, "done": done})
    return done


@app.activity_trigger(input_name="step")
def run_step(step: str) -> str:
    """Do one step of work."""
    return f"{step}:ok"
