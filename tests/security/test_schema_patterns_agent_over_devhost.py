"""A catastrophic pattern in an MCP tool's and an HTTP tool's schema, hit by a model's arguments in an agent-mode
job on a devhost process (the path that froze the host for 30 s): RE2 answers at once, the tool call fails with
``INVALID_INPUT`` naming the field, no request reaches the API, and the host keeps answering ``/api/health``.

The Executor is the fake OpenAI server; the MCP server is the hostile one of tests/tools.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.fakes.loopback import LoopbackServer
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.jobclient import JobClient
from tests.tools.test_mcp_schema_safety import counting, hostile_url

__all__ = ["counting", "hostile_url"]

pytestmark = pytest.mark.slow

AOAI_KEY = "fake-aoai-key-patterns"
CATASTROPHIC = r"^([\s\S]+)+Z$"
# Python's re would need about 2**5000 steps to refuse this text; RE2 reads it once.
LONG = "x" * 5_000
ANSWER = {"answer": "Done.", "citations": [], "claims": []}


class NotesApi:
    """A loopback API that counts the requests that reach it."""

    def __init__(self) -> None:
        self.hits = 0
        self.server = LoopbackServer(Starlette(routes=[Route("/notes", self.note, methods=["POST"])]), name="notes")

    async def note(self, request: Request) -> Response:
        self.hits += 1
        return JSONResponse({"saved": True})


@pytest.fixture(scope="module")
def notes() -> Iterator[NotesApi]:
    api = NotesApi()
    api.server.start()
    yield api
    api.server.stop()


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=AOAI_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def host(
    llm: FakeOpenAI, notes: NotesApi, hostile_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevHostProcess]:
    notes_tool = {
        "name": "notes",
        "description": "Save a note that ends in Z.",
        "method": "POST",
        "url": f"{notes.server.origin}/notes",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "pattern": CATASTROPHIC}},
            "required": ["text"],
        },
        "private_hosts": ["127.0.0.1"],
        "timeout_s": 5,
    }
    mcp_server = {"name": "h", "url": hostile_url, "allowed_tools": ["slow_pattern"], "timeout_s": 10}
    env = {
        "LLM_PROVIDER": "azure_openai",
        "AZURE_OPENAI_ENDPOINT": llm.endpoint,
        "AZURE_OPENAI_API_KEY": AOAI_KEY,
        "AZURE_OPENAI_CHAT_DEPLOYMENT": "agent-dep",
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "TOOLS_HTTP": json.dumps([notes_tool]),
        "TOOLS_MCP_SERVERS": json.dumps([mcp_server]),
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("patterns-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


def call(tool: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "arguments_json": json.dumps(arguments)}


def test_a_catastrophic_pattern_in_tool_schemas_does_not_freeze_the_host(
    llm: FakeOpenAI, notes: NotesApi, host: DevHostProcess
) -> None:
    jobs = JobClient(host)
    llm.always(JsonReply(ANSWER), task="write_answer")
    llm.script(
        JsonReply(
            {
                "reasoning": "Save the text twice.",
                "tool_calls": [
                    call("mcp.h.slow_pattern", {"text": LONG}, "m"),
                    call("http.notes", {"text": LONG}, "h"),
                ],
            }
        ),
        JsonReply({"reasoning": "Done.", "tool_calls": [call("format_output", {}, "end")]}),
        task="agent_turn",
    )
    job_id = jobs.submit("Save my note.", mode="agent", tools=["mcp.h.slow_pattern", "http.notes"])
    assert httpx.get(f"{host.base_url}/api/health", timeout=60).status_code == 200
    view = jobs.wait(job_id, timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    by_kind = {s["kind"]: s for s in view["steps"]}
    for tool in ("mcp.h.slow_pattern", "http.notes"):
        step = by_kind[tool]
        assert step["state"] == "failed" and step["error"]["code"] == "INVALID_INPUT", step
        assert step["error"]["message"].startswith(f"{tool}: text: ") and "does not match" in step["error"]["message"]
    assert notes.hits == 0
    assert httpx.get(f"{host.base_url}/api/health", timeout=60).status_code == 200
    assert llm.failures == []
