"""HTTP trigger test app: routes, constraints, methods, auth levels and request/response mapping."""

import asyncio
import json
import logging
import threading

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


def _echo(req: func.HttpRequest) -> dict:
    return {
        "method": req.method,
        "url": req.url,
        "params": dict(req.params),
        "route_params": dict(req.route_params),
        "headers": {k: v for k, v in req.headers.items()},
        "body": req.get_body().decode("utf-8", errors="replace"),
    }


@app.route(route="health", methods=["GET"])
def health(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("ok")


@app.route(route="echo/{*rest}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def echo(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(_echo(req)), mimetype="application/json")


@app.route(route="items/{id:int}", methods=["GET"])
def item_by_id(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"by": "id", **req.route_params}), mimetype="application/json")


@app.route(route="items/{slug:alpha}", methods=["GET"])
def item_by_slug(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"by": "slug", **req.route_params}), mimetype="application/json")


@app.route(route="items/special", methods=["GET"])
def item_special(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps({"by": "literal"}), mimetype="application/json")


@app.route(route="guid/{id:guid}", methods=["GET"])
def by_guid(req: func.HttpRequest) -> str:
    return req.route_params["id"]


@app.route(route="page/{n:min(1)}", methods=["GET"])
def page(req: func.HttpRequest) -> str:
    return f"page {req.route_params['n']}"


@app.route(route="opt/{name?}", methods=["GET"])
def optional(req: func.HttpRequest) -> str:
    return "name=" + req.route_params.get("name", "<none>")


@app.route(route="dflt/{size=10}", methods=["GET"])
def default_value(req: func.HttpRequest) -> str:
    return "size=" + req.route_params["size"]


@app.route(route="files/{name}.{ext?}", methods=["GET"])
def files(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(dict(req.route_params)), mimetype="application/json")


@app.route(route="only-post", methods=["POST"])
def only_post(req: func.HttpRequest) -> str:
    return "posted"


@app.route(route="anymethod")
def any_method(req: func.HttpRequest) -> str:
    return req.method


@app.function_name(name="DefaultRoute")
@app.route(methods=["GET"])
def default_route(req: func.HttpRequest) -> str:
    return "default route is the function name"


@app.route(route="auth/function", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def auth_function(req: func.HttpRequest) -> str:
    return "function ok"


@app.route(route="auth/admin", methods=["GET"], auth_level=func.AuthLevel.ADMIN)
def auth_admin(req: func.HttpRequest) -> str:
    return "admin ok"


@app.route(route="respond", methods=["POST"])
def respond(req: func.HttpRequest) -> func.HttpResponse:
    spec = req.get_json()
    return func.HttpResponse(
        body=spec.get("body"),
        status_code=spec.get("status", 200),
        headers=spec.get("headers"),
        mimetype=spec.get("mimetype"),
        charset=spec.get("charset"),
    )


@app.route(route="binary", methods=["GET"])
def binary(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(bytes(range(256)), mimetype="application/octet-stream")


@app.route(route="cookies", methods=["GET"])
def cookies(req: func.HttpRequest) -> func.HttpResponse:
    resp = func.HttpResponse("cookies")
    resp.headers.add("Set-Cookie", "a=1; Path=/")
    resp.headers.add("Set-Cookie", "b=2; Path=/")
    return resp


@app.route(route="text", methods=["GET"])
def text(req: func.HttpRequest) -> str:
    return "plain text ü"


@app.route(route="boom", methods=["GET"])
def boom(req: func.HttpRequest) -> func.HttpResponse:
    raise RuntimeError("secret internal detail 42")


@app.route(route="aboom", methods=["GET"])
async def aboom(req: func.HttpRequest) -> func.HttpResponse:
    raise ValueError("async secret detail 43")


@app.route(route="badreturn", methods=["GET"])
def badreturn(req: func.HttpRequest) -> dict:
    return {"not": "a response"}


@app.route(route="sync-thread", methods=["GET"])
def sync_thread(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(
            {"main": threading.current_thread() is threading.main_thread(), "name": threading.current_thread().name}
        ),
        mimetype="application/json",
    )


@app.route(route="async-loop", methods=["GET"])
async def async_loop(req: func.HttpRequest) -> func.HttpResponse:
    await asyncio.sleep(0)
    return func.HttpResponse(
        json.dumps(
            {"main": threading.current_thread() is threading.main_thread(), "loop": id(asyncio.get_running_loop())}
        ),
        mimetype="application/json",
    )


@app.route(route="slow/{ms:int}", methods=["GET"])
async def slow(req: func.HttpRequest) -> str:
    await asyncio.sleep(int(req.route_params["ms"]) / 1000)
    return "slept"


@app.route(route="ctx", methods=["GET"])
def with_context(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    logging.info("context invocation %s", context.invocation_id)
    return func.HttpResponse(
        json.dumps(
            {
                "invocation_id": context.invocation_id,
                "function_name": context.function_name,
                "function_directory": context.function_directory,
                "trace_parent": context.trace_context.trace_parent,
                "retry_count": context.retry_context.retry_count,
                "tls": type(context.thread_local_storage).__name__,
            }
        ),
        mimetype="application/json",
    )


@app.route(route="form", methods=["POST"])
def form(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(dict(req.form)), mimetype="application/json")


@app.route(route="nothing", methods=["GET"])
def nothing(req: func.HttpRequest) -> None:
    logging.info("returning nothing")
