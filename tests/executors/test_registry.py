"""The registry is the one source of truth per step kind: a new kind is one ``register`` call."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic import BaseModel, ConfigDict, Field

import shared.executors as registry
from api.view import _streaming_kinds
from shared.executors import (
    check_plan,
    executor_types,
    input_for_text,
    kinds_where,
    lookup_kinds,
    register,
    spec_of,
    step_kinds,
)
from shared.jobs.contracts import ExecutorInput, ExecutorOutput
from shared.jobs.plan import Plan


class WebTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url_query: str = Field(min_length=1, max_length=200)


@pytest.fixture
def web_lookup() -> Iterator[str]:
    executor_types()  # load the shipped executors first
    saved = dict(registry._REGISTRY)

    @register(
        "web_lookup",
        description="Look something up on the web.",
        uses_llm=False,
        input_model=WebTask,
        text_field="url_query",
        streams=True,
        telemetry_operation="web",
    )
    def run(inp: ExecutorInput, clients: object) -> ExecutorOutput:
        return ExecutorOutput(status="success", result={})

    yield "web_lookup"
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def test_a_registered_kind_reaches_every_part_that_asks_about_kinds(web_lookup: str) -> None:
    assert web_lookup in executor_types()  # the activities blueprint registers one activity per entry
    assert step_kinds()[web_lookup] == "Look something up on the web."  # the planner's list
    assert web_lookup in _streaming_kinds()  # the view previews its running text
    assert web_lookup in lookup_kinds()  # the Supervisor may switch to it
    assert spec_of(web_lookup).telemetry_operation == "web"
    assert input_for_text(web_lookup, "weather") == {"url_query": "weather"}


def test_roles_come_from_the_specs() -> None:
    assert kinds_where(lambda s: s.writes_answer) == {"generate_response"}
    assert kinds_where(lambda s: s.runs_sql) == {"execute_azure_sql"}
    assert kinds_where(lambda s: s.runs_code) == {"run_python"}
    assert kinds_where(lambda s: s.internal) == {"plan", "supervise", "agent_turn", "call_tool"}
    assert _streaming_kinds() == {"generate_response"}


def test_a_plan_without_a_step_that_writes_the_answer_is_refused() -> None:
    plan = Plan.model_validate({"steps": [{"id": "s1", "kind": "consult_rag", "title": "t", "input": {"query": "q"}}]})
    with pytest.raises(ValueError, match="writes the answer"):
        check_plan(plan)


def test_a_text_field_the_input_model_lacks_is_refused_at_registration() -> None:
    with pytest.raises(ValueError, match="no text field"):
        register("bad_kind", description="d", uses_llm=False, input_model=WebTask, text_field="question")


def test_the_planner_is_held_to_one_step_shape_per_kind(web_lookup: str) -> None:
    from shared.executors.plan import plan_output_model

    schema = plan_output_model().model_json_schema()
    text = json.dumps(schema)
    assert "oneOf" not in text and "discriminator" not in text  # strict structured output takes anyOf
    variants = {
        d["properties"]["kind"]["const"]: d for d in schema["$defs"].values() if "kind" in d.get("properties", {})
    }
    assert set(variants) == {
        "consult_rag",
        "execute_azure_sql",
        "generate_response",
        "run_python",
        "ask_user",
        "agent",
        web_lookup,
    }
    web_input = schema["$defs"][variants[web_lookup]["properties"]["input"]["$ref"].split("/")[-1]]
    assert set(web_input["properties"]) == {"url_query"} and web_input["additionalProperties"] is False
    # A step that puts another kind's field in its input does not validate.
    bad = {"steps": [{"id": "s1", "kind": "consult_rag", "title": "t", "input": {"query": "q", "sql": "SELECT 1"}}]}
    with pytest.raises(ValueError, match="consult_rag.input.sql"):
        plan_output_model().model_validate(bad)
