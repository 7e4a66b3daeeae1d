"""MCP tools whose schemas are hostile, from a real MCP server on loopback (tests/tools/mcp_hostile_server.py).

Each barrier on its own: a remote ``$ref`` (a counting server on loopback: 0 requests), a ``file://`` ``$ref``,
a pattern RE2 cannot run, an oversized and an over-deep schema are left out, each with its reason (logged
and listed); a catastrophic pattern runs on RE2 and answers at once; a server's output schema is not run.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import McpServer, Settings
from shared.tools import ToolContext, run_tool, tools
from shared.tools import mcp as mcp_family
from tests.fakes.counting_server import CountingServer

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("mcp_hostile_server.py")
CTX = ToolContext(job_id="job-1", step_id="s1")
LEFT_OUT = {"remote_ref", "file_ref", "backref", "deep", "huge"}


@pytest.fixture(scope="module")
def counting() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


@pytest.fixture(scope="module")
def hostile_url(counting: CountingServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start the hostile MCP server on a port the OS picks (as tests/tools/test_mcp.py starts its server)."""
    log = tmp_path_factory.mktemp("mcp-hostile") / "server.log"
    with log.open("wb") as out:
        command = [sys.executable, str(SERVER), "--ref-base", counting.url]
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
            if found:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the hostile MCP server did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        yield f"{found.group(1)}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _fresh_listings() -> Iterator[None]:
    mcp_family.clear_listings()
    yield
    mcp_family.clear_listings()


def settings_for(url: str) -> Settings:
    server = McpServer.model_validate({"name": "h", "url": url, "allowed_tools": "*", "timeout_s": 10.0})
    return Settings(tools_mcp_servers=[server], tools_mcp_list_ttl_seconds=300.0)


def test_tools_with_unsafe_input_schemas_are_left_out_with_their_reasons(
    hostile_url: str, counting: CountingServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(hostile_url)
    with caplog.at_level(logging.WARNING, logger="shared.tools.mcp"):
        names = set(tools(settings))
    assert {n for n in names if n.startswith("mcp.h.")} == {"mcp.h.slow_pattern", "mcp.h.echo_out"}
    reasons = {entry["name"]: entry["reason"] for entry in mcp_family.left_out_tools(settings)}
    assert set(reasons) == {f"mcp.h.{name}" for name in LEFT_OUT}
    assert "inputSchema.properties.q.$ref" in reasons["mcp.h.remote_ref"]
    assert "not a local reference" in reasons["mcp.h.remote_ref"]
    assert "file:///etc/passwd" in reasons["mcp.h.file_ref"]
    assert "RE2" in reasons["mcp.h.backref"] and "inputSchema.properties.q.pattern" in reasons["mcp.h.backref"]
    assert "deeper" in reasons["mcp.h.deep"]
    assert "chars" in reasons["mcp.h.huge"]
    logged = caplog.text
    assert all(f"tool '{name}' skipped" in logged for name in LEFT_OUT)
    assert counting.hits == 0


def test_a_catastrophic_pattern_runs_on_re2_and_the_call_answers_at_once(hostile_url: str) -> None:
    tool = tools(settings_for(hostile_url))["mcp.h.slow_pattern"]
    started = time.process_time()
    result = run_tool(tool, {"text": "x" * 200_000}, CTX)
    cpu = time.process_time() - started
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.INVALID_INPUT and "does not match" in result.error.message
    print(f"catastrophic pattern on 200,000 characters: {cpu * 1000:.1f} ms CPU")  # a figure, not an assert
    matched = run_tool(tool, {"text": "x" * 1000 + "Z"}, CTX)
    assert matched.success and matched.data == {"result": "matched"}


def test_a_servers_output_schema_is_not_run(hostile_url: str) -> None:
    tool = tools(settings_for(hostile_url))["mcp.h.echo_out"]
    # The SDK would check this result against the catastrophic pattern with Python's re: 2**5000 steps.
    result = run_tool(tool, {"n": 5_000}, CTX)
    assert result.success, result.error
    assert isinstance(result.data, dict) and len(result.data["text"]) == 5_000
