"""The devhost's ASGI application: HTTP triggers, host admin status and the Durable HTTP API.

One ``DevHost`` instance is served on two sockets of the same event loop (two uvicorn servers, see
devhost.cli): the public listener (``--host``/``--port``) and a loopback-only RPC listener on an
ephemeral port. Requests are told apart by the local port they arrived on (``scope["server"]``). The RPC listener
serves only ``/durabletask/...`` and needs no key, like the extension's local RPC endpoint; the public
listener enforces auth levels and the system key on ``/runtime/webhooks/durabletask/...``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from devhost.durable.http_api import RPC_PATH, WEBHOOK_PATH, DurableHttpApi, Engine
from devhost.durable.http_wire import json_response
from devhost.functions.http.easyauth import EasyAuthSimulation, PrincipalSpecError
from devhost.functions.http.httpmap import (
    UnsupportedReturn,
    from_func_result,
    header_dict,
    origin_of,
    to_func_request,
)
from devhost.functions.http.keys import HostKeys
from devhost.functions.http.routing import RouteTable, RouteTemplateError
from devhost.functions.http.streams import stream_request, uses_streams
from devhost.functions.invocation import InvocationContext
from devhost.functions.model import AppLoadError, FunctionInfo, LoadedApp
from devhost.storage.bindings import add_binding_arguments, run_bound

log = logging.getLogger("devhost.host")

DEVHOST_VERSION = "0.1.0"
# The Functions host rejects request bodies over 100 MB (HTTP 413).
MAX_REQUEST_BYTES = 100 * 1024 * 1024
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def enum_text(value: Any) -> str:
    """Text of a binding value that may be an enum (``AuthLevel.ANONYMOUS``) or a plain string."""
    raw = getattr(value, "value", value)
    return str(raw)


def http_methods(fn: FunctionInfo) -> list[str] | None:
    """Upper-case methods of an HTTP trigger, None when it accepts any method."""
    methods = fn.trigger.get("methods")
    if not methods:
        return None
    return [enum_text(m).upper() for m in methods]


def auth_level(fn: FunctionInfo) -> str:
    """``anonymous``, ``function`` or ``admin`` (the Functions default is ``function``)."""
    level = fn.trigger.get("authLevel")
    text = enum_text(level).lower() if level is not None else "function"
    if text not in ("anonymous", "function", "admin"):
        raise AppLoadError(f"Function '{fn.name}' has an unknown authLevel '{text}'.")
    return text


def presented_key(request: Request) -> str | None:
    """The key a caller presented: ``code`` query parameter, else the ``x-functions-key`` header."""
    return request.query_params.get("code") or request.headers.get("x-functions-key") or None


@dataclass(frozen=True)
class CorsPolicy:
    """CORS as Core Tools applies it (local.settings.json ``Host.CORS`` / ``func start --cors``)."""

    origins: tuple[str, ...]
    credentials: bool = False

    @classmethod
    def parse(cls, text: str | None, credentials: bool = False) -> CorsPolicy | None:
        """Comma-separated origins or ``*``; None/empty means CORS is off."""
        origins = tuple(o.strip().rstrip("/") for o in (text or "").split(",") if o.strip())
        return cls(origins, credentials) if origins else None

    def allowed(self, origin: str) -> bool:
        """Whether a browser at ``origin`` may call the host."""
        return "*" in self.origins or origin.rstrip("/").lower() in {o.lower() for o in self.origins}

    def headers(self, origin: str) -> dict[str, str]:
        """Headers granting ``origin`` access (empty when it is not allowed)."""
        if not self.allowed(origin):
            return {}
        # A wildcard cannot be combined with credentials, so echo the origin in that case.
        allow = "*" if "*" in self.origins and not self.credentials else origin
        out = {"Access-Control-Allow-Origin": allow, "Vary": "Origin"}
        if self.credentials:
            out["Access-Control-Allow-Credentials"] = "true"
        return out


class BodyTooLarge(Exception):
    """The request body exceeds MAX_REQUEST_BYTES."""


async def read_body(request: Request, limit: int = MAX_REQUEST_BYTES) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes without buffering them."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _is_under(lower_path: str, root: str) -> bool:
    """Whether a lower-cased path is ``root`` itself or below it."""
    return lower_path == root or lower_path.startswith(root + "/")


class DevHost:
    """ASGI app serving one loaded function app."""

    def __init__(
        self,
        app: LoadedApp,
        engine: Engine,
        *,
        keys: HostKeys | None,
        public_origin: str,
        rpc_port: int,
        host_id: str | None = None,
        cors: CorsPolicy | None = None,
        easy_auth: EasyAuthSimulation | None = None,
    ) -> None:
        """``keys`` None disables auth (``--no-auth``); ``rpc_port`` is the loopback RPC listener's port."""
        self.easy_auth = easy_auth
        self.app = app
        self.engine = engine
        self.keys = keys
        self.rpc_port = rpc_port
        self.cors = cors
        self.public_origin = public_origin.rstrip("/")
        self.host_id = host_id or f"devhost-{socket.gethostname().lower()}"[:32]
        self.started_at = time.monotonic()
        self.durable = DurableHttpApi(
            engine,
            hub_name=app.host.hub_name,
            system_key=keys.system_key if keys else None,
            public_origin=self.public_origin,
            rpc_base_url=f"http://127.0.0.1:{rpc_port}{RPC_PATH}/",
        )
        self.routes: RouteTable[FunctionInfo] = RouteTable(app.host.route_prefix)
        for fn in app.by_kind("http"):
            route = fn.trigger.get("route") or fn.name
            try:
                self.routes.add(str(route), http_methods(fn), fn)
            except RouteTemplateError as exc:
                raise AppLoadError(f"Function '{fn.name}': invalid route template: {exc}") from None
            auth_level(fn)
        threads = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT")
        self._pool = ThreadPoolExecutor(
            max_workers=int(threads) if threads and threads.isdigit() and int(threads) > 0 else None,
            thread_name_prefix="devhost-fn",
        )
        self._signatures: dict[str, set[str]] = {}
        self._streams: dict[str, bool] = {}

    # ----- listing ------------------------------------------------------------------------

    def function_lines(self) -> list[str]:
        """One line per function, like ``func start`` prints them."""
        lines = []
        for fn in self.app.functions:
            if fn.kind == "http":
                methods = ",".join(http_methods(fn) or ALL_METHODS)
                path = self.routes.url_path(next(r for r in self.routes.routes if r.target is fn))
                lines.append(f"{fn.name}: [{methods}] {self.public_origin}{path}")
            else:
                trigger_type = str(fn.trigger.get("type", "unknown"))
                note = ""
                if fn.kind == "other":
                    note = " (not run by the devhost)"
                lines.append(f"{fn.name}: {trigger_type}{note}")
        return lines

    def close(self) -> None:
        """Release the thread pool; queued calls are cancelled, running ones are abandoned."""
        # Do not wait: a hung synchronous function must not keep the host from exiting.
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ----- ASGI entry -----------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point for both listeners."""
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        request = Request(scope, receive)
        origin = request.headers.get("origin")
        public = (scope.get("server") or (None, None))[1] != self.rpc_port
        cors = self.cors if public and origin else None
        if cors is not None and origin and self._is_preflight(request):
            await self._preflight(cors, origin, request)(scope, receive, send)
            return
        try:
            response = await self._route(request)
        except Exception:
            log.exception("Unhandled error serving %s %s", request.method, request.url.path)
            response = Response(status_code=500)
        if cors is not None and origin:
            for name, value in cors.headers(origin).items():
                response.headers[name] = value
        await response(scope, receive, send)

    @staticmethod
    def _is_preflight(request: Request) -> bool:
        return request.method == "OPTIONS" and "access-control-request-method" in request.headers

    @staticmethod
    def _preflight(cors: CorsPolicy, origin: str, request: Request) -> Response:
        headers = cors.headers(origin)
        if headers:
            headers["Access-Control-Allow-Methods"] = request.headers["access-control-request-method"]
            requested = request.headers.get("access-control-request-headers")
            if requested:
                headers["Access-Control-Allow-Headers"] = requested
            headers["Access-Control-Max-Age"] = "600"
        return Response(status_code=204, headers=headers)

    async def _route(self, request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        server = request.scope.get("server")
        if server is not None and server[1] == self.rpc_port:
            return await self._route_rpc(request, path)
        reserved = await self._route_reserved(request, path)
        if reserved is not None:
            return reserved
        return await self._route_function(request, path)

    async def _route_rpc(self, request: Request, path: str) -> Response:
        """The loopback RPC listener serves only the durable RPC API."""
        if _is_under(path.lower(), RPC_PATH):
            return await self.durable.handle(request, path[len(RPC_PATH) :], self.public_origin)
        return Response(status_code=404)

    async def _route_reserved(self, request: Request, path: str) -> Response | None:
        """Host-owned paths (admin API, durable webhooks, Easy Auth); None when the path is the app's."""
        lower = path.lower()
        if lower.rstrip("/") == "/admin/host/status":
            # An admin API, as on the Functions host: the master key, unless auth is off (--no-auth).
            if self.keys is not None and not self.keys.is_master(presented_key(request)):
                return Response(status_code=401)
            return self._host_status()
        if lower.rstrip("/") == "/admin/host/ping" and request.method in ("GET", "HEAD", "POST"):
            return Response(status_code=200)  # anonymous liveness, as the Functions host answers it
        if _is_under(lower, WEBHOOK_PATH):
            if self.keys is not None and not self.keys.allows_system(presented_key(request)):
                return Response(status_code=401)
            return await self.durable.handle(request, path[len(WEBHOOK_PATH) :], origin_of(request))
        if lower.startswith("/admin/") or lower.startswith("/runtime/"):
            return Response(status_code=404)
        if self.easy_auth is not None and lower.startswith("/.auth/"):
            return self.easy_auth.handle(request, path)
        return None

    async def _route_function(self, request: Request, path: str) -> Response:
        """Resolve the path to an HTTP-triggered function and run it (after auth and a store check)."""
        found = self.routes.resolve(request.method, path)
        if found is None:
            if path == "/" and request.method in ("GET", "HEAD"):
                return self._landing()  # only reached when no function owns "/"
            return Response(status_code=404)
        route, values = found
        fn: FunctionInfo = route.target
        if not self._authorized(fn, request):
            return Response(status_code=401)
        if self.store_fault() is not None:
            return self._store_unavailable()  # accept no work the store cannot persist
        response = await self.invoke_http(fn, request, values)
        if response.status_code >= 500 and self.store_fault() is not None:
            # The function failed because the store did (its durable call got 503): say so, retryably.
            return self._store_unavailable()
        return response

    def _landing(self) -> Response:
        """``GET /`` of the local host: where the web console (when the app serves one) and the API are."""
        prefix = "/" + self.app.host.route_prefix if self.app.host.route_prefix else ""
        console = f"{prefix}/ui/"
        body: dict[str, Any] = {
            "host": "devhost",
            "console": console if self.routes.resolve("GET", console) is not None else None,
            "api": f"{prefix}/",
            "functions": sorted({self.routes.url_path(r) for r in self.routes.routes}),
        }
        return json_response(body, 200)

    def store_fault(self) -> str | None:
        """Why the engine's durable store cannot write right now, or None (engines without the notion: None)."""
        fault = getattr(self.engine, "store_fault", None)
        return fault if isinstance(fault, str) else None

    @staticmethod
    def _store_unavailable() -> Response:
        body = {
            "error": {
                "code": "STORE_UNAVAILABLE",
                "message": "The durable store cannot write right now (disk full or I/O error); retry later.",
            }
        }
        return json_response(body, 503, headers={"Retry-After": "5"})

    def _host_status(self) -> Response:
        fault = self.store_fault()
        extra = {} if fault is None else {"errors": [f"The durable store cannot write: {fault}"]}
        return json_response(
            {
                **extra,
                "id": self.host_id,
                "state": "Running" if fault is None else "Error",
                "version": DEVHOST_VERSION,
                "versionDetails": f"devhost {DEVHOST_VERSION}",
                "processUptime": int((time.monotonic() - self.started_at) * 1000),
            }
        )

    def _authorized(self, fn: FunctionInfo, request: Request) -> bool:
        if self.keys is None:
            return True
        level = auth_level(fn)
        if level == "anonymous":
            return True
        key = presented_key(request)
        if level == "admin":
            return self.keys.is_master(key)
        return self.keys.allows_function(key)

    # ----- invocation -----------------------------------------------------------------------

    def _params(self, fn: FunctionInfo) -> set[str]:
        if fn.name not in self._signatures:
            try:
                self._signatures[fn.name] = set(inspect.signature(fn.user_function).parameters)
            except (TypeError, ValueError):
                self._signatures[fn.name] = set()
        return self._signatures[fn.name]

    def build_kwargs(
        self, fn: FunctionInfo, trigger_value: Any, *, origin: str, context: InvocationContext
    ) -> dict[str, Any]:
        """Keyword arguments the worker would pass: trigger, client binding JSON, context, other bindings."""
        trigger_name = str(fn.trigger.get("name", "req"))
        kwargs: dict[str, Any] = {trigger_name: trigger_value}
        params = self._params(fn)
        if fn.client_binding:
            kwargs[fn.client_binding] = self.durable.binding_json(origin)
        if fn.wants_context:
            kwargs["context"] = context
        add_binding_arguments(fn, kwargs, params)
        return kwargs

    def _uses_streams(self, fn: FunctionInfo) -> bool:
        if fn.name not in self._streams:
            self._streams[fn.name] = uses_streams(fn.user_function, str(fn.trigger.get("name", "req")))
        return self._streams[fn.name]

    async def _trigger_value(self, fn: FunctionInfo, request: Request, route_params: dict[str, str]) -> Any | Response:
        """What the trigger parameter gets: the live request (HTTP streams) or an ``HttpRequest``; or an error."""
        headers = None
        if self.easy_auth is not None:
            try:
                headers = self.easy_auth.rewrite(header_dict(request))
            except PrincipalSpecError as exc:
                return Response(str(exc).encode(), status_code=400, media_type="text/plain")
        if self._uses_streams(fn):
            return stream_request(request, route_params, headers)
        try:
            body = await read_body(request)
        except BodyTooLarge:
            return Response(status_code=413)
        return to_func_request(request, body, route_params, headers=headers)

    async def invoke_http(self, fn: FunctionInfo, request: Request, route_params: dict[str, str]) -> Response:
        """Run an HTTP-triggered function and map its result (500 with no details when it raises)."""
        req = await self._trigger_value(fn, request, route_params)
        if isinstance(req, Response):
            return req
        invocation_id = str(uuid.uuid4())
        context = InvocationContext(
            invocation_id=invocation_id,
            function_name=fn.name,
            function_directory=self.app.root,
            trace_parent=request.headers.get("traceparent"),
            trace_state=request.headers.get("tracestate", ""),
        )
        kwargs = self.build_kwargs(fn, req, origin=origin_of(request), context=context)
        log.info(
            "Executing 'Functions.%s' (Reason='This function was invoked by HTTP trigger.', Id=%s)",
            fn.name,
            invocation_id,
        )
        started = time.monotonic()
        outcome = "Succeeded"
        try:
            call = functools.partial(self.call_function, fn, kwargs)
            result = await run_bound(fn, kwargs, call, self.app.host.raw, req)
            # A Starlette response (HTTP streams) is sent as it is: a StreamingResponse streams its body.
            response = result if isinstance(result, Response) else from_func_result(result)
        except TimeoutError:
            outcome = "Failed"
            log.error(
                "Timeout value of %g seconds was exceeded by function: Functions.%s (Id=%s)",
                self.app.host.function_timeout_s,
                fn.name,
                invocation_id,
            )
            response = Response(status_code=500)
        except UnsupportedReturn as exc:
            outcome = "Failed"
            log.error("Executed 'Functions.%s' returned an unsupported value (Id=%s): %s", fn.name, invocation_id, exc)
            response = Response(status_code=500)
        except Exception:
            outcome = "Failed"
            log.exception("Exception while executing function: Functions.%s (Id=%s)", fn.name, invocation_id)
            response = Response(status_code=500)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        log.info("Executed 'Functions.%s' (%s, Id=%s, Duration=%dms)", fn.name, outcome, invocation_id, elapsed_ms)
        return response

    async def call_function(self, fn: FunctionInfo, kwargs: dict[str, Any]) -> Any:
        """Await async functions on this loop; run sync ones in the thread pool; honour functionTimeout."""
        timeout = self.app.host.function_timeout_s
        if fn.is_async or inspect.iscoroutinefunction(fn.user_function):
            awaitable: Awaitable[Any] = fn.user_function(**kwargs)
        else:
            loop = asyncio.get_running_loop()
            ctx = contextvars.copy_context()
            awaitable = loop.run_in_executor(self._pool, functools.partial(ctx.run, fn.user_function, **kwargs))
        if timeout is None:
            return await awaitable
        return await asyncio.wait_for(awaitable, timeout)
