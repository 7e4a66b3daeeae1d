"""The HTTP edge (issue 8 §3): body caps, deep JSON, long console paths, field-named errors, bad settings.

Each barrier is tested on its own through the app's functions, then over HTTP on a real devhost process
running the app itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import azure.functions as func
import pytest
from pydantic import ValidationError

import api.common
import api.jobs
import api.ui
from api.errors import ApiError, from_validation_error, guarded, json_response
from shared.jobs.models import JobRequest, UserAnswer
from shared.runtime.settings import reset_settings
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess

CAP = api.common.MAX_BODY_BYTES


def request(body: bytes | str, url: str = "http://localhost/api/jobs") -> func.HttpRequest:
    raw = body.encode() if isinstance(body, str) else body
    return func.HttpRequest(method="POST", url=url, headers={}, params={}, route_params={}, body=raw)


def parse_error(body: bytes | str, model: type[Any] = JobRequest) -> ApiError:
    with pytest.raises(ApiError) as caught:
        api.common.parse_body(request(body), model, "a 'question'")
    return caught.value


@pytest.fixture
def fresh_settings() -> Iterator[pytest.MonkeyPatch]:
    """Settings rebuilt from a patched environment, and forgotten again afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        reset_settings()
        yield mp
    reset_settings()


# ----- body size and nesting (api/jobs._parse_body) ----------------------------------------------------------


def test_a_body_over_the_cap_is_413_before_it_is_parsed() -> None:
    # Not even JSON: the size alone decides.
    err = parse_error(b"x" * (CAP + 1))
    assert (err.status, err.code) == (413, "PAYLOAD_TOO_LARGE")
    assert str(CAP) in err.message


def test_a_body_at_the_cap_is_parsed() -> None:
    question = "q" * (CAP - len('{"question": ""}'))
    body = json.dumps({"question": question})
    assert len(body) == CAP
    err = parse_error(body)  # parsed and validated: too long a question, not too large a body
    assert (err.status, err.code, err.field) == (400, "INVALID_REQUEST", "question")


def test_json_nested_deeper_than_the_parser_can_go_is_invalid_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.common, "MAX_BODY_BYTES", 10**6)  # this barrier on its own, without the size cap
    err = parse_error("[" * 100_000)
    assert (err.status, err.code) == (400, "INVALID_JSON")
    assert "nests deeper" in err.message


def test_json_nested_within_the_parser_but_beyond_the_limit_is_invalid_json() -> None:
    depth = api.common.MAX_JSON_DEPTH + 1
    body = '{"question": "q", "constraints": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
    err = parse_error(body)
    assert (err.status, err.code) == (400, "INVALID_JSON")


def test_json_at_the_depth_limit_reaches_validation() -> None:
    depth = api.common.MAX_JSON_DEPTH - 2
    answer = "[" * depth + "1" + "]" * depth
    err = parse_error('{"answer": {"input": ' + answer + "}, " + '"zz": 1}', UserAnswer)
    assert err.code == "INVALID_REQUEST" and err.field == "zz"


# ----- error messages name request fields (api/errors.from_validation_error) -----------------------------------


def validation_error(model: type[Any], body: dict[str, Any]) -> ApiError:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return from_validation_error(caught.value)


@pytest.mark.parametrize(
    ("model", "body", "field", "message"),
    [
        (JobRequest, {"question": "q", "constraints": 5}, "constraints", "constraints must be a JSON object"),
        (JobRequest, {"question": "q", "extra": 1}, "extra", "extra is not a known field"),
        (JobRequest, {}, "question", "question is required"),
        (JobRequest, {"question": ""}, "question", "question must have at least 1 character(s)"),
        (JobRequest, {"question": 5}, "question", "question must be a string"),
        (
            JobRequest,
            {"question": "q", "approval": {"sql": "maybe"}},
            "approval.sql",
            "approval.sql must be one of 'never', 'always' or 'sensitive'",
        ),
        (
            JobRequest,
            {"question": "q", "constraints": {"budget": {"max_total_tokens": "lots"}}},
            "constraints.budget.max_total_tokens",
            "constraints.budget.max_total_tokens must be an integer",
        ),
        (
            JobRequest,
            {"question": "q", "constraints": {"temperature": 3}},
            "constraints.temperature",
            "constraints.temperature must be at most 2.0",
        ),
        (UserAnswer, {"answer": 5}, "answer", "answer must be a string or a JSON object"),
        (UserAnswer, {"answer": "approve", "note": "x"}, "note", "note is not a known field"),
        (JobRequest, {"question": "q", "str": 1}, "str", "str is not a known field"),
    ],
)
def test_errors_name_the_field_and_no_class(model: type[Any], body: dict[str, Any], field: str, message: str) -> None:
    err = validation_error(model, body)
    assert (err.status, err.code, err.field, err.message) == (400, "INVALID_REQUEST", field, message)
    for internal in ("JobConstraints", "instance of", "Extra inputs", "dict[str", "Input should"):
        assert internal not in err.message


