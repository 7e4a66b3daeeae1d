"""Broken app: importing it fails inside a helper module, so the traceback must name both files."""

import azure.functions as func
from helper_module import make_settings

app = func.FunctionApp()
SETTINGS = make_settings()
