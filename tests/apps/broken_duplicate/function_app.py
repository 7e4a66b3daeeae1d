"""Broken app: two functions whose names differ only in case."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="one")
def status(req: func.HttpRequest) -> str:
    return "one"


@app.function_name(name="Status")
@app.route(route="two")
def status_two(req: func.HttpRequest) -> str:
    return "two"
