"""Definition input as untrusted data, each barrier on its own: the CLI's YAML loader builds no Python
objects (safe_load), and an ``output_schema`` cannot be a resource bomb (nesting depth, size) before any
validation or store call is made."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

import api.definitions as defs_api
from api.errors import guarded
from devhost.jobs.definitions import CliError, load_documents
from shared.runtime.settings import reset_settings


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
        "!!python/name:os.system",
    ],
)
def test_yaml_apply_builds_no_python_object(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / "ran"
    doc = tmp_path / "agent.yaml"
    doc.write_text(f"id: evil\nname: Evil\ninstructions: {tag.format(marker=marker)}\n", encoding="utf-8")
    with pytest.raises(CliError, match="not valid YAML"):
        load_documents(doc)
    assert not marker.exists()


def create(body: bytes) -> tuple[int, dict[str, Any]]:
    req = func.HttpRequest(method="POST", url="http://localhost/api/agents", headers={}, params={}, body=body)
    resp = asyncio.run(guarded("create_agents", lambda: defs_api.create_definition(req, "agents")))
    return resp.status_code, json.loads(resp.get_body())


@pytest.fixture
def no_auth(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("WEBSITE_AUTH_ENABLED", raising=False)
    reset_settings()
    yield
    reset_settings()


def test_a_deeply_nested_output_schema_is_refused_as_json(no_auth: None) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"x": schema}}
    body = json.dumps({"id": "deep", "name": "Deep", "instructions": "x", "output_schema": schema}).encode()
    status, answer = create(body)
    assert (status, answer["error"]["code"]) == (400, "INVALID_JSON")


def test_a_nesting_bomb_deeper_than_the_parser_is_a_400_not_a_crash(no_auth: None) -> None:
    body = b'{"id": "deep", "name": "Deep", "instructions": "x", "output_schema": ' + b"[" * 100_000
    body += b"]" * 100_000 + b"}"
    status, answer = create(body)
    assert (status, answer["error"]["code"]) == (400, "INVALID_JSON")


def test_a_huge_output_schema_is_refused_by_size(no_auth: None) -> None:
    props = {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(6000)}
    schema = {"type": "object", "properties": props}
    body = json.dumps({"id": "huge", "name": "Huge", "instructions": "x", "output_schema": schema}).encode()
    status, answer = create(body)
    assert (status, answer["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
