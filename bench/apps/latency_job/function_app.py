"""The product's blueprints with simulated provider latency (benchmark app, never deployed)."""

import azure.durable_functions as df
import azure.functions as func

from activities import blueprint as activities_blueprint
from api import blueprint as api_blueprint
from bench.latency import latency_clients
from orchestrators import blueprint as orchestrators_blueprint
from shared.providers.clients import set_clients

set_clients(latency_clients())

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(api_blueprint)
app.register_functions(orchestrators_blueprint)
app.register_functions(activities_blueprint)
