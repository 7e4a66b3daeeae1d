"""Every caller that checks data against an untrusted schema goes through shared/runtime/schema_safety.py.

A schema saved before the save-time check existed (a remote ``$ref`` already in the store) or handed over
by a model path is still never fetched, and a catastrophic pattern still runs on RE2: each caller on its own,
the provider's reply check, the offline model, the orchestrator's check of an agent node and a tool's arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrators.outcomes import JobStop, structured
from shared.jobs.contracts import AnswerResult, ErrorCode, ProviderError
from shared.providers.llm.offline.model import _shaped
from shared.providers.llm.shaped import check_output_schema, shape_reply
from shared.tools.base import Tool, ToolContext, ToolSpec, run_tool
from tests.fakes.counting_server import CountingServer

CATASTROPHIC = r"^([\s\S]+)+Z$"
LONG = "x" * 50_000


@pytest.fixture
def counting() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


def remote(url: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"summary": {"type": "string", "$ref": f"{url}/summary.json"}},
        "required": ["summary"],
    }


CATASTROPHIC_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string", "pattern": CATASTROPHIC}},
    "required": ["summary"],
}


def test_the_provider_refuses_a_remote_ref_before_any_call_and_checks_patterns_on_re2(
    counting: CountingServer,
) -> None:
    with pytest.raises(ProviderError) as refused:
        check_output_schema(remote(counting.url))
    assert refused.value.code == ErrorCode.OUTPUT_SCHEMA_REFUSED and "not a local reference" in refused.value.message
    with pytest.raises(ProviderError) as unresolved:
        shape_reply({"answer": {"summary": "s"}}, "answer", remote(counting.url), "m", "{}")
    assert unresolved.value.code == ErrorCode.OUTPUT_SCHEMA_REFUSED
    with pytest.raises(ProviderError) as mismatch:
        shape_reply({"answer": {"summary": LONG}}, "answer", CATASTROPHIC_SCHEMA, "m", "{}")
    assert mismatch.value.code == ErrorCode.BAD_REQUEST and "does not match" in mismatch.value.message
    assert counting.hits == 0


def test_the_offline_model_never_fetches_and_runs_patterns_on_re2(counting: CountingServer) -> None:
    answer = AnswerResult(answer=LONG)
    with pytest.raises(ProviderError, match="cannot check against the output schema"):
        _shaped(answer, remote(counting.url), [])
    with pytest.raises(ProviderError, match="does not match"):
        _shaped(answer, CATASTROPHIC_SCHEMA, [])
    assert counting.hits == 0


def test_the_orchestrators_check_of_an_agent_node_never_fetches_and_runs_patterns_on_re2(
    counting: CountingServer,
) -> None:
    with pytest.raises(JobStop) as unresolved:
        structured(json.dumps({"summary": "s"}), remote(counting.url), "ask")
    assert unresolved.value.info.code == "OUTPUT_INVALID" and "cannot be checked" in unresolved.value.info.message
    with pytest.raises(JobStop) as mismatch:
        structured(json.dumps({"summary": LONG}), CATASTROPHIC_SCHEMA, "ask")
    assert "does not match" in mismatch.value.info.message
    assert counting.hits == 0


class Recorder(Tool):
    """A tool with a schema from outside that records whether it was invoked."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.calls = 0
        self.spec = ToolSpec(name="http.recorder", family="http", description="d", input_schema=schema)

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        self.calls += 1
        return "ok"


def test_a_tools_arguments_are_checked_on_the_safe_validator_before_it_runs(counting: CountingServer) -> None:
    unsafe = Recorder(remote(counting.url))
    result = run_tool(unsafe, {"summary": "s"}, ToolContext())
    assert not result.success and result.error is not None and result.error.code == ErrorCode.CONFIG_ERROR
    slow = Recorder(CATASTROPHIC_SCHEMA)
    result = run_tool(slow, {"summary": LONG}, ToolContext())
    assert not result.success and result.error is not None and result.error.code == ErrorCode.INVALID_INPUT
    assert unsafe.calls == slow.calls == 0 and counting.hits == 0
