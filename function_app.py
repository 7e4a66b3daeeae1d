"""Durable AI Jobs function app: creates the app, registers the blueprints and wires job telemetry, nothing else."""

import azure.durable_functions as df
import azure.functions as func

from activities import blueprint as activities_blueprint
from api import blueprint as api_blueprint
from api.definitions import blueprint as definitions_blueprint
from api.verified_queries import blueprint as verified_queries_blueprint
from orchestrators import blueprint as orchestrators_blueprint
from orchestrators.run.record import set_job_events
from shared.runtime import telemetry
from shared.runtime.settings import check_settings_at_startup

# Under Core Tools or devhost (FUNCTIONS_CORETOOLS_ENVIRONMENT=true) bad settings stop the start; on Azure
# it does nothing, and every request answers 503 CONFIG_ERROR instead.
check_settings_at_startup()

# The orchestrator imports nothing that reads settings or files: its status and cost events go through here.
set_job_events(telemetry)

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(api_blueprint)
app.register_functions(definitions_blueprint)
app.register_functions(verified_queries_blueprint)
app.register_functions(orchestrators_blueprint)
app.register_functions(activities_blueprint)
