"""Broken app: an HTTP route template with an unknown constraint."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="items/{id:integer}")
def items(req: func.HttpRequest) -> str:
    return "never served"
