"""The Executor's reply schema names the offered tools and types their arguments (issue 26): a constrained model
cannot invent a tool or leave out a field it needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.executors.agent_turn import turn_output_model
from shared.executors.runner import run_executor
from shared.jobs.agent import AgentTurn
from shared.providers.clients import Clients
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.providers.llm.test_executors_over_fake import _payload, clients  # noqa: F401 (fixture)

CALL = {"id": "a", "tool": "consult_rag", "arguments": {"query": "refunds"}}
TURN = {"reasoning": "look it up", "tool_calls": [CALL]}


def _calls(schema: dict) -> dict[str, dict]:
    """Each variant of a tool call in the schema sent, by the tool name it fixes."""
    defs = schema["$defs"]
    variants = [defs[v["$ref"].rsplit("/", 1)[1]] for v in schema["properties"]["tool_calls"]["items"]["anyOf"]]
    return {v["properties"]["tool"]["const"]: v for v in variants}


def _arguments(schema: dict, variant: dict) -> dict:
    ref = variant["properties"]["arguments"].get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref else variant["properties"]["arguments"]


def test_each_call_is_a_variant_of_an_offered_tool_with_its_own_typed_arguments(
    fake_openai: FakeOpenAI,
    clients: Clients,  # noqa: F811
) -> None:
    fake_openai.always(JsonReply(TURN), task="agent_turn")
    task = {"question": "Refunds?", "turns_left": 2, "calls_left": 4, "lookups": ["consult_rag"]}
    out = run_executor(_payload("agent_turn", task), clients=clients)
    assert out["status"] == "success", out
    sent = fake_openai.requests_for("agent_turn")[0].schema
    assert sent is not None
    calls = _calls(sent)
    assert sorted(calls) == ["consult_rag", "format_output", "get_job_state", "request_user_feedback"]
    assert all(v["required"] == ["id", "tool", "arguments"] for v in calls.values())
    # A question is required to ask the user, a query to search: a constrained model cannot leave them out.
    assert "question" in _arguments(sent, calls["request_user_feedback"])["required"]
    assert "query" in _arguments(sent, calls["consult_rag"])["required"]
    assert _arguments(sent, calls["format_output"])["properties"] == {}
    # The orchestrator still reads the turn as before: arguments as JSON text.
    assert out["result"]["tool_calls"] == [{"id": "a", "tool": "consult_rag", "arguments_json": '{"query": "refunds"}'}]


def test_a_family_tools_schema_from_its_server_is_never_compiled_into_the_output_schema() -> None:
    model = turn_output_model(("consult_rag", "http.weather"))
    schema = model.model_json_schema()
    arguments = _arguments(schema, _calls(schema)["http.weather"])
    assert {k: v for k, v in arguments.items() if k != "title"} == {"additionalProperties": True, "type": "object"}


def test_validation_still_takes_any_call_so_the_orchestrator_can_refuse_it() -> None:
    model = turn_output_model(("consult_rag", "format_output"))
    written = model.model_validate(
        {
            "tool_calls": [
                {"id": "a", "tool": "arguments_json"},
                {"id": "b", "tool": "request_user_feedback", "arguments": {}},
                {"id": "c", "tool": "consult_rag", "arguments": [1, 2]},
                {"id": "d", "tool": "consult_rag", "arguments_json": '{"query": "x"}'},  # the shape before v4
            ]
        }
    )
    turn = written.as_turn()
    assert isinstance(turn, AgentTurn)
    assert [(c.tool, c.arguments()) for c in turn.tool_calls] == [
        ("arguments_json", {}),
        ("request_user_feedback", {}),  # refused by the orchestrator with the reason, shown to the model
        ("consult_rag", [1, 2]),
        ("consult_rag", {"query": "x"}),
    ]
    assert model.__name__ == "AgentTurn" and turn_output_model(("consult_rag", "format_output")) is model
    with pytest.raises(ValidationError):
        model.model_validate({"tool_calls": [{"id": "a", "tool": "consult_rag", "arguments": {"q": "x" * 9000}}]})


def test_the_plan_schema_offers_step_ids_from_a_list_and_depends_on_names_only_them() -> None:
    from shared.executors.plan import SCHEMA_STEP_IDS, SHOWN_MAX_STEPS, plan_output_model
    from shared.jobs.plan import Plan

    model = plan_output_model()
    step = model.model_json_schema()["$defs"]["ConsultRagStep"]["properties"]
    assert step["id"]["enum"] == step["depends_on"]["items"]["enum"] == SCHEMA_STEP_IDS
    assert step["depends_on"]["maxItems"] == SHOWN_MAX_STEPS - 1  # a step never depends on itself
    # Only the schema shown: a plan with other ids still validates.
    plan = {"steps": [{"id": "docs", "kind": "consult_rag", "title": "Docs", "input": {"query": "refunds"}}]}
    assert model.model_validate(plan) and Plan.model_validate(plan)


def test_dependencies_on_no_earlier_step_are_dropped_not_fatal(fake_openai: FakeOpenAI, clients: Clients) -> None:  # noqa: F811
    plan = {
        "steps": [
            {
                "id": "s1",
                "kind": "consult_rag",
                "title": "Docs",
                "input": {"query": "refunds"},
                "depends_on": ["s1", "s2"],
            },
            {
                "id": "s2",
                "kind": "generate_response",
                "title": "Answer",
                "input": {"question": "Refunds?"},
                "depends_on": ["s1", "ask_user", "s1"],
            },
        ]
    }
    fake_openai.always(JsonReply(plan), task="plan")
    out = run_executor(_payload("plan", {"question": "Refunds?"}), clients=clients)
    assert out["status"] == "success", out
    assert [s["depends_on"] for s in out["result"]["steps"]] == [[], ["s1"]]


def _strings(node: object) -> list[dict]:
    if isinstance(node, dict):
        own = [node] if node.get("type") == "string" and "enum" not in node and "const" not in node else []
        return own + [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


@pytest.mark.parametrize("which", ["plan", "agent_turn"])
def test_the_grammar_bounds_every_string_so_a_model_repeating_itself_stops(which: str) -> None:
    from shared.executors.plan import SHOWN_MAX_LENGTH, plan_output_model
    from shared.providers.llm.openai_schemas import grammar_safe, output_schema

    model = plan_output_model() if which == "plan" else turn_output_model(("consult_rag", "request_user_feedback"))
    strings = _strings(grammar_safe(output_schema(model).full_schema))
    assert strings and all(0 < s["maxLength"] <= SHOWN_MAX_LENGTH for s in strings), strings
    # Only what the model is shown: validation keeps the models' own limits.
    long = {"steps": [{"id": "s1", "kind": "consult_rag", "title": "t", "input": {"query": "x" * 1000}}]}
    if which == "plan":
        assert plan_output_model().model_validate(long)


def test_a_model_is_shown_only_the_inputs_it_needs_and_validation_still_takes_the_rest() -> None:
    from shared.executors.plan import SHOWN_MAX_STEPS, plan_output_model

    model = plan_output_model()
    defs = model.model_json_schema()["$defs"]
    assert set(defs["RagTask"]["properties"]) == {"query"}  # no top_k, no filter
    assert set(defs["SqlTask"]["properties"]) == {"question"}  # no sql
    assert set(defs["AskUserInput"]["properties"]) == {"question", "options"}  # the choices stay
    assert model.model_json_schema()["properties"]["steps"]["maxItems"] == SHOWN_MAX_STEPS
    tuned = {"steps": [{"id": "s1", "kind": "consult_rag", "title": "t", "input": {"query": "q", "top_k": 3}}]}
    assert model.model_validate(tuned)
    turn = turn_output_model(("consult_rag",)).model_json_schema()
    assert set(turn["$defs"]["RagTask"]["properties"]) == {"query"}
