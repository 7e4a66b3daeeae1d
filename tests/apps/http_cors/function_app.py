"""HTTP app for the CORS test; the test writes its local.settings.json (CORS origins and an app setting)."""

import os

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)


@app.route(route="greeting", methods=["GET", "POST"])
def greeting(req: func.HttpRequest) -> str:
    return os.environ.get("CORS_TEST_GREETING", "<unset>")
