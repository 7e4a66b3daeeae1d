"""Broken app: two top-level app objects."""

import azure.durable_functions as df
import azure.functions as func

app = func.FunctionApp()
other_app = df.DFApp()
