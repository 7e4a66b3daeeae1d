"""run_tool: the one envelope, argument checks, time and size bounds, and that it never raises."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.jobs.contracts import ErrorCode
from shared.tools.base import MAX_RESULT_CHARS, Tool, ToolContext, ToolFailure, ToolResult, ToolSpec, run_tool

CTX = ToolContext(job_id="job-1", step_id="s1")


class Point(BaseModel):
    """A typed argument model."""

    model_config = ConfigDict(extra="forbid")

    x: int = Field(ge=0)
    label: str = "p"


class Echo(Tool):
    """Returns what a callback makes of its arguments."""

    def __init__(self, spec: ToolSpec, behaviour: Any = None) -> None:
        self.spec = spec
        self.behaviour = behaviour or (lambda args: args)
        self.calls: list[dict[str, Any]] = []

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        self.calls.append(args)
        return self.behaviour(args)


def typed(behaviour: Any = None, timeout_s: float = 5.0) -> Echo:
    spec = ToolSpec(
        name="test.typed",
        family="test",
        description="typed",
        input_schema=Point.model_json_schema(),
        timeout_s=timeout_s,
        input_model=Point,
    )
    return Echo(spec, behaviour)


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "ratio": {"type": "number"}},
    "required": ["city"],
    "additionalProperties": False,
}


def declared(behaviour: Any = None) -> Echo:
    return Echo(ToolSpec(name="test.declared", family="test", description="d", input_schema=SCHEMA), behaviour)


def error_of(result: ToolResult) -> tuple[str, str, bool]:
    assert not result.success and result.error is not None and result.data is None
    return result.error.code, result.error.message, result.error.retryable


def test_a_good_call_is_a_success_envelope_with_the_validated_arguments() -> None:
    tool = typed()
    result = run_tool(tool, {"x": 3}, CTX)
    assert result.success and result.error is None and not result.truncated
    assert result.data == {"x": 3, "label": "p"}  # defaults filled in by the model
    assert tool.calls == [{"x": 3, "label": "p"}]
    assert result.duration_ms >= 0
    dumped = result.model_dump(mode="json")
    assert set(dumped) == {"success", "data", "error", "truncated", "duration_ms"}


def test_typed_arguments_are_checked_by_the_model_before_the_tool_runs() -> None:
    tool = typed()
    for args, where in [({"x": -1}, "x"), ({"x": "many"}, "x"), ({}, "x"), ({"x": 1, "y": 2}, "y")]:
        code, message, retryable = error_of(run_tool(tool, args, CTX))
        assert code == ErrorCode.INVALID_INPUT and not retryable
        assert message.startswith(f"test.typed: {where}:"), message
    assert tool.calls == []


def test_arguments_that_are_not_an_object_are_refused() -> None:
    for args in (None, [1, 2], "x=1", 3):
        code, message, _ = error_of(run_tool(typed(), args, CTX))
        assert code == ErrorCode.INVALID_INPUT and "JSON object" in message


def test_declared_schema_checks_required_unknown_and_types() -> None:
    tool = declared()
    cases = [
        ({}, "missing argument 'city'"),
        ({"city": "Oslo", "country": "NO"}, "unknown argument 'country'"),
        ({"city": 7}, "'city' must be of type string"),
        ({"city": "Oslo", "days": 1.5}, "'days' must be of type integer"),
        ({"city": "Oslo", "days": True}, "'days' must be of type integer"),  # a bool is not a number here
        ({"city": "Oslo", "ratio": "0.5"}, "'ratio' must be of type number"),
    ]
    for args, expected in cases:
        code, message, _ = error_of(run_tool(tool, args, CTX))
        assert code == ErrorCode.INVALID_INPUT and expected in message, message
    assert tool.calls == []
    ok = run_tool(tool, {"city": "Oslo", "days": 2, "ratio": 1}, CTX)
    assert ok.success and ok.data == {"city": "Oslo", "days": 2, "ratio": 1}


def test_a_tool_slower_than_its_timeout_fails_as_transient_and_retryable() -> None:
    release = threading.Event()
    tool = typed(lambda args: release.wait(5), timeout_s=0.2)
    try:
        code, message, retryable = error_of(run_tool(tool, {"x": 1}, CTX))
    finally:
        release.set()
    assert code == ErrorCode.TRANSIENT and retryable
    assert "within 0.2 s" in message


def test_a_large_result_is_cut_and_labelled() -> None:
    result = run_tool(typed(lambda args: {"rows": ["x" * 100] * 1000}), {"x": 1}, CTX)
    assert result.success and result.truncated
    assert isinstance(result.data, str) and len(result.data) == MAX_RESULT_CHARS
    small = run_tool(typed(lambda args: {"rows": ["x"] * 10}), {"x": 1}, CTX)
    assert small.success and not small.truncated and small.data == {"rows": ["x"] * 10}


def test_an_unexpected_exception_is_an_internal_error_that_hides_its_text() -> None:
    def boom(args: dict[str, Any]) -> Any:
        raise RuntimeError("secret connection string in here")

    code, message, retryable = error_of(run_tool(typed(boom), {"x": 1}, CTX))
    assert code == ErrorCode.INTERNAL_ERROR and not retryable
    assert "secret" not in message and "test.typed" in message


def test_a_tool_failure_keeps_its_code_and_retryable_follows_the_policy() -> None:
    for code, retryable in [
        (ErrorCode.UPSTREAM_ERROR, True),
        (ErrorCode.RATE_LIMITED, True),
        (ErrorCode.TRANSIENT, True),
        (ErrorCode.BAD_REQUEST, False),
        (ErrorCode.AUTH_FAILED, False),
        ("SOMETHING_ELSE", False),
    ]:

        def fail(args: dict[str, Any], code: str = code) -> Any:
            raise ToolFailure(code, "upstream said no")

        got = error_of(run_tool(typed(fail), {"x": 1}, CTX))
        assert got == (str(code), "upstream said no", retryable)


def test_data_that_is_not_json_is_an_internal_error() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    code, _, _ = error_of(run_tool(typed(lambda args: loop), {"x": 1}, CTX))
    assert code == ErrorCode.INTERNAL_ERROR
    nan = run_tool(typed(lambda args: {"v": float("nan")}), {"x": 1}, CTX)
    assert error_of(nan)[0] == ErrorCode.INTERNAL_ERROR  # NaN is not JSON: the model and Durable would choke


def test_every_envelope_is_json() -> None:
    for behaviour in (lambda a: a, lambda a: {"when": object()}):
        result = run_tool(typed(behaviour), {"x": 1}, CTX)
        assert ToolResult.model_validate_json(result.model_dump_json()) == result
