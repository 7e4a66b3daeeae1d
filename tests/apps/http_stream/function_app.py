"""HTTP streams test app: functions written for azurefunctions-extensions-http-fastapi, beside a classic one."""

import asyncio
from collections.abc import AsyncIterator

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.http.fastapi import JSONResponse, Request, StreamingResponse

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
# Set by /release: the stream below sends its first chunk, then waits for it (no sleeps, no timing).
_release = asyncio.Event()


@app.route(route="stream/{name}", methods=["GET"])
async def stream(req: Request) -> StreamingResponse:
    """Sends one chunk, then the rest once /release was called; longer than functionTimeout is fine."""
    name = req.path_params["name"]

    async def body() -> AsyncIterator[bytes]:
        yield f"hello {name}\n".encode()
        await _release.wait()
        _release.clear()
        for i in range(3):
            yield f"chunk {i}\n".encode()

    return StreamingResponse(body(), media_type="text/plain", headers={"X-Stream": "yes"})


@app.route(route="release", methods=["POST"])
async def release(req: func.HttpRequest) -> func.HttpResponse:
    """A classic function in the same app: releases the stream."""
    _release.set()
    return func.HttpResponse("released")


@app.route(route="upload", methods=["POST"])
async def upload(req: Request) -> JSONResponse:
    """Reads the request body as a stream and answers its size, the query and a header."""
    size = 0
    async for chunk in req.stream():
        size += len(chunk)
    return JSONResponse({"size": size, "q": req.query_params.get("q"), "h": req.headers.get("x-test")}, status_code=201)


@app.route(route="durable-stream", methods=["GET"])
@app.durable_client_input(client_name="client")
async def durable_stream(req: Request, client: df.DurableOrchestrationClient) -> StreamingResponse:
    """The extension's request together with a durable client binding."""
    status = await client.get_status("nope")

    async def body() -> AsyncIterator[str]:
        yield f"client={type(client).__name__} found={bool(status and status.name)}\n"

    return StreamingResponse(body(), media_type="text/plain")
