"""Orchestrator functions of the app."""

import azure.durable_functions as df

blueprint = df.Blueprint()
