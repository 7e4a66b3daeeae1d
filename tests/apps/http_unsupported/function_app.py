"""An HTTP function with a queue output binding devhost cannot run (its connection setting is not set)."""

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="enqueue", methods=["POST"])
@app.queue_output(arg_name="msg", queue_name="outqueue", connection="AzureWebJobsStorage")
def enqueue(req: func.HttpRequest, msg: func.Out[str]) -> str:
    msg.set(req.get_body().decode())
    return "queued"
