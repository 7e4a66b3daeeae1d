"""HTTP triggers of the app (the job API) and its retention timer. Never name this package ``http``."""

import azure.durable_functions as df

from api.artifacts import register as register_artifacts
from api.catalog import register as register_catalog
from api.contract.openapi import register as register_openapi
from api.cost_report import register as register_costs
from api.events import register as register_events
from api.fork import register as register_fork
from api.health import register as register_health
from api.job_costs import register as register_job_costs
from api.jobs import register as register_jobs
from api.logs import register as register_logs
from api.maintenance import register as register_maintenance
from api.runs import register as register_runs
from api.streams_compat import adapt_http_functions
from api.ui import register as register_ui

blueprint = df.Blueprint()
register_health(blueprint)
register_jobs(blueprint)
register_catalog(blueprint)
register_openapi(blueprint)
register_events(blueprint)
register_fork(blueprint)
register_artifacts(blueprint)
register_ui(blueprint)
register_maintenance(blueprint)
register_runs(blueprint)
register_logs(blueprint)
register_costs(blueprint)
register_job_costs(blueprint)
# On Azure the streams extension serves every HTTP function: the others keep their azure.functions types.
adapt_http_functions(blueprint)
