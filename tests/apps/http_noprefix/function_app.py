"""HTTP trigger test app with an empty route prefix (routes sit at the site root)."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="", methods=["GET"])
def root(req: func.HttpRequest) -> str:
    # The library turns an empty route into the function name, so this is served at /root.
    return "root"


@app.route(route="hello/{name:alpha}", methods=["GET"])
def hello(req: func.HttpRequest) -> str:
    return f"hello {req.route_params['name']}"


@app.route(route="admin/host/status", methods=["GET"])
def shadowed(req: func.HttpRequest) -> str:
    # Never reached: /admin is reserved for the host, as in the Functions runtime.
    return "shadowed"