# ----- bad settings are the deployment's fault (api/errors.guarded) -------------------------------------------


def run_guarded(handler: Any) -> tuple[int, dict[str, Any]]:
    resp = asyncio.run(guarded("test", handler))
    return resp.status_code, json.loads(resp.get_body())


@pytest.mark.parametrize(
    ("name", "value"),
    [("SQL_MAX_ROWS", "abc"), ("LLM_PROVIDER", "llama"), ("MODEL_PRICES", '{"m": 1}'), ("MODEL_PRICES", "[1")],
)
def test_bad_settings_are_503_config_error_naming_the_setting(
    fresh_settings: pytest.MonkeyPatch, name: str, value: str
) -> None:
    fresh_settings.setenv(name, value)

    async def handler() -> func.HttpResponse:
        return json_response({"ran": True})

    status, body = run_guarded(handler)
    assert status == 503
    assert body["error"]["code"] == "CONFIG_ERROR" and body["error"]["field"] == name
    assert name in body["error"]["message"]
    assert value not in body["error"]["message"]  # the value stays in the log


def test_a_settings_error_inside_a_handler_is_not_blamed_on_the_caller(fresh_settings: pytest.MonkeyPatch) -> None:
    async def handler() -> func.HttpResponse:
        fresh_settings.setenv("SEARCH_TOP_K", "0")
        reset_settings()
        from shared.runtime.settings import get_settings

        get_settings()
        return json_response({})

    status, body = run_guarded(handler)
    assert (status, body["error"]["code"], body["error"]["field"]) == (503, "CONFIG_ERROR", "SEARCH_TOP_K")


def test_good_settings_run_the_handler(fresh_settings: pytest.MonkeyPatch) -> None:
    async def handler() -> func.HttpResponse:
        return json_response({"ran": True})

    assert run_guarded(handler) == (200, {"ran": True})


# ----- console paths (api/ui.resolve_asset) ------------------------------------------------------------------


def test_a_very_long_console_path_is_not_a_file() -> None:
    assert api.ui.resolve_asset("a" * 10_000 + ".js") is None
    assert api.ui.resolve_asset("a/" * 5_000 + "x.js") is None
    assert api.ui.resolve_asset("app.js") == api.ui.WEB_ROOT / "app.js"


def test_a_name_the_file_system_refuses_is_not_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.ui, "MAX_PATH_CHARS", 10**6)  # the OSError barrier on its own
    assert api.ui.resolve_asset("a" * 1_000 + ".js") is None  # ENAMETOOLONG from the file system
    assert api.ui.resolve_asset(("a" * 200 + "/") * 30 + "x.js") is None


# ----- over HTTP, on devhost running the app ------------------------------------------------------------------


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("edge-host"))
    proc.start()
    yield proc
    proc.stop()


def key(host: DevHostProcess) -> dict[str, str]:
    assert host.keys is not None
    return {"x-functions-key": host.keys.function}


def test_http_oversized_submit_is_413(host: DevHostProcess) -> None:
    body = json.dumps({"question": "q" * (CAP + 10)})
    resp = host.client.post("/api/jobs", content=body, headers={**key(host), "content-type": "application/json"})
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_http_ten_megabyte_feedback_is_413(host: DevHostProcess) -> None:
    body = json.dumps({"answer": "a" * 10_000_000})
    resp = host.client.post("/api/jobs/any-id/feedback", content=body, headers=key(host))
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_http_catalog_publishes_the_registries_to_a_caller_with_a_key(host: DevHostProcess) -> None:
    resp = host.client.get("/api/catalog", headers=key(host))
    assert resp.status_code == 200, resp.text
    catalog = resp.json()
    kinds = {k["kind"]: k for k in catalog["step_kinds"]}
    assert [f["name"] for f in kinds["execute_azure_sql"]["editable_fields"]] == ["question", "sql"]
    assert {"RATE_LIMITED", "TRANSIENT"} <= {c["code"] for c in catalog["error_codes"] if c["retryable"]}
    assert host.client.get("/api/catalog").status_code == 401


