"""Broken app: functions are defined but no module-level FunctionApp/DFApp exists."""

import azure.functions as func


def make_app() -> func.FunctionApp:
    """The app object never reaches module scope."""
    return func.FunctionApp()
