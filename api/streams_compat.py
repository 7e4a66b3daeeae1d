"""The job API's ``azure.functions`` HTTP handlers under the HTTP streams extension.

Once ``azurefunctions.extensions.http.fastapi`` is imported (api/events.py streams), Azure's Python worker
serves every HTTP function of the app through it: whatever the annotation says, the trigger parameter is
FastAPI's request and the return value goes back as a FastAPI response. The other routes of this app are
written against ``func.HttpRequest``/``func.HttpResponse``, so each is wrapped here: a Starlette request is
turned into an ``HttpRequest`` (method, URL, headers, query, route values, body) and the ``HttpResponse`` into a
Starlette response. An ``HttpRequest`` (devhost, which decides per function, and tests) passes through unchanged.

Why every function: the worker's invocation handler (Azure/azure-functions-python-worker,
azure_functions_worker/dispatcher.py, ``_handle__invocation_request``) decides with
``http_v2_enabled = fi.is_http_func and HttpV2Registry.http_v2_enabled()``; the registry's flag is one per
process, set when the extension is importable and ``PYTHON_ENABLE_INIT_INDEXING`` is on, and for every HTTP
function it then replaces the trigger argument with the request from its own web server and hands the return
value to that server as the response (no ``$return`` conversion). Microsoft's announcement says the same:
"when enabling HTTP streams, the function app will default to using HTTP streaming, and the original HTTP
functionality will not work" (techcommunity.microsoft.com, "Azure Functions support for HTTP streams in Python").

What the worker's own conversion does, this does too: repeated request headers and query keys are joined with
commas (as the host builds ``HttpRequest`` headers and params), the body is bytes both ways, and a response's
repeated headers (several ``Set-Cookie``) are all sent.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.http.fastapi import Request, Response

Handler = Callable[..., Any]


async def to_func_request(request: Request) -> func.HttpRequest:
    """The ``HttpRequest`` the worker would have built from this request."""
    return func.HttpRequest(
        method=request.method,
        url=str(request.url),
        headers=_joined(request.headers.items()),
        params=_joined(request.query_params.multi_items()),
        route_params={k: str(v) for k, v in request.path_params.items()},
        body=await request.body(),
    )


def _joined(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Pairs as one mapping, the values of a repeated key joined with commas (as the host passes them)."""
    joined: dict[str, str] = {}
    for key, value in pairs:
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    return joined


# Set by Starlette from the response itself (the body's length, the media type).
_DERIVED_HEADERS = frozenset({"content-type", "content-length"})


def to_response(result: Any) -> Any:
    """A Starlette response for an ``HttpResponse`` (or a ``str``, as the worker maps it); others as they are."""
    if isinstance(result, func.HttpResponse):
        media = result.headers.get("content-type") or result.mimetype
        if media and result.charset and "charset" not in media and media.startswith("text/"):
            media = f"{media}; charset={result.charset}"
        response = Response(result.get_body(), status_code=result.status_code, media_type=media)
        # Appended one by one: a header the handler set twice (Set-Cookie) is sent twice.
        for key, value in result.headers.items():
            if key.lower() not in _DERIVED_HEADERS:
                response.headers.append(key, value)
        return response
    if isinstance(result, str):
        return Response(result, media_type="text/plain")
    return result


def adapt(handler: Handler, trigger: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``handler`` taking a Starlette request too (converted both ways); an ``HttpRequest`` passes through."""
    is_async = inspect.iscoroutinefunction(handler)

    @functools.wraps(handler)
    async def adapted(*args: Any, **kwargs: Any) -> Any:
        given = kwargs.get(trigger)
        streams = isinstance(given, Request)
        if isinstance(given, Request):
            kwargs[trigger] = await to_func_request(given)
        result = await handler(*args, **kwargs) if is_async else await asyncio.to_thread(handler, *args, **kwargs)
        return to_response(result) if streams else result

    adapted.streams_compat = True  # type: ignore[attr-defined]
    return adapted


def takes_streams_request(handler: Handler, trigger: str) -> bool:
    """Whether the handler's trigger parameter is annotated with the streams extension's (Starlette) request."""
    target = inspect.unwrap(handler)
    param = inspect.signature(target).parameters.get(trigger)
    annotation = param.annotation if param is not None else None
    if isinstance(annotation, str):
        annotation = getattr(target, "__globals__", {}).get(annotation)
    return inspect.isclass(annotation) and issubclass(annotation, Request)


def adapt_http_functions(bp: df.Blueprint) -> None:
    """Wrap every HTTP function of the blueprint written for ``azure.functions`` types (see the module doc)."""
    for builder in bp._function_builders:
        function = builder._function
        trigger = function.get_trigger()
        if trigger is None or trigger.type != "httpTrigger":
            continue
        user = function.get_user_function()
        if not takes_streams_request(user, trigger.name):
            function._func = adapt(user, trigger.name)