def test_http_deep_json_is_400_invalid_json(host: DevHostProcess) -> None:
    resp = host.client.post("/api/jobs", content="[" * 60_000, headers=key(host))
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "INVALID_JSON"


def test_http_errors_name_the_field(host: DevHostProcess) -> None:
    resp = host.client.post("/api/jobs", json={"question": "q", "constraints": 5}, headers=key(host))
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "code": "INVALID_REQUEST",
        "message": "constraints must be a JSON object",
        "field": "constraints",
    }


def test_http_long_console_path_is_404(host: DevHostProcess) -> None:
    for path in ("/api/ui/" + "a" * 10_000, "/api/ui/" + "a" * 10_000 + ".js", "/api/ui/" + "ab/" * 3_000 + "x.css"):
        assert host.client.get(path).status_code == 404


def test_http_health_is_ok_with_good_settings(host: DevHostProcess) -> None:
    assert host.client.get("/api/health").json() == {"status": "ok"}


@pytest.fixture(scope="module")
def misconfigured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    """The app with a bad setting, started as on Azure (no Core Tools flag): it must load and answer 503."""
    env = {"FUNCTIONS_CORETOOLS_ENVIRONMENT": "false", "SQL_MAX_ROWS": "abc"}
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("misconfigured-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/health", None),
        ("POST", "/api/jobs", {"question": "Which region had the most returns in Q3?"}),
        ("GET", "/api/jobs", None),
        ("GET", "/api/jobs/abc", None),
        ("POST", "/api/jobs/abc/feedback", {"answer": "approve"}),
        ("POST", "/api/jobs/abc/cancel", None),
    ],
)
def test_http_bad_settings_answer_503_on_every_request(
    misconfigured: DevHostProcess, method: str, path: str, body: dict[str, Any] | None
) -> None:
    resp = misconfigured.client.request(method, path, json=body, headers=key(misconfigured))
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["field"]) == ("CONFIG_ERROR", "SQL_MAX_ROWS")
    assert "SQL_MAX_ROWS" in error["message"]


# ----- agent mode: a job may allow only tools the app configures (api/jobs._check_tools) ---------------------


@pytest.mark.parametrize(
    ("tools", "field", "says"),
    [
        (["http.nowhere"], "tools.0", "not configured"),
        (["function.percent_change", "mcp.crm.lookup"], "tools.1", "not configured"),
        (["consult_rag"], "tools.0", "not a tool of a family"),
        (["smtp.send"], "tools.0", "not a tool of a family"),
    ],
)
def test_a_job_that_allows_an_unconfigured_tool_is_400_naming_it(
    fresh_settings: pytest.MonkeyPatch, tools: list[str], field: str, says: str
) -> None:
    body = JobRequest.model_validate({"question": "q", "mode": "agent", "tools": tools})
    with pytest.raises(ApiError) as caught:
        api.common.check_tools(body)
    err = caught.value
    assert (err.status, err.code, err.field) == (400, "INVALID_REQUEST", field) and says in err.message


def test_configured_tools_of_every_family_are_accepted_without_listing_a_server(
    fresh_settings: pytest.MonkeyPatch,
) -> None:
    fresh_settings.setenv(
        "TOOLS_HTTP",
        json.dumps([{"name": "fx", "description": "rates", "url": "https://api.example.com/fx"}]),
    )
    # An MCP server nobody runs: its allowed tools are known from settings alone, nothing connects.
    fresh_settings.setenv(
        "TOOLS_MCP_SERVERS",
        json.dumps([{"name": "crm", "url": "https://crm.invalid/mcp", "allowed_tools": ["lookup"]}]),
    )
    body = JobRequest.model_validate(
        {"question": "q", "mode": "agent", "tools": ["function.growth_rate", "http.fx", "mcp.crm.lookup"]}
    )
    api.common.check_tools(body)
    refused = JobRequest.model_validate({"question": "q", "mode": "agent", "tools": ["mcp.crm.delete_all"]})
    with pytest.raises(ApiError) as caught:
        api.common.check_tools(refused)
    assert caught.value.field == "tools.0"
