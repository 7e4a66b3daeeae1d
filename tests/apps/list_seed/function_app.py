"""The product's job API over instances that cost nothing to run (benchmark and test app, never deployed).

``job_orchestrator`` here completes at once with a fixed answer, so bench/soak.py can seed tens of
thousands of job instances through the Durable HTTP API in a minute or two and time ``GET /api/jobs``
(the real api blueprint) against them; tests/api/test_listing.py pages through it over HTTP.
"""

import azure.durable_functions as df
import azure.functions as func

from api import blueprint as api_blueprint
from shared.jobs.models import ORCHESTRATOR_NAME

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(api_blueprint)


@app.orchestration_trigger(context_name="context", orchestration=ORCHESTRATOR_NAME)
def seeded_job(context: df.DurableOrchestrationContext):
    """Complete at once, as a finished job would look in the list."""
    return {"answer": "seeded", "citations": []}
    yield  # a generator, as orchestrators are
