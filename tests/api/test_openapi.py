"""The OpenAPI document: generated from the models, checked in up to date, valid, and complete.

Complete: every HTTP route function_app.py registers is an operation of the document (and each operation is a
registered route, under the function's name). The recorded job views (tests/api/views) validate against the
document's JobView schema, so the schema describes what the app really answers.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.functions.decorators.http import HttpTrigger
from openapi_spec_validator import validate

from api.contract.openapi import build_document, document_text, openapi_handler, path_of
from tests.api.record_views import VIEWS, view_of
from tests.api.schema_check import operation_of, schema_problems
from tests.app_functions import app_functions

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m api.contract --write"


@cache
def registered_routes() -> dict[tuple[str, str], str]:
    """(path, method) -> function name of every HTTP trigger of the app (read once: the app indexes only once)."""
    routes: dict[tuple[str, str], str] = {}
    for name, function in app_functions().items():
        trigger = function.get_trigger()
        if not isinstance(trigger, HttpTrigger):
            continue
        for method in trigger.methods or []:
            routes[(path_of(trigger.route or ""), str(method.value).lower())] = name
    return routes


def documented() -> dict[tuple[str, str], str]:
    """(path, method) -> operationId of every operation of the document."""
    doc = build_document()
    return {(path, method): op["operationId"] for path, item in doc["paths"].items() for method, op in item.items()}


def test_the_checked_in_document_is_up_to_date() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == document_text(), f"docs/openapi.json is stale: run {REGENERATE}"


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = json.loads(CHECKED_IN.read_text(encoding="utf-8"))
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_every_registered_route_is_documented() -> None:
    routes, ops = registered_routes(), documented()
    assert len(routes) > 30
    assert sorted(set(routes) - set(ops)) == [], "routes missing from the document: add them to operations()"
    assert sorted(set(ops) - set(routes)) == [], "operations of no registered route"
    # The operation ids are the functions' names: a log line's function name finds its operation.
    assert {key: ops[key] for key in routes} == routes


def test_a_route_that_is_not_documented_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from api.contract import openapi

    every = openapi.operations()
    monkeypatch.setattr(openapi, "operations", lambda: [op for op in every if op.operation_id != "cancel_job"])
    openapi.build_document.cache_clear()
    try:
        assert ("/api/jobs/{job_id}/cancel", "post") in set(registered_routes()) - set(documented())
    finally:
        monkeypatch.undo()
        openapi.build_document.cache_clear()


def test_the_app_serves_the_document() -> None:
    req = func.HttpRequest(method="GET", url="http://127.0.0.1:7071/api/openapi.json", body=b"")
    import asyncio

    resp = asyncio.run(openapi_handler(req))
    assert resp.status_code == 200
    assert resp.mimetype == "application/json"
    assert resp.get_body().decode() == CHECKED_IN.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted(VIEWS.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_views_hold_to_the_documented_schema(path: Path) -> None:
    view = view_of(json.loads(path.read_text(encoding="utf-8")))
    assert schema_problems(build_document(), "GET", f"/api/jobs/{view['id']}", 200, view) == []


def test_an_answer_unlike_the_document_is_found() -> None:
    doc = build_document()
    assert schema_problems(doc, "POST", "/api/jobs/abc/cancel", 202, {"id": "abc", "status": "cancelling"}) == []
    assert schema_problems(doc, "POST", "/api/jobs/abc/cancel", 202, {"id": "abc"})  # status missing
    assert schema_problems(doc, "POST", "/api/jobs/abc/cancel", 500, {})  # never documented
    assert schema_problems(doc, "GET", "/api/nowhere", 200, {})
    assert schema_problems(doc, "GET", "/api/jobs/abc", 404, {"error": {"code": 3, "message": "m"}})
    # A fixed segment wins over a parameter.
    op = operation_of(doc, "GET", "/api/openapi.json")
    assert op is not None and op["operationId"] == "openapi"


@pytest.mark.parametrize("path", sorted(VIEWS.glob("*.json"))[:6], ids=lambda p: p.stem)
def test_the_stream_events_of_recorded_jobs_hold_to_the_documented_schema(path: Path) -> None:
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    from api.events_derive import committed_events
    from api.view import decode

    status = json.loads(path.read_text(encoding="utf-8"))["status"]
    events = committed_events(
        status["historyEvents"], status.get("runtimeStatus"), decode(status.get("output")), status.get("customStatus")
    )
    assert events
    doc = build_document()
    registry: Registry[Any] = Registry().with_resource("urn:doc", DRAFT202012.create_resource(doc))
    validator = Draft202012Validator({"$ref": "urn:doc#/components/schemas/JobEvent"}, registry=registry)
    for event in events:
        data = event.model_dump(mode="json", exclude_none=True)  # what an SSE message's data carries
        assert [e.message for e in validator.iter_errors(data)] == [], data
