"""The job API's ``azure.functions`` HTTP handlers under the HTTP streams extension.

Once ``azurefunctions.extensions.http.fastapi`` is imported (api/events.py streams), Azure's Python worker
serves every HTTP function of the app through it: whatever the annotation says, the trigger parameter is
FastAPI's request and the return value goes back as a FastAPI response. The other routes of this app are
written against ``func.HttpRequest``/``func.HttpResponse``, so each is wrapped here: a Starlette request is
turned into an ``HttpRequest`` (method, URL, headers, query, route values, body) and the ``HttpResponse`` into a
Starlette response. An ``HttpRequest`` (devhost, which decides per function, and tests) passes through unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.http.fastapi import Request, Response

Handler = Callable[..., Any]


async def to_func_request(request: Request) -> func.HttpRequest:
    """The ``HttpRequest`` the worker would have built from this request."""
    params: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        params[key] = f"{params[key]},{value}" if key in params else value
    return func.HttpRequest(
        method=request.method,
        url=str(request.url),
        headers=dict(request.headers.items()),
        params=params,
        route_params={k: str(v) for k, v in request.path_params.items()},
        body=await request.body(),
    )


def to_response(result: Any) -> Any:
    """A Starlette response for an ``HttpResponse`` (or a ``str``, as the worker maps it); others as they are."""
    if isinstance(result, func.HttpResponse):
        headers = {k: v for k, v in result.headers.items() if k.lower() != "content-type"}
        media = result.headers.get("content-type") or result.mimetype
        if media and result.charset and "charset" not in media and media.startswith("text/"):
            media = f"{media}; charset={result.charset}"
        return Response(result.get_body(), status_code=result.status_code, headers=headers, media_type=media)
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
