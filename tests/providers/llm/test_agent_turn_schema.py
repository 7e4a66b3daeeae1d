"""The Executor's reply schema names the offered tools (issue 26): a constrained model cannot invent one."""

from __future__ import annotations

from shared.executors.agent_turn import turn_output_model
from shared.executors.runner import run_executor
from shared.jobs.agent import AgentTurn
from shared.providers.clients import Clients
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.providers.llm.test_executors_over_fake import _payload, clients  # noqa: F401 (fixture)

TURN = {"reasoning": "look it up", "tool_calls": [{"id": "a", "tool": "consult_rag", "arguments_json": "{}"}]}


def _tool_schema(schema: dict) -> dict:
    return schema["$defs"]["AgentToolCall"]["properties"]["tool"]


def test_the_tool_name_is_an_enum_of_the_offered_tools(fake_openai: FakeOpenAI, clients: Clients) -> None:  # noqa: F811
    fake_openai.always(JsonReply(TURN), task="agent_turn")
    task = {"question": "Refunds?", "turns_left": 2, "calls_left": 4, "lookups": ["consult_rag"]}
    out = run_executor(_payload("agent_turn", task), clients=clients)
    assert out["status"] == "success", out
    sent = fake_openai.requests_for("agent_turn")[0].schema
    assert sent is not None
    assert _tool_schema(sent)["enum"] == ["consult_rag", "format_output", "get_job_state", "request_user_feedback"]


def test_validation_still_takes_any_name_so_the_orchestrator_can_refuse_it() -> None:
    model = turn_output_model(("consult_rag", "format_output"))
    turn = model.model_validate({"tool_calls": [{"id": "a", "tool": "arguments_json"}]})
    assert isinstance(turn, AgentTurn) and turn.tool_calls[0].tool == "arguments_json"
    assert model.__name__ == "AgentTurn" and turn_output_model(("consult_rag", "format_output")) is model
    assert "enum" not in _tool_schema(AgentTurn.model_json_schema())


def test_the_plan_schema_offers_step_ids_from_a_list_and_depends_on_names_only_them() -> None:
    from shared.executors.plan import SCHEMA_STEP_IDS, plan_output_model
    from shared.jobs.plan import Plan

    model = plan_output_model()
    step = model.model_json_schema()["$defs"]["ConsultRagStep"]["properties"]
    assert step["id"]["enum"] == step["depends_on"]["items"]["enum"] == SCHEMA_STEP_IDS
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
