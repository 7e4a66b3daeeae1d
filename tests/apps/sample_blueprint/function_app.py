"""A plain func.FunctionApp (function-level auth) with a Durable blueprint and an ordinary HTTP trigger."""

import azure.functions as func
from orchestration_blueprint import bp

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(bp)


@app.route(route="HttpTrigger")
def http_trigger(req: func.HttpRequest) -> func.HttpResponse:
    """Greet by the ``name`` query parameter or JSON body field."""
    name = req.params.get("name")
    if not name:
        try:
            name = req.get_json().get("name")
        except ValueError:
            name = None
    if not name:
        return func.HttpResponse("Pass a name in the query string or in the request body.", status_code=400)
    return func.HttpResponse(f"Hello, {name}. This HTTP triggered function executed successfully.")
