"""Broken app: two functions registered under exactly the same name."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.function_name(name="hello")
@app.route(route="a")
def hello_a(req: func.HttpRequest) -> str:
    return "a"


@app.function_name(name="hello")
@app.route(route="b")
def hello_b(req: func.HttpRequest) -> str:
    return "b"
