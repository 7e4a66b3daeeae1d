"""Human interaction: send a challenge code, then race the reply event against a deadline timer.

Up to three answers are accepted before the deadline; the right code approves, the deadline rejects.
The deadline is passed in (seconds) so tests stay fast.
"""

import json
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="verify", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_verification(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Body: {"phone": "...", "timeout_s": 30}."""
    instance_id = await client.start_new("verify_phone", None, req.get_json())
    return client.create_check_status_response(req, instance_id)


@app.route(route="verify/{instance_id}/answer", methods=["POST"])
@app.durable_client_input(client_name="client")
async def answer(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Forward the user's code to the waiting orchestration."""
    await client.raise_event(req.route_params["instance_id"], "ChallengeResponse", req.get_json()["code"])
    return func.HttpResponse(status_code=202)


@app.orchestration_trigger(context_name="context")
def verify_phone(context: df.DurableOrchestrationContext):
    """Approve when the right code arrives before the deadline."""
    request = context.get_input()
    code = yield context.call_activity("send_challenge", request["phone"])
    deadline = context.current_utc_datetime + timedelta(seconds=request["timeout_s"])
    timer = context.create_timer(deadline)
    attempts = 0
    while attempts < 3:
        context.set_custom_status({"attempts": attempts, "waiting": True})
        reply = context.wait_for_external_event("ChallengeResponse")
        winner = yield context.task_any([reply, timer])
        if winner == timer:
            return {"approved": False, "reason": "timed out", "attempts": attempts}
        attempts += 1
        # DurableOrchestrationClient.raise_event JSON-encodes the data twice, so it arrives as JSON text.
        answer_value = json.loads(reply.result) if isinstance(reply.result, str) else reply.result
        if int(answer_value) == code:
            timer.cancel()
            return {"approved": True, "attempts": attempts}
    timer.cancel()
    return {"approved": False, "reason": "too many attempts", "attempts": attempts}


@app.activity_trigger(input_name="phone")
def send_challenge(phone: str) -> int:
    """Pretend to text a code; the code is derived from the number so the test can compute it."""
    return sum(ord(c) for c in phone) % 10000
