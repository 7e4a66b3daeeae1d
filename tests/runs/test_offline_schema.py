"""The offline model and an agent's output schema: an object built from what it found, or a clear failure."""

from __future__ import annotations

from typing import Any

from shared.providers.llm.offline.agent import SchemaUnfillable, fill_schema
from tests.runs.runkit import Activities, defs, start, steps

DOCS = "consult_rag"
SUMMARY = {"summary": {"type": "string"}, "sources": {"type": "array", "items": {"type": "string"}}}


def agent(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "agent",
        "id": "reader",
        "name": "Reader",
        "instructions": "Answer from the policy documents.",
        "tools": [DOCS],
        "limits": {"max_turns": 2, "max_tool_calls": 2},
        "output_schema": schema,
    }


WF = {
    "id": "read",
    "name": "Read",
    "nodes": [
        {
            "id": "think",
            "kind": "agent",
            "agent": "reader",
            "version": 1,
            "input": {"prompt": {"value": "What does the returns policy say about refunds after 30 days?"}},
        }
    ],
    "outputs": {"summary": {"from": "think.summary"}, "score": {"from": "think.score"}},
}


def test_the_offline_answer_fills_the_schema_from_what_it_found_and_nulls_the_rest() -> None:
    schema = {
        "type": "object",
        "properties": {**SUMMARY, "score": {"type": ["number", "null"]}},
        "required": ["summary", "score"],
    }
    acts = Activities({**defs(WF), **defs(agent(schema))})
    result, ctx = start(acts, "workflow", "read")
    assert result["status"] == "completed", result
    assert "refund" in result["outputs"]["summary"].lower()  # the answer's own text, from the documents
    assert result["outputs"]["score"] is None  # nothing found says a score: null, never invented
    call = acts.named("generate_response")[0]
    # The answer writer was asked for this shape, by the orchestrator: in the execution context, not the task.
    assert call["execution_context"]["output_schema"] == schema and "output_schema" not in call["task"]


def test_a_required_field_it_has_no_data_for_fails_the_node_saying_which() -> None:
    schema = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
    wf = {**WF, "outputs": {"score": {"from": "think.score"}}}
    acts = Activities({**defs(wf), **defs(agent(schema))})
    asked: list[Any] = []

    def abort(event: Any) -> dict[str, str]:
        asked.append(event)  # a failed step asks the person what to do, as for any job: abort it
        return {"answer": "abort"}

    result, ctx = start(acts, "workflow", "read", reply=abort)
    assert asked == ["answer:think-q1"]
    assert result["status"] == "failed", result
    assert result["error"]["step_id"] == "think" and "'score'" in result["error"]["message"]
    assert "offline model found no value" in result["error"]["message"]
    assert steps(ctx)["think"]["state"] == "failed"


def test_fill_schema_takes_columns_by_name_text_and_sources_deterministically() -> None:
    schema = {
        "type": "object",
        "properties": {
            "total_returns": {"type": "integer"},
            "Region": {"type": "string"},
            "summary": {"type": "string"},
            "citations": {"type": "array"},
            "notes": {"type": "array"},
            "maybe": {"type": "string"},
        },
        "required": ["total_returns", "Region", "summary", "citations", "notes"],
    }
    columns = {"region": "North", "total_returns": 42.0}
    first = fill_schema(schema, "North had 42.", ["sql:1"], columns)
    assert first == {
        "total_returns": 42,
        "Region": "North",
        "summary": "North had 42.",
        "citations": ["sql:1"],
        "notes": [],  # no data, and the schema allows an empty list; "maybe" is optional: left out
    }
    assert fill_schema(schema, "North had 42.", ["sql:1"], columns) == first
    try:
        fill_schema({"properties": {"flag": {"type": "boolean"}}, "required": ["flag"]}, "x", [], {})
    except SchemaUnfillable as exc:
        assert "'flag'" in str(exc)
    else:
        raise AssertionError("a required boolean with no data must fail")
