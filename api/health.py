"""Liveness endpoint: answers without touching any dependency."""

import json

import azure.durable_functions as df
import azure.functions as func


def register(bp: df.Blueprint) -> None:
    """Register the health route on the blueprint."""

    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def health(req: func.HttpRequest) -> func.HttpResponse:
        """Report that the worker is up."""
        return func.HttpResponse(json.dumps({"status": "ok"}), mimetype="application/json")
