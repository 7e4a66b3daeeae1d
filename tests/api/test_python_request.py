"""The job request's python fields at the HTTP edge: python.run only when a sandbox is configured, and the
approval and budget fields checked like every other (400 naming the field)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import azure.functions as func
import pytest

import api.common
import api.jobs
from api.errors import ApiError
from shared.jobs.models import JobRequest
from shared.runtime.settings import reset_settings


@pytest.fixture
def env() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        reset_settings()
        yield mp
    reset_settings()


def parse(body: dict[str, object]) -> JobRequest:
    raw = json.dumps(body).encode()
    req = func.HttpRequest(
        method="POST", url="http://localhost/api/jobs", headers={}, params={}, route_params={}, body=raw
    )
    return api.common.parse_body(req, JobRequest, "a 'question'")


def test_python_run_is_accepted_while_a_sandbox_is_configured_and_refused_when_off(env: pytest.MonkeyPatch) -> None:
    api.common.check_tools(parse({"question": "q", "tools": ["python.run"]}))
    env.setenv("SANDBOX_PROVIDER", "off")
    reset_settings()
    with pytest.raises(ApiError) as caught:
        api.common.check_tools(parse({"question": "q", "tools": ["function.growth_rate", "python.run"]}))
    assert (caught.value.status, caught.value.field) == (400, "tools.1")
    assert "not configured" in caught.value.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"approval": {"python": "sometimes"}}, "approval.python"),
        ({"constraints": {"budget": {"max_sandbox_seconds": 0}}}, "constraints.budget.max_sandbox_seconds"),
        ({"tools": ["python.run", "python.run; rm -rf /"]}, "tools.1"),
    ],
)
def test_bad_python_fields_are_400_naming_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse({"question": "q", **body})
    assert (caught.value.status, caught.value.code, caught.value.field) == (400, "INVALID_REQUEST", field)
