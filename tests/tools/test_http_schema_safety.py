"""Untrusted schemas in HTTP tool entries (TOOLS_HTTP ``parameters``): each barrier on its own.

A remote or ``file://`` ``$ref``, a pattern RE2 cannot run and an oversized schema fail the settings, naming
the entry and the path (a counting server on loopback sees 0 requests); a catastrophic pattern is accepted
and run on RE2 against the model's arguments, which are refused before any request goes out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import ConfigError, HttpToolSetting, load_settings
from shared.tools.base import ToolContext, run_tool
from shared.tools.http import HttpTool
from tests.fakes.counting_server import CountingServer
from tests.fakes.loopback import LoopbackServer

CATASTROPHIC = r"^([\s\S]+)+Z$"
CTX = ToolContext(job_id="job-1", step_id="s1")


class Api:
    """A loopback API that counts the requests that reach it."""

    def __init__(self) -> None:
        self.hits = 0
        self.server = LoopbackServer(Starlette(routes=[Route("/notes/{text}", self.note)]), name="notes-api")

    async def note(self, request: Request) -> Response:
        self.hits += 1
        return JSONResponse({"saved": request.path_params["text"][:20]})


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    served = Api()
    served.server.start()
    yield served
    served.server.stop()


@pytest.fixture(scope="module")
def counting() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


def entry(text_schema: dict[str, Any], url: str = "https://api.example/notes/{text}") -> dict[str, Any]:
    return {
        "name": "notes",
        "description": "Save a note.",
        "url": url,
        "parameters": {"type": "object", "properties": {"text": text_schema}, "required": ["text"]},
        "private_hosts": ["127.0.0.1"],
    }


def refused(monkeypatch: pytest.MonkeyPatch, text_schema: dict[str, Any]) -> str:
    monkeypatch.setenv("TOOLS_HTTP", json.dumps([entry(text_schema)]))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.setting == "TOOLS_HTTP"
    return info.value.public_message


def test_a_remote_ref_fails_the_settings_and_is_never_fetched(
    monkeypatch: pytest.MonkeyPatch, counting: CountingServer
) -> None:
    why = refused(monkeypatch, {"type": "string", "$ref": f"{counting.url}/text.json"})
    assert "parameters.properties.text.$ref" in why and "not a local reference" in why
    assert counting.hits == 0


def test_a_file_ref_fails_the_settings_and_the_file_is_never_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["TOP-SECRET"]}')
    why = refused(monkeypatch, {"type": "string", "$ref": secret.as_uri()})
    assert "parameters.properties.text.$ref" in why and "TOP-SECRET" not in why


def test_a_pattern_re2_cannot_run_fails_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    why = refused(monkeypatch, {"type": "string", "pattern": r"^(?!admin).*$"})
    assert "parameters.properties.text.pattern" in why and "RE2" in why


def test_an_oversized_schema_fails_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    why = refused(monkeypatch, {"type": "string", "description": "x" * 70_000})
    assert "characters" in why


def test_a_catastrophic_pattern_runs_on_re2_and_no_request_goes_out(api: Api) -> None:
    declared = entry({"type": "string", "pattern": CATASTROPHIC}, url=f"{api.server.origin}/notes/{{text}}")
    tool = HttpTool(HttpToolSetting.model_validate(declared))
    result = run_tool(tool, {"text": "x" * 100_000}, CTX)
    assert not result.success and result.error is not None
    assert result.error.code == ErrorCode.INVALID_INPUT and "does not match" in result.error.message
    assert api.hits == 0
    fits = run_tool(tool, {"text": "a note that ends in Z"}, CTX)
    assert fits.success, fits.error
    assert api.hits == 1
