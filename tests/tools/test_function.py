"""The function family: a typed Python function's signature is its schema; the analytics built-ins."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from shared.jobs.contracts import ErrorCode
from shared.runtime.settings import Settings
from shared.tools import family_names, tools
from shared.tools.base import ToolContext, ToolResult, run_tool
from shared.tools.function import FunctionTool, function_tool, registered

CTX = ToolContext(job_id="job-1", step_id="s1")


def call(name: str, args: Any) -> ToolResult:
    return run_tool(tools(Settings())[name], args, CTX)


def ok(name: str, args: Any) -> Any:
    result = call(name, args)
    assert result.success, result.error
    return result.data


def code_of(name: str, args: Any) -> str:
    result = call(name, args)
    assert not result.success and result.error is not None
    return result.error.code


def test_the_family_lists_the_built_ins_by_prefixed_name() -> None:
    assert "function" in family_names()
    names = {name for name in tools(Settings()) if name.startswith("function.")}
    assert {"function.percent_change", "function.growth_rate", "function.summary_statistics"} <= names
    assert [t.spec.name for t in registered()] == sorted(t.spec.name for t in registered())


def test_the_signature_is_the_schema() -> None:
    def scale(values: Annotated[list[float], Field(min_length=1)], factor: float = 2.0, *, label: str = "x") -> Any:
        """Multiply every value."""
        return {"label": label, "values": [v * factor for v in values]}

    tool = FunctionTool(scale, name="scale", description="Multiply every value.", timeout_s=1.0)
    schema = tool.spec.input_schema
    assert schema["type"] == "object" and schema["required"] == ["values"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["values"]["minItems"] == 1
    assert schema["properties"]["factor"]["default"] == 2.0
    assert tool.spec.name == "function.scale" and tool.spec.family == "function"
    assert run_tool(tool, {"values": [1, 2.5]}, CTX).data == {"label": "x", "values": [2.0, 5.0]}
    bad = run_tool(tool, {"values": []}, CTX)
    assert bad.error is not None and bad.error.code == ErrorCode.INVALID_INPUT and "values" in bad.error.message
    extra = run_tool(tool, {"values": [1], "exec": "rm -rf /"}, CTX)
    assert extra.error is not None and extra.error.code == ErrorCode.INVALID_INPUT


class Out(BaseModel):
    """A typed result (module level: annotations are resolved in the function's module)."""

    total: float


def test_a_pydantic_result_is_returned_as_json_and_the_timeout_applies() -> None:
    def add(a: float, b: float) -> Out:
        """Add."""
        return Out(total=a + b)

    def slow(seconds: float) -> None:
        """Sleep."""
        import time

        time.sleep(seconds)

    assert run_tool(FunctionTool(add, name="add", description="Add.", timeout_s=1), {"a": 1, "b": 2}, CTX).data == {
        "total": 3.0
    }
    late = run_tool(FunctionTool(slow, name="slow", description="Sleep.", timeout_s=0.1), {"seconds": 0.5}, CTX)
    assert late.error is not None and late.error.code == ErrorCode.TRANSIENT and late.error.retryable


def test_the_decorator_refuses_what_cannot_be_a_schema() -> None:
    def untyped(a):
        """No annotation."""

    def star(*values: float) -> None:
        """Varargs."""

    def undocumented(a: int) -> None:
        pass

    with pytest.raises(TypeError, match="type annotation"):
        function_tool(name="untyped_fn")(untyped)
    with pytest.raises(TypeError, match="named parameter"):
        function_tool(name="star_fn")(star)
    with pytest.raises(ValueError, match="description"):
        function_tool(name="undocumented_fn")(undocumented)
    with pytest.raises(ValueError, match="must match"):
        function_tool(name="Bad Name")(star)
    with pytest.raises(ValueError, match="registered twice"):
        function_tool(name="percent_change")(star)


def test_percent_change() -> None:
    assert ok("function.percent_change", {"old": 80, "new": 100}) == {
        "old": 80.0,
        "new": 100.0,
        "absolute_change": 20.0,
        "percent_change": 25.0,
    }
    assert ok("function.percent_change", {"old": 0.1, "new": 0.3})["percent_change"] == 200.0  # no float noise
    assert ok("function.percent_change", {"old": -50, "new": -25})["percent_change"] == 50.0
    assert code_of("function.percent_change", {"old": 0, "new": 5}) == ErrorCode.INVALID_INPUT
    assert code_of("function.percent_change", {"old": "NaN", "new": 5}) == ErrorCode.INVALID_INPUT
    assert code_of("function.percent_change", {"old": 1e-300, "new": 1e300}) == ErrorCode.INVALID_INPUT


def test_growth_rate() -> None:
    data = ok("function.growth_rate", {"values": [100, 110, 121]})
    assert data["compound_growth_percent_per_period"] == 10.0
    assert data["step_percent_changes"] == [10.0, 10.0]
    assert data["total_percent_change"] == 21.0 and data["periods"] == 2
    five_years = ok("function.growth_rate", {"values": [100, 161.051], "periods": 5})
    assert five_years["compound_growth_percent_per_period"] == 10.0
    from_zero = ok("function.growth_rate", {"values": [0, 5, 10]})
    assert from_zero["compound_growth_percent_per_period"] is None and from_zero["step_percent_changes"] == [
        None,
        100.0,
    ]
    assert "undefined" in from_zero["note"]
    negative = ok("function.growth_rate", {"values": [-10, 5]})
    assert negative["compound_growth_percent_per_period"] is None and negative["total_percent_change"] == 150.0
    assert code_of("function.growth_rate", {"values": [1]}) == ErrorCode.INVALID_INPUT
    assert code_of("function.growth_rate", {"values": [1, 2], "periods": 0}) == ErrorCode.INVALID_INPUT


def test_summary_statistics() -> None:
    data = ok("function.summary_statistics", {"values": [2, 4, 4, 4, 5, 5, 7, 9]})
    assert data == {
        "count": 8,
        "sum": 40.0,
        "mean": 5.0,
        "median": 4.5,
        "q1": 4.0,
        "q3": 5.5,
        "min": 2.0,
        "max": 9.0,
        "stdev": 2.1380899353,
        "population_stdev": 2.0,
    }
    single = ok("function.summary_statistics", {"values": [3]})
    assert single["stdev"] is None and single["median"] == 3.0 and single["population_stdev"] == 0.0
    assert code_of("function.summary_statistics", {"values": []}) == ErrorCode.INVALID_INPUT
    assert code_of("function.summary_statistics", {"values": [1, "two"]}) == ErrorCode.INVALID_INPUT
    assert code_of("function.summary_statistics", {"values": [1e308, 1e308]}) == ErrorCode.INVALID_INPUT
