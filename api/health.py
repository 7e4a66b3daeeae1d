"""Liveness endpoint: answers without touching any dependency (503 CONFIG_ERROR while settings are invalid)."""

import json

import azure.durable_functions as df
import azure.functions as func

from api.contract.bodies import Health, dump_body
from api.errors import config_error, error_response


def register(bp: df.Blueprint) -> None:
    """Register the health route on the blueprint."""

    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def health(req: func.HttpRequest) -> func.HttpResponse:
        """Report that the worker is up, or that its settings keep it from working."""
        from shared.runtime.settings import ConfigError, get_settings

        try:
            get_settings()  # validation only: nothing is built or connected
        except ConfigError as exc:
            err = config_error(exc)
            return error_response(err.status, err.code, err.message, err.field)
        return func.HttpResponse(json.dumps(dump_body(Health(status="ok"))), mimetype="application/json")
