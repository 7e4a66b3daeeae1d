"""The definitions API through the app's handlers, on a definitions table in Azurite: every validation error is a
400 naming its path and code, the size limit a 413, versions, ownership, delete, and the LLM endpoints."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import azure.functions as func
import pytest

import api.definitions as defs_api
import api.llm as llm_api
from api.errors import guarded
from devhost.storage.azurite import Azurite
from shared.definitions import usage
from shared.definitions.models import MAX_DEFINITION_BYTES
from shared.definitions.store import reset_stores
from shared.runtime.settings import reset_settings
from tests.fakes.openai_server import FakeOpenAI, TextReply

WRITER = {"id": "writer", "name": "Writer", "instructions": "Write a short report."}
ANALYST = {
    "id": "analyst",
    "name": "Analyst",
    "instructions": "Analyse sales.",
    "tools": ["execute_azure_sql"],
    "output_schema": {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]},
}
STORE_ENV = ("AzureWebJobsStorage", "DEFINITIONS_TABLE", "AzureWebJobsStorage__tableServiceUri")


@pytest.fixture
def env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The app's settings on a definitions table of this test's own in the session's Azurite."""
    for name in ("DEFINITIONS_TABLE_ENDPOINT", "AzureWebJobsStorage__tableServiceUri", "LLM_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    monkeypatch.setenv("DEFINITIONS_TABLE", "api" + uuid.uuid4().hex[:12])
    reset_settings()
    reset_stores()
    yield monkeypatch
    usage.set_in_flight_check(None)
    reset_settings()
    reset_stores()


def call(
    method: str,
    path: str,
    body: Any = None,
    *,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """One request through the route's handler and ``guarded`` (the error mapping every route uses)."""
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    url = f"http://localhost/api/{path}"
    req = func.HttpRequest(
        method=method, url=url, headers=headers or {}, params=params or {}, route_params={}, body=raw
    )
    parts = path.split("/")
    handler: Any
    if parts[0] == "llm":
        handler = llm_api.models_handler(req) if parts[1] == "models" else llm_api.llm_test_handler(req)
    elif len(parts) == 1:
        handler = (defs_api.list_definitions if method == "GET" else defs_api.create_definition)(req, parts[0])
    elif method == "GET":
        handler = defs_api.get_definition(req, parts[0], parts[1])
    elif method == "PUT":
        handler = defs_api.update_definition(req, parts[0], parts[1])
    else:
        handler = defs_api.delete_definition(req, parts[0], parts[1], None)

    async def run() -> func.HttpResponse:
        return await guarded(path, lambda: handler)

    response = asyncio.run(run())
    return response.status_code, json.loads(response.get_body() or b"null")


def error(status: int, body: dict[str, Any]) -> tuple[int, str, str | None]:
    return status, body["error"]["code"], body["error"].get("field")


# ----- create, get, update, list, versions ---------------------------------------------------------------


def test_create_get_update_and_versions(env: pytest.MonkeyPatch) -> None:
    status, created = call("POST", "agents", WRITER)
    assert status == 201 and (created["id"], created["version"], created["latest_version"]) == ("writer", 1, 1)
    assert created["definition"]["instructions"] == "Write a short report."
    status, updated = call("PUT", "agents/writer", {**WRITER, "instructions": "Write a long report."})
    assert status == 200 and updated["version"] == 2 and updated["created"] is True
    assert [v["version"] for v in updated["versions"]] == [1, 2]
    same = call("PUT", "agents/writer", {**WRITER, "instructions": "Write a long report."})[1]
    assert (same["version"], same["created"]) == (2, False)  # nothing changed: no new version
    old = call("GET", "agents/writer", params={"version": "1"})[1]
    assert old["version"] == 1 and old["definition"]["instructions"] == "Write a short report."
    assert call("GET", "agents/writer")[1]["version"] == 2
    assert error(*call("GET", "agents/writer", params={"version": "9"})) == (404, "DEFINITION_NOT_FOUND", "version")
    call("POST", "agents", ANALYST)
    listed = call("GET", "agents")[1]["agents"]
    assert [(a["id"], a["latest_version"]) for a in listed] == [("analyst", 1), ("writer", 2)]


def test_create_update_and_get_refuse_the_wrong_state(env: pytest.MonkeyPatch) -> None:
    assert error(*call("GET", "agents/ghost")) == (404, "DEFINITION_NOT_FOUND", None)
    assert error(*call("PUT", "agents/ghost", WRITER | {"id": "ghost"})) == (404, "DEFINITION_NOT_FOUND", None)
    call("POST", "agents", WRITER)
    assert error(*call("POST", "agents", WRITER)) == (409, "DEFINITION_EXISTS", None)
    assert error(*call("PUT", "agents/writer", WRITER, params={"expected_version": "3"}))[:2] == (
        409,
        "DEFINITION_CONFLICT",
    )
    assert error(*call("PUT", "agents/writer", {**WRITER, "id": "other"})) == (400, "INVALID_DEFINITION", "id")
    # The id may be left out of an update body: the URL names it.
    body = {k: v for k, v in WRITER.items() if k != "id"} | {"description": "new"}
    assert call("PUT", "agents/writer", body)[1]["version"] == 2


def test_bad_json_and_the_size_limits(env: pytest.MonkeyPatch) -> None:
    assert error(*call("POST", "agents", b"{not json")) == (400, "INVALID_JSON", None)
    assert error(*call("POST", "agents", b"[" * 40 + b"]" * 40)) == (400, "INVALID_JSON", None)
    assert error(*call("POST", "agents", b"x" * (defs_api.MAX_BODY_BYTES + 1))) == (413, "PAYLOAD_TOO_LARGE", None)
    # Each field within its own limit, the whole definition over MAX_DEFINITION_BYTES: 413 as well.
    nodes = [
        {"id": f"n{i}", "kind": "human", "after": [f"n{i - 1}"] if i else [], "question": {"template": "q" * 5000}}
        for i in range(60)
    ]
    status, body = call("POST", "workflows", {"id": "big", "name": "Big", "nodes": nodes})
    assert (status, body["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert str(MAX_DEFINITION_BYTES) in body["error"]["message"]


# ----- every validation error: 400 INVALID_DEFINITION with the path and the code ------------------------------


def ask(node_id: str = "ask", **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "agent", "agent": "analyst", "input": {"prompt": {"from": "input.q"}}, **extra}


def flow(*nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "flow", "name": "Flow", "inputs": {"q": {"type": "string"}}, "nodes": list(nodes), **extra}


def team(agents: list[str], strategy: dict[str, Any]) -> dict[str, Any]:
    return {"id": "crew", "name": "Crew", "agents": agents, "strategy": strategy}


SUB_CALL = {"id": "sub", "kind": "workflow", "workflow": "inner", "input": {"q": {"value": "x"}}}
INVALID = [
    ("agents", {**WRITER, "temperature": 1}, "temperature", "INVALID_FIELD"),
    ("agents", {**WRITER, "id": "Not A Slug"}, "id", "INVALID_FIELD"),
    # Who owns a definition comes from the signed-in principal alone, never from the body.
    ("agents", {**WRITER, "owner": {"id": "oid-mallory"}}, "owner", "INVALID_FIELD"),
    ("agents", {**WRITER, "tools": ["teleport"]}, "tools.0", "UNKNOWN_TOOL"),
    ("agents", {**WRITER, "tools": ["http.weather"]}, "tools.0", "UNKNOWN_TOOL"),
    ("agents", {**WRITER, "tools": ["consult_rag", "consult_rag"]}, "tools.1", "DUPLICATE_TOOL"),
    ("agents", {**WRITER, "output_schema": {"type": 5}}, "output_schema.type", "INVALID_SCHEMA"),
    ("agents", {**WRITER, "output_schema": {"type": "array"}}, "output_schema", "INVALID_SCHEMA"),
    ("agents", {**WRITER, "model": {"provider": "openai"}}, "model.provider", "PROVIDER_NOT_CONFIGURED"),
    ("teams", team(["ghost"], {"type": "sequential"}), "agents.0", "UNKNOWN_AGENT"),
    ("teams", team(["writer", "writer"], {"type": "sequential"}), "agents.1", "DUPLICATE_MEMBER"),
    ("teams", team(["writer"], {"type": "supervisor", "supervisor": "writer"}), "strategy.supervisor",
     "ROLE_IS_MEMBER"),
    ("teams", team(["writer"], {"type": "parallel", "aggregator": "ghost"}), "strategy.aggregator", "UNKNOWN_AGENT"),
    ("teams", team(["writer"], {"type": "vote"}), "strategy.type", "INVALID_FIELD"),
    ("workflows", flow({"id": "x", "kind": "teleport"}), "nodes.0.kind", "INVALID_FIELD"),
    ("workflows", flow(ask(agent="ghost")), "nodes.0.agent", "UNKNOWN_AGENT"),
    ("workflows", flow(ask(version=5)), "nodes.0.agent", "UNKNOWN_AGENT"),
    ("workflows", flow(ask(), ask("b", after=["nope"])), "nodes.1.after.0", "UNKNOWN_NODE"),
    ("workflows", flow(ask(), start="nope"), "start", "UNKNOWN_NODE"),
    ("workflows", flow(ask(), ask("ask", after=["ask"])), "nodes.1.id", "DUPLICATE_NODE"),
    ("workflows", flow(ask("input")), "nodes.0.id", "RESERVED_ID"),
    ("workflows", flow(ask("a", after=["b"]), ask("b", after=["a"])), "nodes.0.after", "CYCLE"),
    ("workflows", flow(ask("a"), ask("b")), "nodes.1", "UNREACHABLE_NODE"),
    ("workflows", flow(ask("a"), {"id": "j", "kind": "join", "after": ["a"]}), "nodes.1.after", "INVALID_GRAPH"),
    ("workflows", flow({"id": "s", "kind": "step", "step": "plan"}), "nodes.0.step", "UNKNOWN_STEP"),
    ("workflows", flow({"id": "t", "kind": "tool", "tool": "http.nope"}), "nodes.0.tool", "UNKNOWN_TOOL"),
    ("workflows", flow(ask(input={"prompt": {"from": "input.q"}, "tone": {"value": "dry"}})), "nodes.0.input.tone",
     "UNKNOWN_FIELD"),
    ("workflows", flow({"id": "s", "kind": "step", "step": "consult_rag", "input": {}}), "nodes.0.input.query",
     "MISSING_INPUT"),
    ("workflows", flow(ask(), ask("b", after=["ask"], input={"prompt": {"from": "ask.score"}})),
     "nodes.1.input.prompt", "TYPE_MISMATCH"),
    ("workflows", flow(ask(input={"prompt": {"from": "input.country"}})), "nodes.0.input.prompt.from",
     "UNKNOWN_INPUT"),
    ("workflows", flow(ask(), ask("b", after=["ask"], input={"prompt": {"from": "ask.nope"}})),
     "nodes.1.input.prompt.from", "UNKNOWN_FIELD"),
    ("workflows", flow(ask(), ask("b", after=["ask"]), ask("c", after=["ask"], input={"prompt": {"from": "b.text"}})),
     "nodes.2.input.prompt.from", "NOT_UPSTREAM"),
    ("workflows", flow(ask(), {"id": "c", "kind": "condition", "after": ["ask"],
                               "if": {"left": "ask.score", "op": "eq", "right": "high"}}),
     "nodes.1.if.right", "TYPE_MISMATCH"),
    ("workflows", flow({"id": "h", "kind": "human", "question": {"value": "?"}}), "nodes.0.options", "INVALID_FIELD"),
    ("workflows", {**flow(ask()), "inputs": {"q": {"type": "integer", "default": "x"}}}, "inputs.q.default",
     "TYPE_MISMATCH"),
    ("workflows", flow(ask("a"), {"id": "l", "kind": "loop", "after": ["a"], "body": ["b"], "max_iterations": 2},
                       ask("b"), ask("c", after=["b"])), "nodes.3.after.0", "INVALID_GRAPH"),
    ("workflows", flow({**SUB_CALL, "workflow": "ghost"}), "nodes.0.workflow", "UNKNOWN_WORKFLOW"),
    ("workflows", flow({**SUB_CALL, "input": {"q": {"value": 1}}}), "nodes.0.input.q", "TYPE_MISMATCH"),
]  # fmt: skip


@pytest.mark.parametrize(("plural", "body", "field", "code"), INVALID, ids=[f"{c}-{f}" for _, _, f, c in INVALID])
def test_every_validation_error_is_a_400_with_its_path_and_code(
    env: pytest.MonkeyPatch, plural: str, body: dict[str, Any], field: str, code: str
) -> None:
    call("POST", "agents", WRITER)
    call("POST", "agents", ANALYST)
    call("POST", "workflows", {**flow(ask()), "id": "inner"})
    status, answer = call("POST", plural, body)
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (400, "INVALID_DEFINITION", field), answer
    first = answer["error"]["errors"][0]
    assert (first["path"], first["code"]) == (field, code)
    assert first["message"] and "Traceback" not in json.dumps(answer)
    # Nothing was saved.
    assert call("GET", f"{plural}/{body.get('id', 'x')}")[0] in (404, 200 if plural == "agents" else 404)


def test_a_sub_workflow_ring_is_refused(env: pytest.MonkeyPatch) -> None:
    call("POST", "agents", ANALYST)
    call("POST", "workflows", {**flow(ask()), "id": "inner"})
    call("POST", "workflows", flow({**SUB_CALL}))  # flow → inner
    ring = {**flow({**SUB_CALL, "id": "back", "workflow": "flow", "input": {"q": {"value": "x"}}}), "id": "inner"}
    status, body = call("PUT", "workflows/inner", ring)  # inner → flow → inner
    assert error(status, body) == (400, "INVALID_DEFINITION", "nodes.0.workflow")
    assert body["error"]["errors"][0]["code"] == "SUB_WORKFLOW_CYCLE"


def test_several_problems_are_all_listed(env: pytest.MonkeyPatch) -> None:
    status, body = call("POST", "agents", {**WRITER, "tools": ["teleport", "http.x"], "output_schema": {"type": 1}})
    assert status == 400 and len(body["error"]["errors"]) == 3
    assert "and 2 more" in body["error"]["message"]


# ----- delete -------------------------------------------------------------------------------------------------


def test_delete_archives_and_is_refused_while_in_use(env: pytest.MonkeyPatch) -> None:
    call("POST", "agents", WRITER)
    call("POST", "teams", team(["writer"], {"type": "sequential"}))
    assert error(*call("DELETE", "agents/writer")) == (409, "DEFINITION_REFERENCED", None)
    seen: list[tuple[str, str]] = []

    async def running(kind: str, def_id: str, _client: Any) -> list[str]:
        seen.append((kind, def_id))
        return ["run-1"]

    usage.set_in_flight_check(running)
    status, body = call("DELETE", "teams/crew")
    assert (status, body["error"]["code"]) == (409, "DEFINITION_IN_USE") and "run-1" in body["error"]["message"]
    assert seen == [("team", "crew")]
    usage.set_in_flight_check(None)
    assert call("DELETE", "teams/crew") == (200, {"id": "crew", "kind": "team", "archived": True})
    assert error(*call("GET", "teams/crew")) == (404, "DEFINITION_NOT_FOUND", None)
    assert call("GET", "teams")[1] == {"teams": []}
    assert call("DELETE", "agents/writer")[0] == 200  # the team that named it is archived now


# ----- the store's state as API answers --------------------------------------------------------------------


def test_no_store_configured_is_a_409_never_a_5xx(env: pytest.MonkeyPatch) -> None:
    env.delenv("AzureWebJobsStorage")
    reset_settings()
    reset_stores()
    status, body = call("GET", "agents")
    assert (status, body["error"]["code"]) == (409, "DEFINITIONS_NOT_CONFIGURED")
    assert "not configured" in body["error"]["message"]


def test_an_unreachable_store_is_503_with_retry_after(env: pytest.MonkeyPatch) -> None:
    dead = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/devstoreaccount1"
    env.setenv("AzureWebJobsStorage", dead)
    reset_settings()
    reset_stores()
    assert error(*call("GET", "agents"))[:2] == (503, "DEFINITIONS_STORE_UNAVAILABLE")


# ----- ownership with Easy Auth ------------------------------------------------------------------------------


def principal(user: str, *roles: str) -> dict[str, str]:
    claims = [{"typ": "roles", "val": r} for r in roles]
    raw = json.dumps({"auth_typ": "aad", "claims": claims}).encode()
    return {"x-ms-client-principal-id": user, "x-ms-client-principal": base64.b64encode(raw).decode()}


def test_with_easy_auth_each_user_sees_their_own_definitions(env: pytest.MonkeyPatch) -> None:
    env.setenv("WEBSITE_AUTH_ENABLED", "true")
    reset_settings()
    assert error(*call("GET", "agents"))[:2] == (401, "UNAUTHENTICATED")
    assert call("POST", "agents", WRITER, headers=principal("alice"))[0] == 201
    assert call("GET", "agents", headers=principal("bob"))[1] == {"agents": []}
    assert error(*call("GET", "agents/writer", headers=principal("bob")))[:2] == (404, "DEFINITION_NOT_FOUND")
    assert error(*call("PUT", "agents/writer", WRITER, headers=principal("bob")))[:2] == (404, "DEFINITION_NOT_FOUND")
    assert error(*call("DELETE", "agents/writer", headers=principal("bob")))[:2] == (404, "DEFINITION_NOT_FOUND")
    mine = call("GET", "agents", headers=principal("alice"))[1]["agents"]
    assert [a["id"] for a in mine] == ["writer"]
    assert call("GET", "agents/writer", headers=principal("carol", "Jobs.Admin"))[0] == 200
    # An archived id stays alice's: bob cannot take it up (and so read its old versions).
    assert call("DELETE", "agents/writer", headers=principal("alice"))[0] == 200
    assert error(*call("POST", "agents", WRITER, headers=principal("bob"))) == (409, "DEFINITION_EXISTS", "id")
    revived = call("POST", "agents", WRITER, headers=principal("alice"))[1]
    assert revived["version"] == 2  # taken up again: the version numbers go on


# ----- /api/llm -----------------------------------------------------------------------------------------------


def test_llm_models_and_test_offline(env: pytest.MonkeyPatch) -> None:
    status, body = call("GET", "llm/models")
    assert status == 200 and body["configured"] == "offline"
    assert body["providers"][0]["models"] == [{"id": "offline", "source": "embedded"}]
    assert call("POST", "llm/test")[1]["ok"] is True
    assert error(*call("POST", "llm/test", {"provider": "openai"})) == (400, "INVALID_REQUEST", "provider")
    assert error(*call("POST", "llm/test", {"temperature": 1})) == (400, "INVALID_REQUEST", "temperature")


def test_llm_models_and_test_on_an_openai_compatible_server(env: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(api_key="k1", models=["llama3.2:3b", "qwen2.5:7b"]) as fake:
        env.setenv("LLM_PROVIDER", "openai")
        env.setenv("OPENAI_BASE_URL", fake.base_url)
        env.setenv("OPENAI_API_KEY", "k1")
        env.setenv("OPENAI_MODEL", "llama3.2:3b")
        reset_settings()
        body = call("GET", "llm/models")[1]
        listed = body["providers"][1]
        assert (listed["provider"], listed["error"]) == ("openai", None)
        assert [m["id"] for m in listed["models"]] == ["llama3.2:3b", "qwen2.5:7b"]
        fake.always(TextReply("OK"))
        result = call("POST", "llm/test", {"model": "qwen2.5:7b"})[1]
        assert (result["ok"], result["model"]) == (True, "qwen2.5:7b")
        assert fake.requests[-1].body["model"] == "qwen2.5:7b"
        # A wrong key: a clear result, not an error response.
        env.setenv("OPENAI_API_KEY", "wrong")
        reset_settings()
        failed = call("POST", "llm/test")[1]
        assert (failed["ok"], failed["error"]["code"], failed["error"]["status"]) == (False, "AUTH_FAILED", 401)
        assert call("GET", "llm/models")[1]["providers"][1]["error"]["code"] == "AUTH_FAILED"
    env.setenv("OPENAI_API_KEY", "k1")
    reset_settings()
    gone = call("POST", "llm/test")[1]
    assert (gone["ok"], gone["error"]["code"]) == (False, "UNREACHABLE")
