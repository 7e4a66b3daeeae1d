"""Untrusted schemas over HTTP on a devhost process, as a user would send them (issue 24, items 1 and 2).

Each barrier on its own: an agent's ``output_schema`` with a remote ``$ref`` (a counting server on loopback
sees 0 requests), a ``file://`` ``$ref`` (the file's content never comes back), a pattern RE2 cannot run
and an oversized schema are refused on save with 400 ``INVALID_DEFINITION`` naming the path; a catastrophic
pattern is run on RE2 against the model's text, so the run fails with a clear message and the host keeps
answering ``/api/health``; an MCP server's unsafe tools are left out, with their reasons in ``GET /api/tools``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess, HostStartError
from tests.fakes.counting_server import PLANTED, CountingServer
from tests.jobs.jobclient import JobClient
from tests.tools.test_mcp_schema_safety import LEFT_OUT, counting, hostile_url

__all__ = ["counting", "hostile_url"]  # the counting server and the hostile MCP server, once for this module

pytestmark = pytest.mark.slow

CATASTROPHIC = r"^([\s\S]+)+Z$"
SECRET = "TOP-SECRET-FILE-CONTENT"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "secret.json"
    path.write_text(json.dumps({"enum": [SECRET]}))
    return path


@pytest.fixture(scope="module")
def host(azurite: Azurite, hostile_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "schemas" + uuid.uuid4().hex[:12],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "TOOLS_MCP_SERVERS": json.dumps([{"name": "h", "url": hostile_url, "allowed_tools": "*", "timeout_s": 10}]),
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("schemas-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def agent(agent_id: str, output_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": agent_id,
        "name": agent_id,
        "instructions": "Summarise what the documents say.",
        "tools": ["consult_rag"],
        "output_schema": output_schema,
    }


def summary_schema(summary: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"summary": summary}, "required": ["summary"]}


def refused(jobs: JobClient, body: dict[str, Any]) -> dict[str, Any]:
    """Save the agent; it must be refused with 400 INVALID_DEFINITION. The first issue."""
    resp = jobs.http.post("/api/agents", json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "INVALID_DEFINITION", error
    assert error["field"] == error["errors"][0]["path"]
    return dict(error["errors"][0])


def test_a_remote_ref_is_refused_on_save_and_never_fetched(jobs: JobClient, counting: CountingServer) -> None:
    for target in (f"{counting.url}/x.json", "http://169.254.169.254/latest/meta-data/"):
        issue = refused(jobs, agent("remote", summary_schema({"$ref": target})))
        assert issue["code"] == "UNSAFE_SCHEMA" and issue["path"] == "output_schema.properties.summary.$ref"
        assert "not a local reference" in issue["message"]
    assert counting.hits == 0
    assert jobs.http.get("/api/agents/remote").status_code == 404


def test_a_file_ref_is_refused_on_save_and_the_file_never_read(jobs: JobClient, secret_file: Path) -> None:
    resp = jobs.http.post("/api/agents", json=agent("local-file", summary_schema({"$ref": secret_file.as_uri()})))
    assert resp.status_code == 400 and SECRET not in resp.text
    issue = resp.json()["error"]["errors"][0]
    assert (issue["code"], issue["path"]) == ("UNSAFE_SCHEMA", "output_schema.properties.summary.$ref")


def test_a_pattern_re2_cannot_run_is_refused_on_save(jobs: JobClient) -> None:
    issue = refused(jobs, agent("backref", summary_schema({"type": "string", "pattern": r"^(\w+) \1$"})))
    assert (issue["code"], issue["path"]) == ("UNSAFE_SCHEMA", "output_schema.properties.summary.pattern")
    assert "RE2" in issue["message"]


def test_an_oversized_schema_is_refused_on_save(jobs: JobClient) -> None:
    wide = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string", "description": "d" * 60} for i in range(1200)},
    }
    issue = refused(jobs, agent("wide", wide))
    assert (issue["code"], issue["path"]) == ("UNSAFE_SCHEMA", "output_schema")
    assert "characters" in issue["message"]
    # (An over-deep schema is refused before this check: the API's body depth bound answers 400 INVALID_JSON.)


def test_a_catastrophic_pattern_runs_on_re2_and_the_host_keeps_answering(jobs: JobClient, host: DevHostProcess) -> None:
    # Saved: RE2 runs this pattern in linear time (Python's re would take ~2**n steps on an n-character text).
    resp = jobs.http.post(
        "/api/agents", json=agent("catastrophic", summary_schema({"type": "string", "pattern": CATASTROPHIC}))
    )
    assert resp.status_code == 201, resp.text
    flow = {
        "id": "catastrophic-flow",
        "name": "Catastrophic",
        "inputs": {"q": {"type": "string"}},
        "nodes": [{"id": "ask", "kind": "agent", "agent": "catastrophic", "input": {"prompt": {"from": "input.q"}}}],
        "outputs": {"summary": {"from": "ask.summary"}},
    }
    resp = jobs.http.post("/api/workflows", json=flow)
    assert resp.status_code == 201, resp.text
    cpu_before = _cpu_seconds(host)
    resp = jobs.http.post(
        "/api/workflows/catastrophic-flow/runs",
        json={"inputs": {"q": "What does the policy say about refunds after 30 days?"}},
    )
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["id"]
    health = httpx.get(f"{host.base_url}/api/health", timeout=60)
    assert health.status_code == 200
    # The step fails with a clear message; the failure policy asks the person what to do (retry, skip, ...).
    view = jobs.wait(run_id, {"waiting_for_user"}, timeout_s=180)
    error = view["waiting"]["details"]["error"]
    assert error["code"] == "BAD_REQUEST"
    assert "does not fit the output schema at summary" in error["message"] and "does not match" in error["message"]
    assert httpx.get(f"{host.base_url}/api/health", timeout=60).status_code == 200
    print(f"host CPU for the whole run: {_cpu_seconds(host) - cpu_before:.2f} s")  # a figure, not an assert
    assert jobs.cancel(run_id).status_code in (200, 202)


def _cpu_seconds(host: DevHostProcess) -> float:
    """User + system CPU of the host process and its children so far (Linux /proc)."""
    assert host.proc is not None
    fields = Path(f"/proc/{host.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])
    import os

    return ticks / os.sysconf("SC_CLK_TCK")


def test_an_mcp_servers_unsafe_tools_are_left_out_and_listed_with_why(
    jobs: JobClient, counting: CountingServer
) -> None:
    resp = jobs.http.get("/api/tools")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    names = {tool["name"] for tool in body["tools"]}
    assert {"mcp.h.slow_pattern", "mcp.h.echo_out"} <= names
    assert not names & {f"mcp.h.{name}" for name in LEFT_OUT}
    reasons = {entry["name"]: entry["reason"] for entry in body["left_out"]}
    assert set(reasons) == {f"mcp.h.{name}" for name in LEFT_OUT}
    assert "inputSchema.properties.q.$ref" in reasons["mcp.h.remote_ref"]
    assert counting.hits == 0


def test_an_http_tool_entry_with_a_remote_ref_stops_the_app_loading_and_is_never_fetched(
    counting: CountingServer, tmp_path: Path
) -> None:
    notes = {
        "name": "notes",
        "description": "Save a note.",
        "url": "http://127.0.0.1:9/notes/{text}",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "$ref": f"{counting.url}/text.json"}},
            "required": ["text"],
        },
        "private_hosts": ["127.0.0.1"],
    }
    # The app checks its settings at start: it refuses to load, naming the setting and the schema's path.
    proc = DevHostProcess(REPO_ROOT, tmp_path, env={"TOOLS_HTTP": json.dumps([notes])})
    with pytest.raises(HostStartError) as info:
        proc.start()
    said = str(info.value)
    assert "invalid setting TOOLS_HTTP" in said and "parameters.properties.text.$ref" in said
    assert "not a local reference" in said and PLANTED not in said
    assert counting.hits == 0
