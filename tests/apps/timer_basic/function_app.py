"""Timer-trigger app: a timer (schedule from the TICK_SCHEDULE setting, also run on startup) that starts an
orchestration through its durable client and appends what it received to the file TIMER_OUT."""

import json
import os
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.timer_trigger(arg_name="timer", schedule="%TICK_SCHEDULE%", run_on_startup=True, use_monitor=False)
@app.durable_client_input(client_name="client")
async def tick(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    """Start one 'echo' orchestration per tick and record the timer request."""
    instance_id = await client.start_new("echo", None, {"past_due": timer.past_due})
    # The worker passes azure.functions.timer.TimerRequest; the abstract func.TimerRequest types only past_due.
    status: dict = getattr(timer, "schedule_status", {})
    line = {
        "instance_id": instance_id,
        "past_due": timer.past_due,
        "last": status.get("Last"),
        "next": status.get("Next"),
        "type": type(timer).__name__,
    }
    with Path(os.environ["TIMER_OUT"]).open("a", encoding="utf-8") as out:  # noqa: ASYNC230 - one tiny line
        out.write(json.dumps(line) + "\n")


@app.orchestration_trigger(context_name="context")
def echo(context: df.DurableOrchestrationContext):
    """Return the input."""
    return context.get_input()
    yield  # a generator, as orchestrators are
