"""The Durable Functions HTTP API (``/runtime/webhooks/durabletask/...`` and the local RPC base).

Same handlers for both URL families, as in the extension: the public webhook path requires the
``durabletask_extension`` system key (or the master key); the RPC listener on a loopback-only port
serves them without a key so the SDK's ``DurableOrchestrationClient`` works unchanged. Status codes
and bodies follow the extension's ``HttpApiHandler``; query parameters are read and engine errors mapped
in ``http_wire``.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from devhost.durable.history import parse_json_or_text
from devhost.durable.http_wire import (
    InvalidJson,
    RestartOfUnknownInstance,
    error_response,
    json_response,
    lenient_datetime,
    parse_bool,
    parse_datetime,
    parse_statuses,
    positive_float,
    query_params,
    split_path,
)
from devhost.durable.statuses import RUNNING_STATES, TERMINAL_STATES
from devhost.functions.model import EngineError, InstanceNotFound, InvalidRequest, NotSupported, PreconditionFailed

log = logging.getLogger("devhost.durable")

WEBHOOK_PATH = "/runtime/webhooks/durabletask"
RPC_PATH = "/durabletask"
CONNECTION_NAME = "Storage"
CONTINUATION_HEADER = "x-ms-continuation-token"

# Operations answered after the instance's state is checked; rewind is refused (410) only when finished
# without failing.
_STATE_OPERATIONS = frozenset({"terminate", "suspend", "resume", "rewind"})
_REWIND_GONE = TERMINAL_STATES - {"Failed"}


class Engine(Protocol):
    """The part of ``devhost.durable.engine.Engine`` the HTTP API uses."""

    hub_name: str

    async def start_instance(
        self, name: str, instance_id: str | None, input_json: str | None, version: str | None = None
    ) -> str:
        """Create an instance; returns its id."""

    async def get_status(
        self,
        instance_id: str,
        *,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = True,
    ) -> dict[str, Any] | None:
        """Status payload (the extension's instance status JSON) or None when unknown."""

    async def wait_for_completion(
        self,
        instance_id: str,
        timeout: float | None = None,  # noqa: ASYNC109 - mirrors devhost.durable.engine.Engine
    ) -> dict[str, Any] | None:
        """Wait until the instance is terminal or the timeout passes; returns its status."""

    async def query(
        self,
        *,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        statuses: list[str] | None = None,
        prefix: str | None = None,
        top: int | None = None,
        continuation: str | None = None,
        show_input: bool = True,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of status payloads and the next continuation token."""

    async def raise_event(self, instance_id: str, event_name: str, input_json: str) -> None:
        """Deliver an external event."""

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        """Terminate a running instance."""

    async def suspend(self, instance_id: str, reason: str | None) -> None:
        """Suspend a running instance."""

    async def resume(self, instance_id: str, reason: str | None) -> None:
        """Resume a suspended instance."""

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """Rewind a failed instance."""

    async def restart(self, instance_id: str, new_instance_id: bool = True) -> str:
        """Restart with the original input; returns the new instance id."""

    async def purge(self, instance_id: str) -> int:
        """Delete one instance; returns the number deleted."""

    async def purge_by(self, created_from: datetime, created_to: datetime | None, statuses: list[str] | None) -> int:
        """Delete instances matching the filter; returns the number deleted."""

    async def signal_entity(self, name: str, key: str, operation: str, input_text: str | None) -> None:
        """Send a one-way operation to an entity."""

    async def read_entity_state(self, name: str, key: str) -> tuple[bool, str | None]:
        """(exists, state JSON text) of an entity."""

    async def list_entities(
        self,
        *,
        name: str | None,
        op_from: float | None,
        op_to: float | None,
        top: int,
        continuation: str | None,
        fetch_state: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of entity statuses and the next continuation token."""


class DurableHttpApi:
    """Serves the Durable HTTP API on top of the engine and builds the client binding JSON."""

    def __init__(
        self,
        engine: Engine,
        *,
        hub_name: str,
        system_key: str | None,
        public_origin: str,
        rpc_base_url: str,
    ) -> None:
        """``system_key`` None means auth is disabled (no ``code`` in generated URLs)."""
        self.engine = engine
        self.hub_name = hub_name
        self.system_key = system_key
        self.public_origin = public_origin.rstrip("/")
        self.rpc_base_url = rpc_base_url

    # ----- URLs and binding JSON -------------------------------------------------------------

    @property
    def required_query(self) -> str:
        """``requiredQueryStringParameters``: the system key as ``code=...`` (empty without auth)."""
        return f"code={quote(self.system_key, safe='')}" if self.system_key else ""

    def _hub_query(self) -> str:
        q = f"taskHub={quote(self.hub_name, safe='')}&connection={CONNECTION_NAME}"
        return f"{q}&{self.required_query}" if self.required_query else q

    def management_urls(self, origin: str, instance_id: str, *, include_rewind: bool = True) -> dict[str, str]:
        """The check-status payload for one instance, rooted at ``origin``."""
        base = f"{origin.rstrip('/')}{WEBHOOK_PATH}/instances/{instance_id}"
        hq = self._hub_query()
        urls = {
            "id": instance_id,
            "statusQueryGetUri": f"{base}?{hq}",
            "sendEventPostUri": f"{base}/raiseEvent/{{eventName}}?{hq}",
            "terminatePostUri": f"{base}/terminate?reason={{text}}&{hq}",
            "rewindPostUri": f"{base}/rewind?reason={{text}}&{hq}",
            "purgeHistoryDeleteUri": f"{base}?{hq}",
            "restartPostUri": f"{base}/restart?{hq}",
            "suspendPostUri": f"{base}/suspend?reason={{text}}&{hq}",
            "resumePostUri": f"{base}/resume?reason={{text}}&{hq}",
        }
        if not include_rewind:
            del urls["rewindPostUri"]
        return urls

    def binding_json(self, origin: str | None = None) -> str:
        """The durableClient binding string the extension hands to client functions."""
        base = f"{(origin or self.public_origin).rstrip('/')}{WEBHOOK_PATH}"
        q = self.required_query
        return json.dumps(
            {
                "taskHubName": self.hub_name,
                "creationUrls": {
                    "createNewInstancePostUri": f"{base}/orchestrators/{{functionName}}[/{{instanceId}}]?{q}",
                    "createAndWaitOnNewInstancePostUri": (
                        f"{base}/orchestrators/{{functionName}}[/{{instanceId}}]"
                        f"?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}" + (f"&{q}" if q else "")
                    ),
                },
                "managementUrls": self.management_urls(origin or self.public_origin, "INSTANCEID"),
                "baseUrl": base,
                "requiredQueryStringParameters": q,
                "rpcBaseUrl": self.rpc_base_url,
                "connectionName": None,
                "httpBaseUrl": None,
            }
        )

    def check_status_response(self, origin: str, instance_id: str) -> Response:
        """202 with the management payload, ``Location`` and ``Retry-After`` (the webhook start reply)."""
        payload = self.management_urls(origin, quote(instance_id, safe=""), include_rewind=False)
        payload["id"] = instance_id
        return json_response(payload, 202, headers={"Location": payload["statusQueryGetUri"], "Retry-After": "10"})

    # ----- dispatch ---------------------------------------------------------------------------

    async def handle(self, request: Request, subpath: str, origin: str) -> Response:
        """Serve one API request; ``subpath`` is the path after the base (webhook or RPC) path."""
        try:
            return await self._dispatch(request, split_path(subpath), origin)
        except EngineError as exc:
            return error_response(exc)
        except Exception as exc:  # the host must answer, never drop the connection
            return error_response(exc)

    async def _dispatch(self, request: Request, parts: list[str], origin: str) -> Response:
        method = request.method.upper()
        head = parts[0].lower() if parts else ""
        if head == "orchestrators" and len(parts) in (2, 3) and method == "POST":
            return await self._start(request, parts[1], parts[2] if len(parts) == 3 else None, origin)
        if head == "entities":
            return await self._entities(request, parts[1:])
        if head == "instances":
            if len(parts) == 1:
                if method == "GET":
                    return await self._list(request)
                if method == "DELETE":
                    return await self._purge_by(request)
            elif len(parts) == 2:
                if method == "GET":
                    return await self._status(request, parts[1])
                if method == "DELETE":
                    return await self._purge(parts[1])
            elif len(parts) == 3 and method == "POST":
                return await self._operation(request, parts[1], parts[2].lower(), origin)
            elif len(parts) == 4 and method == "POST" and parts[2].lower() == "raiseevent":
                return await self._raise_event(request, parts[1], parts[3])
        if head == "makeprimary":
            raise NotSupported("makeprimary is not supported by the devhost.")
        return Response(status_code=404)

    # ----- operations -------------------------------------------------------------------------

    async def _start(self, request: Request, name: str, instance_id: str | None, origin: str) -> Response:
        q = query_params(request)
        body = await request.body()
        input_json: str | None = None
        if body.strip():
            try:
                text = body.decode("utf-8-sig")
                json.loads(text)
            except (UnicodeDecodeError, ValueError) as exc:
                raise InvalidRequest(f"The request body is not valid JSON: {exc}") from None
            input_json = text
        version = q.get("version") or None
        new_id = await self.engine.start_instance(name, instance_id, input_json, version)
        log.info("Started orchestration '%s' with instance id %s", name, new_id)
        return await self._created_reply(request, q, new_id, origin)

    async def _created_reply(self, request: Request, q: dict[str, str], instance_id: str, origin: str) -> Response:
        if "timeout" not in q:
            return self.check_status_response(origin, instance_id)
        timeout = positive_float("timeout", q["timeout"])
        interval = positive_float("pollingInterval", q["pollinginterval"]) if "pollinginterval" in q else 1.0
        if interval > timeout:
            raise InvalidRequest("The 'pollingInterval' must not be greater than the 'timeout'.")
        # The extension polls every pollingInterval; waiting on the engine answers as soon as the instance ends.
        status = await self.engine.wait_for_completion(instance_id, timeout)
        state = status.get("runtimeStatus") if status else None
        if status is not None and state == "Completed":
            return json_response(status.get("output"), 200)
        if status is not None and state in TERMINAL_STATES:
            return await self._status(request, instance_id)
        return self.check_status_response(origin, instance_id)

    async def _status(self, request: Request, instance_id: str) -> Response:
        q = query_params(request)
        status = await self.engine.get_status(
            instance_id,
            show_history=parse_bool(q.get("showhistory"), False),
            show_history_output=parse_bool(q.get("showhistoryoutput"), False),
            show_input=parse_bool(q.get("showinput"), True),
        )
        if status is None:
            return Response(status_code=404)
        state = status.get("runtimeStatus")
        if state in RUNNING_STATES:
            return json_response(status, 202, headers={"Location": str(request.url), "Retry-After": "5"})
        if state == "Failed" and parse_bool(q.get("returninternalservererroronfailure"), False):
            return json_response(status, 500)
        return json_response(status, 200)

    async def _list(self, request: Request) -> Response:
        q = query_params(request)
        top: int | None = None
        if "top" in q:
            if not re.fullmatch(r"\d+", q["top"].strip()) or int(q["top"]) < 1:
                raise InvalidRequest(f"The 'top' query parameter must be a positive integer, got '{q['top']}'.")
            top = int(q["top"])
        created_from = parse_datetime("createdTimeFrom", q["createdtimefrom"]) if q.get("createdtimefrom") else None
        created_to = parse_datetime("createdTimeTo", q["createdtimeto"]) if q.get("createdtimeto") else None
        token = request.headers.get(CONTINUATION_HEADER) or None
        items, next_token = await self.engine.query(
            created_from=created_from,
            created_to=created_to,
            statuses=parse_statuses(q.get("runtimestatus")),
            prefix=q.get("instanceidprefix") or None,
            top=top if top is not None else 100,
            continuation=token,
            show_input=parse_bool(q.get("showinput"), True),
        )
        headers = {CONTINUATION_HEADER: next_token} if next_token else None
        return json_response(items, 200, headers=headers)

    async def _precheck(self, instance_id: str, gone: frozenset[str]) -> Response | None:
        """The handlers' GetStatusAsync first: 404 unknown, 410 in a ``gone`` state, both without a body."""
        status = await self.engine.get_status(instance_id, show_input=False)
        if status is None:
            return Response(status_code=404)
        if status.get("runtimeStatus") in gone:
            return Response(status_code=410)
        return None

    async def _raise_event(self, request: Request, instance_id: str, event_name: str) -> Response:
        # HttpApiHandler.HandleRaiseEventRequestAsync: state first, then the media type, then the JSON.
        refused = await self._precheck(instance_id, TERMINAL_STATES)
        if refused is not None:
            return refused
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            return json_response({"Message": "Only application/json request content is supported"}, 400)
        body = await request.body()
        try:
            text = body.decode("utf-8-sig")
            json.loads(text)  # an empty body is invalid JSON there too (JToken.Load)
        except ValueError as exc:
            raise InvalidJson(f"The request body is not valid JSON: {exc}") from None
        await self.engine.raise_event(instance_id, event_name, text)
        return Response(status_code=202)

    async def _operation(self, request: Request, instance_id: str, op: str, origin: str) -> Response:
        q = query_params(request)
        if op == "restart":
            return await self._restart(request, q, instance_id, origin)
        if op not in _STATE_OPERATIONS:
            return Response(status_code=404)
        # Terminate, suspend and resume answer 410 for any finished instance, rewind only for one that
        # did not fail (HttpApiHandler.Handle{Terminate,Suspend,Resume,Rewind}InstanceRequestAsync).
        refused = await self._precheck(instance_id, _REWIND_GONE if op == "rewind" else TERMINAL_STATES)
        if refused is not None:
            return refused
        reason = q.get("reason")
        if op == "terminate":
            await self.engine.terminate(instance_id, reason)
        elif op == "suspend":
            await self.engine.suspend(instance_id, reason)
        elif op == "resume":
            await self.engine.resume(instance_id, reason)
        else:
            await self._rewind(instance_id, reason)
        return Response(status_code=202)

    async def _rewind(self, instance_id: str, reason: str | None) -> None:
        try:
            await self.engine.rewind(instance_id, reason)
        except PreconditionFailed:
            # DurableClient.RewindAsync's message for an instance that is still in flight.
            raise PreconditionFailed(
                "The rewind operation is only supported on failed orchestration instances."
            ) from None

    async def _restart(self, request: Request, q: dict[str, str], instance_id: str, origin: str) -> Response:
        new_id_wanted = parse_bool(q.get("restartwithnewinstanceid"), True)
        try:
            new_id = await self.engine.restart(instance_id, new_id_wanted)
        except InstanceNotFound:
            # HandleRestartInstanceRequestAsync's ArgumentException reply; the message (typo included) is
            # DurableClient.RestartAsync's.
            raise RestartOfUnknownInstance(
                f"An orchestrastion with the instanceId {instance_id} was not found."
            ) from None
        return await self._created_reply(request, q, new_id, origin)

    async def _purge(self, instance_id: str) -> Response:
        # HandleDeleteHistoryByIdRequestAsync: 404 only for an unknown id, else 200 with the count, even 0.
        if await self.engine.get_status(instance_id, show_input=False) is None:
            return Response(status_code=404)
        try:
            deleted = await self.engine.purge(instance_id)
        except InstanceNotFound:
            return Response(status_code=404)
        return json_response({"instancesDeleted": deleted}, 200)

    async def _purge_by(self, request: Request) -> Response:
        q = query_params(request)
        try:
            created_from = parse_datetime("createdTimeFrom", q.get("createdtimefrom") or "")
        except InvalidRequest:
            # HandleDeleteHistoryWithFiltersRequestAsync answers a missing or unreadable value with a JSON string.
            return json_response("Please provide value for 'createdTimeFrom' parameter.", 400)
        created_to = (
            parse_datetime("createdTimeTo", q["createdtimeto"]) if q.get("createdtimeto") else datetime.now(UTC)
        )
        deleted = await self.engine.purge_by(created_from, created_to, parse_statuses(q.get("runtimestatus")))
        if deleted == 0:
            return Response(status_code=404)
        return json_response({"instancesDeleted": deleted}, 200)

    # ----- entities (the extension's /entities/{entityName?}/{entityKey?} route) ------------------

    async def _entities(self, request: Request, parts: list[str]) -> Response:
        method = request.method.upper()
        if len(parts) > 2:
            return Response(status_code=404)
        name = parts[0] if parts else ""
        key = parts[1] if len(parts) == 2 else ""
        if method == "GET" and key:
            return await self._entity_state(name, "" if key == EMPTY_ENTITY_KEY else key)
        if method == "GET":
            return await self._entity_list(request, name or None)
        if method in ("POST", "DELETE"):
            return await self._entity_signal(request, name, key)
        return Response(status_code=404)

    async def _entity_state(self, name: str, key: str) -> Response:
        exists, state = await self.engine.read_entity_state(name, key)
        if not exists:
            return Response(status_code=404)
        return json_response(None if state is None else parse_json_or_text(state), 200)

    async def _entity_list(self, request: Request, name: str | None) -> Response:
        q = query_params(request)
        # The extension ignores values it cannot parse (TryGet...QueryParameterValue) rather than refusing them.
        top = int(q["top"]) if re.fullmatch(r"\d{1,9}", q.get("top", "").strip()) and int(q["top"]) > 0 else 100
        op_from = lenient_datetime(q.get("lastoperationtimefrom"))
        op_to = lenient_datetime(q.get("lastoperationtimeto"))
        items, token = await self.engine.list_entities(
            name=name,
            op_from=op_from,
            op_to=op_to,
            top=top,
            continuation=request.headers.get(CONTINUATION_HEADER) or None,
            fetch_state=parse_bool(q.get("fetchstate"), False),
        )
        return json_response(items, 200, headers={CONTINUATION_HEADER: token} if token else None)

    async def _entity_signal(self, request: Request, name: str, key: str) -> Response:
        operation = "delete" if request.method.upper() == "DELETE" else query_params(request).get("op", "")
        body = await request.body()
        input_text: str | None = None
        if body:
            text = body.decode("utf-8-sig", errors="replace")
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media == "application/json":
                try:
                    input_text = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
                except ValueError as exc:
                    raise InvalidRequest(f"Could not parse JSON content: {exc}") from None
            else:
                input_text = json.dumps(text, ensure_ascii=False)  # other content is the operation's string input
        await self.engine.signal_entity(name, key, operation, input_text)
        return Response(status_code=202)


# The key the extension's GET reads as the empty key.
EMPTY_ENTITY_KEY = "$"
