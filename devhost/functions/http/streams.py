"""HTTP streams (the ``azurefunctions-extensions-http-fastapi`` extension) as the Python worker serves them.

A function whose trigger parameter is annotated with the extension's ``Request`` (FastAPI's, a Starlette
request) or whose return is annotated with one of its responses gets the live Starlette request (its body
unread, route values in ``path_params``) and may return any Starlette response, which the server sends as
it is produced: a ``StreamingResponse`` streams. devhost imports neither the extension nor FastAPI: both
types are Starlette's, which devhost serves with.

Azure's worker switches every HTTP function of an app to streams once the extension is imported; devhost
decides per function, by its annotations.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response


def _resolved(annotation: Any, scope: dict[str, Any]) -> Any:
    """An annotation as an object (``from __future__ import annotations`` leaves strings); None when unresolvable."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, scope)  # noqa: S307 - the app's own annotation, in the app's own module
    except Exception:
        return None


def _is_subclass(value: Any, base: type) -> bool:
    return inspect.isclass(value) and issubclass(value, base)


def uses_streams(user_function: Callable[..., Any], trigger_param: str) -> bool:
    """Whether the function takes the streams extension's request or returns its response type."""
    target = inspect.unwrap(user_function)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return False
    scope = dict(getattr(target, "__globals__", {}))
    param = signature.parameters.get(trigger_param)
    if param is not None and _is_subclass(_resolved(param.annotation, scope), Request):
        return True
    return _is_subclass(_resolved(signature.return_annotation, scope), Response)


def stream_request(request: Request, route_params: Mapping[str, str], headers: Mapping[str, str] | None) -> Request:
    """The request the function gets: the same body stream, route values, and the headers as the app sees them."""
    scope = dict(request.scope)
    scope["path_params"] = dict(route_params)
    if headers is not None:
        scope["headers"] = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    return Request(scope, request.receive)
