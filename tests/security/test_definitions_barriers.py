"""Barriers of the definitions API, each on its own: a definition names only what the app configures and what
its author may see (another owner's agents and workflows are unknown to it, as they are to a GET)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.errors import guarded
from shared.runtime.settings import reset_settings
from tests.api.test_definitions import WRITER, call, env, error, principal

__all__ = ["env"]

ANALYST = {**WRITER, "id": "analyst", "name": "Analyst"}


def _flow(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"id": "flow", "name": "Flow", "inputs": {"q": {"type": "string"}}, "nodes": list(nodes)}


def _agent_node(agent: str) -> dict[str, Any]:
    return {"id": "ask", "kind": "agent", "agent": agent, "input": {"prompt": {"from": "input.q"}}}


def _first_issue(status: int, body: dict[str, Any]) -> tuple[int, str, str]:
    issue = body["error"]["errors"][0]
    return status, issue["code"], issue["path"]


@pytest.fixture
def easy_auth(env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    env.setenv("WEBSITE_AUTH_ENABLED", "true")
    reset_settings()
    return env


def test_a_workflow_cannot_reference_another_owners_agent(easy_auth: pytest.MonkeyPatch) -> None:
    assert call("POST", "agents", ANALYST, headers=principal("alice"))[0] == 201
    got = call("POST", "workflows", _flow(_agent_node("analyst")), headers=principal("bob"))
    assert _first_issue(*got) == (400, "UNKNOWN_AGENT", "nodes.0.agent")
    # Its owner may reference it: the refusal is about ownership, not the workflow.
    assert call("POST", "workflows", _flow(_agent_node("analyst")), headers=principal("alice"))[0] == 201


def test_a_team_cannot_enlist_another_owners_agent(easy_auth: pytest.MonkeyPatch) -> None:
    assert call("POST", "agents", ANALYST, headers=principal("alice"))[0] == 201
    crew = {"id": "crew", "name": "Crew", "agents": ["analyst"], "strategy": {"type": "sequential"}}
    assert _first_issue(*call("POST", "teams", crew, headers=principal("bob"))) == (400, "UNKNOWN_AGENT", "agents.0")


def test_a_workflow_cannot_call_another_owners_workflow(easy_auth: pytest.MonkeyPatch) -> None:
    say = {"id": "say", "kind": "step", "step": "generate_response", "input": {"question": {"from": "input.q"}}}
    assert call("POST", "workflows", {**_flow(say), "id": "inner"}, headers=principal("alice"))[0] == 201
    outer = _flow({"id": "sub", "kind": "workflow", "workflow": "inner", "input": {"q": {"from": "input.q"}}})
    assert _first_issue(*call("POST", "workflows", outer, headers=principal("bob"))) == (
        400,
        "UNKNOWN_WORKFLOW",
        "nodes.0.workflow",
    )


def test_an_agent_cannot_name_a_tool_the_app_does_not_configure(env: pytest.MonkeyPatch) -> None:
    agent = {**WRITER, "tools": ["http.fetch_anything"]}
    assert _first_issue(*call("POST", "agents", agent)) == (400, "UNKNOWN_TOOL", "tools.0")


def test_an_agent_cannot_choose_a_provider_the_app_does_not_configure(env: pytest.MonkeyPatch) -> None:
    agent = {**WRITER, "model": {"provider": "openai", "model": "gpt-4o"}}
    assert _first_issue(*call("POST", "agents", agent)) == (400, "PROVIDER_NOT_CONFIGURED", "model.provider")


def test_the_owner_comes_from_the_principal_never_the_body(easy_auth: pytest.MonkeyPatch) -> None:
    body = {**WRITER, "owner": {"id": "alice"}}
    assert error(*call("POST", "agents", body, headers=principal("mallory"))) == (
        400,
        "INVALID_DEFINITION",
        "owner",
    )


def test_with_no_sandbox_no_definition_may_name_the_code_step(env: pytest.MonkeyPatch) -> None:
    env.setenv("SANDBOX_PROVIDER", "off")
    reset_settings()
    agent = {**WRITER, "tools": ["run_python"]}
    assert _first_issue(*call("POST", "agents", agent)) == (400, "UNKNOWN_TOOL", "tools.0")
    assert _first_issue(*call("POST", "agents", {**WRITER, "tools": ["python.run"]})) == (
        400,
        "UNKNOWN_TOOL",
        "tools.0",
    )
    step = {"id": "calc", "kind": "step", "step": "run_python", "input": {"question": {"from": "input.q"}}}
    assert _first_issue(*call("POST", "workflows", _flow(step))) == (400, "UNKNOWN_STEP", "nodes.0.step")
    # With a sandbox, the same agent is accepted: the refusal is the sandbox setting's.
    env.setenv("SANDBOX_PROVIDER", "local")
    reset_settings()
    assert call("POST", "agents", agent)[0] == 201


def test_a_run_pins_only_the_callers_own_definitions(easy_auth: pytest.MonkeyPatch) -> None:
    """A workflow already naming another owner's agent (saved before this check, or by an admin) does not run it."""
    import asyncio

    import azure.functions as func

    from api.runs import start_run
    from shared.definitions.store import Owner, get_store
    from shared.definitions.validate import parse
    from shared.runtime.settings import get_settings

    assert call("POST", "agents", ANALYST, headers=principal("alice"))[0] == 201
    store = get_store(get_settings())
    store.save(parse("workflow", _flow(_agent_node("analyst"))), owner=Owner("bob", "bob"), create=True)
    body = json.dumps({"inputs": {"q": "sales?"}}).encode()
    req = func.HttpRequest(
        method="POST", url="http://localhost/api/workflows/flow/runs", headers=principal("bob"), body=body
    )
    resp = asyncio.run(guarded("workflow_run", lambda: start_run(req, None, "workflows", "flow")))
    assert error(resp.status_code, json.loads(resp.get_body()))[:2] == (409, "DEFINITION_MISSING")
