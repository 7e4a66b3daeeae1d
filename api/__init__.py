"""HTTP triggers of the app (the job API). Never name this package ``http``."""

import azure.durable_functions as df

from api.health import register as register_health

blueprint = df.Blueprint()
register_health(blueprint)
