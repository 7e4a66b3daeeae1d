"""Broken app: an HTTP function with a parameter that no binding supplies."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="hello")
def hello(req: func.HttpRequest, tenant: str) -> str:
    return f"hello {tenant}"
