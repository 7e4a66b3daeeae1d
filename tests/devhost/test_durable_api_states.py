"""Every management endpoint of the Durable HTTP API × every instance state, against the extension's answers.

One row per endpoint and state. The expected code and body come from the extension's sources
(Azure/azure-functions-durable-extension at a7c6d69): ``src/WebJobs.Extensions.DurableTask/HttpApiHandler.cs``
(which checks the state first and maps exceptions: ``ArgumentException`` → 400, anything else → 500 "Something
went wrong while processing your request") and ``ContextImplementations/DurableClient.cs`` (which throws the
``InvalidOperationException`` messages below). The API runs in process on a real engine and SQLite store.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from devhost.durable.engine import Engine
from devhost.durable.http_api import DurableHttpApi
from tests.devhost.conftest import EngineRunner, complete, until

ORIGIN = "http://testserver"
UNKNOWN = "nobody-here"
GENERIC_500 = "Something went wrong while processing your request"
INVALID_OPERATION = "System.InvalidOperationException"


def _waiting(status: dict[str, Any]) -> bool:
    return any(e["EventType"] == "TaskCompleted" for e in status["historyEvents"])


async def _pending(engine: Engine) -> str:
    # Accepted but no episode run yet: the instance is held back from the scheduler for this test only.
    schedule = engine.core.schedule
    engine.core.schedule = lambda inst: None  # type: ignore[method-assign]
    try:
        return await engine.start_instance("forever_orch", None, None)
    finally:
        engine.core.schedule = schedule  # type: ignore[method-assign]


async def _running(engine: Engine) -> str:
    iid = await engine.start_instance("wait_orch", None, None)
    await until(engine, iid, _waiting)
    return iid


async def _suspended(engine: Engine) -> str:
    iid = await _running(engine)
    await engine.suspend(iid, "pause")
    return iid


async def _finished(engine: Engine, name: str) -> str:
    iid = await engine.start_instance(name, None, None)
    await complete(engine, iid)
    return iid


async def _terminated(engine: Engine) -> str:
    iid = await _running(engine)
    await engine.terminate(iid, "stop")
    await complete(engine, iid)
    return iid


async def _unknown(engine: Engine) -> str:
    return UNKNOWN


async def _completed(engine: Engine) -> str:
    return await _finished(engine, "chain")


async def _failed(engine: Engine) -> str:
    return await _finished(engine, "raise_orch")


STATES: dict[str, Callable[[Engine], Awaitable[str]]] = {
    "unknown": _unknown,
    "Pending": _pending,
    "Running": _running,
    "Suspended": _suspended,
    "Completed": _completed,
    "Failed": _failed,
    "Terminated": _terminated,
}

# Expected bodies: "empty"; "status" (the status JSON, runtimeStatus = the state); "created" (the check-status
# payload); ("purged", n); ("error", Message, ExceptionMessage with {id} and {state}, ExceptionType).
Expected = tuple[int, Any]
EMPTY = "empty"


def _error(message: str, exception_message: str, exception_type: str = INVALID_OPERATION) -> tuple[str, ...]:
    return ("error", message, exception_message, exception_type)


CANNOT_SUSPEND = _error(
    GENERIC_500, "Cannot suspend the orchestration instance {id} because instance is in the {state} state."
)
CANNOT_RESUME = _error(
    GENERIC_500, "Cannot resume the orchestration instance {id} because instance is in the {state} state."
)
CANNOT_REWIND = _error(GENERIC_500, "The rewind operation is only supported on failed orchestration instances.")
RESTART_UNKNOWN = _error(
    "InstanceId does not match a valid orchestration instance.",
    "An orchestrastion with the instanceId {id} was not found.",  # sic, DurableClient.RestartAsync
    "System.ArgumentException",
)
ALREADY_EXISTS = _error(
    GENERIC_500,
    "An Orchestration instance with the status {state} already exists.",
    "DurableTask.Core.Exceptions.OrchestrationAlreadyExistsException",
)

# endpoint -> (method, path after instances/{id}, query) ; the path "" is the instance itself.
ENDPOINTS: dict[str, tuple[str, str, dict[str, str]]] = {
    "status": ("GET", "", {}),
    "status_500_on_failure": ("GET", "", {"returnInternalServerErrorOnFailure": "true"}),
    "history": ("GET", "", {"showHistory": "true", "showHistoryOutput": "true"}),
    "raise_event": ("POST", "/raiseEvent/go", {}),
    "terminate": ("POST", "/terminate", {"reason": "r"}),
    "suspend": ("POST", "/suspend", {"reason": "r"}),
    "resume": ("POST", "/resume", {"reason": "r"}),
    "rewind": ("POST", "/rewind", {"reason": "r"}),
    "restart": ("POST", "/restart", {}),
    "restart_same_id": ("POST", "/restart", {"restartWithNewInstanceId": "false"}),
    "purge": ("DELETE", "", {}),
}

_S = ("unknown", "Pending", "Running", "Suspended", "Completed", "Failed", "Terminated")
TABLE: dict[str, tuple[Expected, ...]] = {
    # HandleGetStatusRequestAsync(request, instanceId): 404 / 202 + Location while in flight / 200 when finished.
    "status": ((404, EMPTY), (202, "status"), (202, "status"), (202, "status")) + ((200, "status"),) * 3,
    # ... and 500 for Failed when returnInternalServerErrorOnFailure=true.
    "status_500_on_failure": ((404, EMPTY), (202, "status"), (202, "status"), (202, "status"))
    + ((200, "status"), (500, "status"), (200, "status")),
    # The same handler with showHistory=true: the same codes, the body with historyEvents.
    "history": ((404, EMPTY), (202, "history"), (202, "history"), (202, "history")) + ((200, "history"),) * 3,
    # HandleRaiseEventRequestAsync: 410 for Failed/Canceled/Terminated/Completed, before the body is read.
    "raise_event": ((404, EMPTY),) + ((202, EMPTY),) * 3 + ((410, EMPTY),) * 3,
    # HandleTerminateInstanceRequestAsync: IsCompletedStatus (Completed/Terminated/Canceled/Failed) → 410.
    "terminate": ((404, EMPTY),) + ((202, EMPTY),) * 3 + ((410, EMPTY),) * 3,
    # HandleSuspendInstanceRequestAsync → DurableClient.SuspendAsync: not Running/Pending/ContinuedAsNew → throws.
    "suspend": ((404, EMPTY), (202, EMPTY), (202, EMPTY), (500, CANNOT_SUSPEND)) + ((410, EMPTY),) * 3,
    # HandleResumeInstanceRequestAsync → DurableClient.ResumeAsync: not Suspended → throws.
    "resume": ((404, EMPTY), (500, CANNOT_RESUME), (500, CANNOT_RESUME), (202, EMPTY)) + ((410, EMPTY),) * 3,
    # HandleRewindInstanceRequestAsync: 410 for Canceled/Terminated/Completed; DurableClient.RewindAsync throws
    # for anything not Failed.
    "rewind": ((404, EMPTY),) + ((500, CANNOT_REWIND),) * 3 + ((410, EMPTY), (202, EMPTY), (410, EMPTY)),
    # HandleRestartInstanceRequestAsync → DurableClient.RestartAsync: unknown → ArgumentException → 400; else a
    # new start with the original input, whatever the state.
    "restart": ((400, RESTART_UNKNOWN),) + ((202, "created"),) * 6,
    # The same id: StartNewAsync over an instance in flight is refused as with NonRunningStates (see README).
    "restart_same_id": ((400, RESTART_UNKNOWN),) + ((500, ALREADY_EXISTS),) * 3 + ((202, "created"),) * 3,
    # HandleDeleteHistoryByIdRequestAsync: 404 only when unknown, else 200 with the provider's count.
    "purge": ((404, EMPTY),) + ((200, ("purged", 0)),) * 3 + ((200, ("purged", 1)),) * 3,
}
ROWS = [(endpoint, state, expected) for endpoint, row in TABLE.items() for state, expected in zip(_S, row, strict=True)]


def _asgi(api: DurableHttpApi) -> Starlette:
    async def handle(request: Request) -> Response:
        return await api.handle(request, request.path_params["path"], ORIGIN)

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/durabletask/{path:path}", handle, methods=methods)])


async def _call(engine: Engine, method: str, path: str, **kwargs: Any) -> httpx.Response:
    api = DurableHttpApi(
        engine, hub_name=engine.hub_name, system_key=None, public_origin=ORIGIN, rpc_base_url=f"{ORIGIN}/durabletask/"
    )
    transport = httpx.ASGITransport(app=_asgi(api))
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
        return await client.request(method, f"/durabletask/{path}", **kwargs)


def _check_body(resp: httpx.Response, expected: Any, iid: str, state: str) -> None:
    if expected == EMPTY:
        assert resp.content == b"", resp.text
    elif expected in ("status", "history"):
        assert resp.json()["runtimeStatus"] == state and resp.json()["instanceId"] == iid
        assert ("historyEvents" in resp.json()) == (expected == "history")
    elif expected == "created":
        assert set(resp.json()) >= {"id", "statusQueryGetUri", "suspendPostUri", "resumePostUri"}
    elif expected[0] == "purged":
        assert resp.json() == {"instancesDeleted": expected[1]}
    else:
        _, message, exception_message, exception_type = expected
        assert resp.json() == {
            "Message": message,
            "ExceptionMessage": exception_message.format(id=iid, state=state),
            "ExceptionType": exception_type,
            "StackTrace": "",
        }


@pytest.mark.parametrize(("endpoint", "state", "expected"), ROWS, ids=[f"{e}-{s}" for e, s, _ in ROWS])
def test_management_endpoint_in_state(run_engine: EngineRunner, endpoint: str, state: str, expected: Expected) -> None:
    method, suffix, params = ENDPOINTS[endpoint]

    async def body(engine: Engine) -> None:
        iid = await STATES[state](engine)
        extra: dict[str, Any] = {"json": {"x": 1}} if endpoint == "raise_event" else {}
        resp = await _call(engine, method, f"instances/{iid}{suffix}", params=params, **extra)
        assert resp.status_code == expected[0], resp.text
        _check_body(resp, expected[1], iid, state)

    run_engine(body)


def test_refused_suspend_logs_the_extension_warning(run_engine: EngineRunner, caplog: pytest.LogCaptureFixture) -> None:
    async def body(engine: Engine) -> str:
        iid = await _suspended(engine)
        with caplog.at_level(logging.WARNING):
            resp = await _call(engine, "POST", f"instances/{iid}/suspend")
        assert resp.status_code == 500
        return iid

    iid = run_engine(body)
    # EndToEndTraceHelper.ExtensionWarningEvent: "{details}. InstanceId: {instanceId}. Function: {functionName}. ..."
    assert (
        f"Cannot suspend orchestration instance in the Suspended state.. InstanceId: {iid}. Function: wait_orch."
        in caplog.text
    )


def test_resume_of_a_running_instance_logs_and_leaves_it_running(
    run_engine: EngineRunner, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(engine: Engine) -> str:
        iid = await _running(engine)
        with caplog.at_level(logging.WARNING):
            assert (await _call(engine, "POST", f"instances/{iid}/resume")).status_code == 500
        assert (await engine.get_status(iid) or {})["runtimeStatus"] == "Running"
        await engine.raise_event(iid, "go", '"\\"x\\""')
        assert (await complete(engine, iid))["runtimeStatus"] == "Completed"
        return iid

    iid = run_engine(body)
    assert f"Cannot resume orchestration instance in the Running state.. InstanceId: {iid}." in caplog.text


def test_raise_event_checks_state_then_media_type_then_json(run_engine: EngineRunner) -> None:
    # HandleRaiseEventRequestAsync: status (404/410) first; a non-JSON media type is a 400 with only "Message";
    # a body that is not JSON (an empty one too) is a 400 "Invalid JSON content".
    async def body(engine: Engine) -> None:
        text = {"content": b"hi", "headers": {"content-type": "text/plain"}}
        assert (await _call(engine, "POST", f"instances/{UNKNOWN}/raiseEvent/go", **text)).status_code == 404
        done = await _completed(engine)
        assert (await _call(engine, "POST", f"instances/{done}/raiseEvent/go", **text)).status_code == 410
        iid = await _running(engine)
        media = await _call(engine, "POST", f"instances/{iid}/raiseEvent/go", **text)
        assert media.status_code == 400
        assert media.json() == {"Message": "Only application/json request content is supported"}
        for raw in (b"", b"{"):
            bad = await _call(
                engine,
                "POST",
                f"instances/{iid}/raiseEvent/go",
                content=raw,
                headers={"content-type": "application/json"},
            )
            assert bad.status_code == 400
            assert bad.json()["Message"] == "Invalid JSON content"
            assert bad.json()["ExceptionType"] == "Newtonsoft.Json.JsonReaderException"
        status = await engine.get_status(iid, show_history=True)
        assert status is not None and status["runtimeStatus"] == "Running"
        assert all(e["EventType"] != "EventRaised" for e in status["historyEvents"])

    run_engine(body)


def test_list_and_purge_by_filter(run_engine: EngineRunner) -> None:
    # HandleGetStatusRequestAsync(request): always 200 with a list. HandleDeleteHistoryWithFiltersRequestAsync:
    # no readable createdTimeFrom → 400 with a JSON string; nothing deleted → 404; else 200 with the count.
    async def body(engine: Engine) -> None:
        listed = await _call(engine, "GET", "instances")
        assert listed.status_code == 200 and listed.json() == []
        for params in ({}, {"createdTimeFrom": "yesterday"}):
            missing = await _call(engine, "DELETE", "instances", params=params)
            assert missing.status_code == 400
            assert missing.json() == "Please provide value for 'createdTimeFrom' parameter."
        since = {"createdTimeFrom": "2000-01-01T00:00:00Z"}
        assert (await _call(engine, "DELETE", "instances", params=since)).status_code == 404
        running = await _running(engine)
        done = await _completed(engine)
        listed = await _call(engine, "GET", "instances")
        assert listed.status_code == 200 and {s["instanceId"] for s in listed.json()} == {running, done}
        purged = await _call(engine, "DELETE", "instances", params=since)
        assert purged.status_code == 200 and purged.json() == {"instancesDeleted": 1}
        assert await engine.get_status(running) is not None and await engine.get_status(done) is None

    run_engine(body)
