"""Monitor: poll a job's state on a timer until it is done or the monitor expires."""

import threading
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

# Number of times each job has been checked; the fake job finishes after its ``done_after`` checks.
_checks: dict[str, int] = {}
_lock = threading.Lock()


@app.route(route="monitor", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_monitor(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Body: {"job": "name", "done_after": 3, "interval_s": 0.2, "expires_s": 30}."""
    instance_id = await client.start_new("monitor_job", None, req.get_json())
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def monitor_job(context: df.DurableOrchestrationContext):
    """Check, sleep, check again; stop when the job is done or the monitor's time is up."""
    spec = context.get_input()
    expires = context.current_utc_datetime + timedelta(seconds=spec["expires_s"])
    checks = 0
    while context.current_utc_datetime < expires:
        state = yield context.call_activity("check_job", spec)
        checks += 1
        context.set_custom_status({"checks": checks, "state": state})
        if state == "done":
            yield context.call_activity("notify", spec["job"])
            return {"job": spec["job"], "state": "done", "checks": checks}
        next_check = context.current_utc_datetime + timedelta(seconds=spec["interval_s"])
        yield context.create_timer(min(next_check, expires))
    return {"job": spec["job"], "state": "expired", "checks": checks}


@app.activity_trigger(input_name="spec")
def check_job(spec: dict) -> str:
    """Report 'done' once the job has been checked ``done_after`` times."""
    with _lock:
        _checks[spec["job"]] = _checks.get(spec["job"], 0) + 1
        count = _checks[spec["job"]]
    return "done" if count >= spec["done_after"] else "running"


@app.activity_trigger(input_name="job")
def notify(job: str) -> str:
    """Pretend to alert someone."""
    return f"{job} is done"
