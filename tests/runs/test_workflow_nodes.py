"""Workflow runs driven inline: each node kind as a step of the job, with the job's policy and waits.

Model turns are scripted as executor outputs (the contract); tools and lookups run the real executors on
the offline model. Parallel branches and sub-workflows run as sub-orchestrations (inline children).
"""

from __future__ import annotations

from typing import Any

from tests.jobs.test_policy_inline import RAG_OK, ok
from tests.runs.runkit import DONE_TURN, Activities, answer, defs, start, steps
from tests.runs.shapes import AGENT, PROMPT, TOOL, change, human, report_nodes, thinking


def test_step_condition_and_tool_nodes_run_as_steps_and_fill_the_outputs() -> None:
    wf = {
        "id": "report",
        "name": "Report",
        "inputs": {"topic": {"type": "string"}, "old": {"type": "number"}},
        "nodes": report_nodes(),
        "outputs": {"percent": {"from": "growth.data.percent_change"}, "note": {"template": "on {input.topic}"}},
    }
    acts = Activities(defs(wf), consult_rag=[ok(RAG_OK)])
    result, ctx = start(acts, "workflow", "report", inputs={"topic": "refunds", "old": 80}, tools=[TOOL])
    assert result["status"] == "completed", result
    assert result["outputs"] == {"percent": 25.0, "note": "on refunds"}
    shown = steps(ctx)
    assert [(s["id"], s["kind"], s["state"]) for s in shown.values()] == [
        ("docs", "consult_rag", "succeeded"),
        ("found", "condition", "succeeded"),
        ("growth", "tool", "succeeded"),
        ("nothing", "tool", "skipped"),
    ]
    assert shown["nothing"]["note"] == "its condition chose the other way"
    assert acts.named("consult_rag")[0]["task"] == {"query": "refunds"}
    assert shown["growth"]["attempts"] == 1


def test_a_tool_the_run_was_not_allowed_stops_the_run_at_its_node() -> None:
    wf = {"id": "w", "name": "W", "nodes": [change("growth", {"value": 80})]}
    acts = Activities(defs(wf))
    result, ctx = start(acts, "workflow", "w", tools=[])  # the API found the tool not configured
    assert result["status"] == "failed"
    assert result["error"]["code"] == "TOOL_NOT_ALLOWED" and result["error"]["step_id"] == "growth"
    assert acts.named("call_tool") == []
    assert steps(ctx)["growth"]["state"] == "failed"


def test_a_human_node_waits_and_resumes_exactly_the_question_shown() -> None:
    wf = {
        "id": "approve",
        "name": "Approve",
        "nodes": [
            human("ask", "Ship it?", ["yes", "no"]),
            {
                "id": "check",
                "kind": "condition",
                "after": ["ask"],
                "if": {"left": "ask.answer", "op": "eq", "right": "yes"},
                "then": ["ship"],
            },
            change("ship", {"value": 50}),
        ],
        "outputs": {"said": {"from": "ask.answer"}, "shipped": {"from": "ship.success"}},
    }
    seen: list[str] = []

    def reply(event: str) -> Any:
        seen.append(event)
        return {"answer": "yes", "question_id": event.split(":", 1)[1]}

    result, ctx = start(Activities(defs(wf)), "workflow", "approve", tools=[TOOL], reply=reply)
    assert seen == ["answer:ask-q1"]  # the question id names the node
    assert result["status"] == "completed" and result["outputs"] == {"said": "yes", "shipped": True}
    assert steps(ctx)["ask"]["state"] == "succeeded"


def test_an_invalid_answer_to_a_human_node_is_asked_again() -> None:
    wf = {"id": "w", "name": "W", "nodes": [human("ask", "?", ["a"])]}
    answers = iter(["nope", "a"])
    result, _ = start(Activities(defs(wf)), "workflow", "w", reply=lambda e: {"answer": next(answers)})
    assert result["status"] == "completed" and result["outputs"] == {"result": {"answer": "a"}}


def test_an_unanswered_human_node_takes_its_declared_on_timeout_answer_or_fails() -> None:
    # Waits out a 1 s durable timer each; no answer is given.
    declared = {
        "id": "w",
        "name": "W",
        "nodes": [human("ask", "Ship?", ["yes", "no"], timeout_seconds=1, on_timeout="no")],
    }
    result, _ = start(Activities(defs(declared)), "workflow", "w")
    assert result["status"] == "completed" and result["outputs"] == {"result": {"answer": "no"}}
    silent = {"id": "w", "name": "W", "nodes": [human("ask", "Ship?", ["yes", "no"], timeout_seconds=1)]}
    result, _ = start(Activities(defs(silent)), "workflow", "w")
    assert result["status"] == "failed" and result["error"]["code"] == "WAIT_EXPIRED"


PARALLEL: dict[str, Any] = {
    "id": "fan",
    "name": "Fan",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["good", "bad"]},
        change("good", {"value": 80}),
        change("bad", {"value": 0}),  # a percent change from 0 is refused by the tool
        change("after_bad", {"value": 10}, after=["bad"]),
        {"id": "merge", "kind": "join", "after": ["good", "after_bad"], "on_failure": "continue"},
    ],
    "outputs": {"failed": {"from": "merge.failed"}, "good": {"from": "merge.results.good.data.percent_change"}},
}


def test_a_failing_member_fails_its_branch_and_the_join_sees_which() -> None:
    acts = Activities(defs(PARALLEL))
    result, ctx = start(acts, "workflow", "fan", tools=[TOOL])
    assert result["status"] == "completed", result
    assert result["outputs"] == {"failed": ["bad"], "good": 25.0}
    shown = steps(ctx)
    assert shown["good"]["state"] == "succeeded"
    assert shown["bad"]["state"] == "failed" and shown["bad"]["error"]["code"] == "INVALID_INPUT"
    assert shown["after_bad"]["state"] == "skipped"
    assert set(ctx.children) == {"r1:good", "r1:bad"}  # one sub-orchestration per branch


def test_a_join_that_must_have_every_branch_fails_the_run() -> None:
    strict = {**PARALLEL, "nodes": [*PARALLEL["nodes"][:-1], {**PARALLEL["nodes"][-1], "on_failure": "fail"}]}
    result, ctx = start(Activities(defs(strict)), "workflow", "fan", tools=[TOOL])
    assert result["status"] == "failed" and result["error"]["code"] == "BRANCH_FAILED"
    assert result["error"]["step_id"] == "merge" and "bad" in result["error"]["message"]
    # any: one good branch is enough
    lenient = {
        **PARALLEL,
        "nodes": [*PARALLEL["nodes"][:-1], {**PARALLEL["nodes"][-1], "on_failure": "fail", "wait": "any"}],
    }
    result, _ = start(Activities(defs(lenient)), "workflow", "fan", tools=[TOOL])
    assert result["status"] == "completed"


def test_a_loop_repeats_its_body_until_its_condition_holds_and_never_past_its_bound() -> None:
    def looped(until: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "loop",
            "name": "Loop",
            "nodes": [
                {"id": "again", "kind": "loop", "body": ["grow"], "max_iterations": 3, "until": until},
                change("grow", {"value": 80}),
                {
                    "id": "done",
                    "kind": "condition",
                    "after": ["again"],
                    "if": {"left": "again.iterations", "op": "ge", "right": 1},
                },
            ],
            "outputs": {"iterations": {"from": "again.iterations"}},
        }

    acts = Activities(defs(looped({"left": "grow.data.percent_change", "op": "gt", "right": 10})))
    result, ctx = start(acts, "workflow", "loop", tools=[TOOL])
    assert result["outputs"] == {"iterations": 1} and len(acts.named("call_tool")) == 1
    acts = Activities(defs(looped({"left": "grow.data.percent_change", "op": "gt", "right": 1000})))
    result, ctx = start(acts, "workflow", "loop", tools=[TOOL])
    assert result["outputs"] == {"iterations": 3}
    calls = acts.named("call_tool")
    assert len(calls) == 3 and len({c["task_id"] for c in calls}) == 3  # each iteration its own attempt
    assert steps(ctx)["grow"]["attempts"] == 3


def test_a_sub_workflow_runs_as_a_sub_orchestration_pinned_to_its_version() -> None:
    child_v1 = {
        "id": "child",
        "name": "Child",
        "inputs": {"old": {"type": "number"}, "new": {"type": "number", "required": False, "default": 100}},
        "nodes": [
            {
                "id": "c",
                "kind": "tool",
                "tool": TOOL,
                "input": {"old": {"from": "input.old"}, "new": {"from": "input.new"}},
            }
        ],
        "outputs": {"percent": {"from": "c.data.percent_change"}},
    }
    child_v2 = {**child_v1, "outputs": {"percent": {"value": "changed since"}}}
    parent = {
        "id": "parent",
        "name": "Parent",
        "nodes": [{"id": "sub", "kind": "workflow", "workflow": "child", "input": {"old": {"value": 50}}}],
        "outputs": {"percent": {"from": "sub.percent"}},
    }
    table = {**defs(parent), **defs(child_v1), **defs(child_v2, version=2)}
    acts = Activities(table)
    result, ctx = start(acts, "workflow", "parent", pins={"workflow/child": 1}, tools=[TOOL])
    assert result["status"] == "completed" and result["outputs"] == {"percent": 100.0}
    assert [p["version"] for p in acts.named("load_definition")] == [1, 1]
    assert steps(ctx)["sub"]["tool_output"] == "child v1: 1 nodes"
    assert list(ctx.children) == ["r1:sub:1"]


def test_a_failing_sub_workflow_fails_its_node() -> None:
    child = {"id": "child", "name": "C", "nodes": [change("c", {"value": 0})]}
    parent = {
        "id": "parent",
        "name": "P",
        "nodes": [{"id": "sub", "kind": "workflow", "workflow": "child", "version": 1}],
    }
    result, _ = start(Activities({**defs(parent), **defs(child)}), "workflow", "parent", tools=[TOOL])
    assert result["status"] == "failed" and result["error"]["code"] == "SUB_WORKFLOW_FAILED"
    assert result["error"]["step_id"] == "sub"


def test_a_definition_that_cannot_be_loaded_fails_the_run_clearly() -> None:
    result, _ = start(Activities({}), "workflow", "gone", version=3)
    assert result["status"] == "failed" and result["error"]["code"] == "DEFINITION_NOT_FOUND"
    assert "v3" in result["error"]["message"]


def test_an_agent_node_runs_the_executor_with_the_agents_instructions_tools_and_bounds() -> None:
    agent = {**AGENT, "tools": [TOOL, "http.weather"]}
    wf = {
        "id": "ask",
        "name": "Ask",
        "inputs": {"q": {"type": "string"}},
        "nodes": [{"id": "think", "kind": "agent", "agent": "analyst", "input": {"prompt": {"from": "input.q"}}}],
        "outputs": {"text": {"from": "think.text"}},
    }
    # Saved when http.weather was configured; the app no longer configures it.
    acts = Activities(
        {**defs(wf), **defs(agent)}, valid=False, agent_turn=[DONE_TURN], generate_response=[answer("It grew.")]
    )
    result, ctx = start(
        acts, "workflow", "ask", inputs={"q": "How did sales grow?"}, pins={"agent/analyst": 1}, tools=[TOOL]
    )
    assert result["status"] == "completed" and result["outputs"] == {"text": "It grew."}
    turn = acts.named("agent_turn")[0]
    assert turn["task"]["instructions"] == AGENT["instructions"]
    assert turn["task"]["question"] == "How did sales grow?" and turn["task"]["turns_left"] == 2
    # The definition named http.weather; the run allowed only what the app configures.
    assert turn["execution_context"]["allowed_tools"] == [TOOL]
    assert steps(ctx)["think"]["state"] == "succeeded"
    # The agent's per-call limits, on its turns and its answer alike.
    for payload in [turn, acts.named("generate_response")[0]]:
        assert payload["constraints"] == {
            "max_tokens": 800,
            "temperature": 0.3,
            "timeout_ms": 5000,
            "allowed_models": [],
        }


def test_an_agents_model_must_be_one_the_job_allows() -> None:
    agent = {**AGENT, "model": {"model": "big-model"}}
    wf = thinking()
    acts = Activities({**defs(wf), **defs(agent)})
    result, _ = start(acts, "workflow", "ask", constraints={"allowed_models": ["small-model"]})
    assert result["status"] == "failed" and result["error"]["code"] == "MODEL_NOT_ALLOWED"
    assert acts.named("agent_turn") == []
    # Allowed: the agent's model is the one its turns ask for.
    acts = Activities({**defs(wf), **defs(agent)}, agent_turn=[DONE_TURN], generate_response=[answer("ok")])
    result, _ = start(acts, "workflow", "ask", constraints={"allowed_models": ["small-model", "big-model"]})
    assert result["status"] == "completed"
    assert acts.named("agent_turn")[0]["execution_context"]["model"] == "big-model"


def test_a_run_is_pinned_to_the_version_it_started_with() -> None:
    v1 = {**AGENT, "instructions": "version one"}
    v2 = {**AGENT, "instructions": "version two"}
    wf = {"id": "ask", "name": "Ask", "nodes": [{"id": "think", "kind": "agent", "agent": "analyst", "input": PROMPT}]}
    table = {**defs(wf), **defs(v1), **defs(v2, version=2)}
    acts = Activities(table, agent_turn=[DONE_TURN], generate_response=[answer("ok")])
    result, _ = start(acts, "workflow", "ask", pins={"agent/analyst": 1})
    assert result["status"] == "completed"
    assert acts.named("agent_turn")[0]["task"]["instructions"] == "version one"
    # Without a pin the run refuses to guess "latest".
    result, _ = start(Activities(table), "workflow", "ask")
    assert result["error"]["code"] == "DEFINITION_NOT_PINNED"


def test_an_agent_with_an_output_schema_gives_only_a_valid_object() -> None:
    scored = {
        **AGENT,
        "output_schema": {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]},
    }
    wf = thinking(outputs={"score": {"from": "think.score"}})
    table = {**defs(wf), **defs(scored)}
    acts = Activities(table, agent_turn=[DONE_TURN], generate_response=[answer('Here: {"score": 0.8}')])
    result, _ = start(acts, "workflow", "ask")
    assert result["status"] == "completed" and result["outputs"] == {"score": 0.8}
    acts = Activities(table, agent_turn=[DONE_TURN], generate_response=[answer('{"score": "high"}')])
    result, _ = start(acts, "workflow", "ask")
    assert result["status"] == "failed" and result["error"]["code"] == "OUTPUT_INVALID"
    assert "score" in result["error"]["message"] and result["error"]["step_id"] == "think"


def test_a_rejected_approval_stops_the_run_and_a_skipped_node_counts_as_done() -> None:
    wf = {
        "id": "gate",
        "name": "Gate",
        "nodes": [
            human("ok", "Go?", ["approve", "reject"]),
            {
                "id": "never",
                "kind": "condition",
                "after": ["ok"],
                "if": {"left": "ok.answer", "op": "eq", "right": "x"},
                "then": ["extra"],
            },
            change("extra", {"value": 1}),
            change("last", {"value": 50}, after=["extra"]),
        ],
        "outputs": {"percent": {"from": "last.data.percent_change"}},
    }
    result, ctx = start(Activities(defs(wf)), "workflow", "gate", tools=[TOOL], reply=lambda e: {"answer": "approve"})
    assert result["outputs"] == {"percent": 100.0}
    assert steps(ctx)["extra"]["state"] == "skipped" and steps(ctx)["last"]["state"] == "succeeded"
    result, _ = start(Activities(defs(wf)), "workflow", "gate", tools=[TOOL], reply=lambda e: {"answer": "reject"})
    assert result["status"] == "failed" and result["error"]["code"] == "REJECTED_BY_USER"


def test_an_agent_calls_only_the_lookups_it_names() -> None:
    wf = thinking()
    asks_docs = ok(
        {"reasoning": "docs", "tool_calls": [{"id": "c1", "tool": "consult_rag", "arguments_json": '{"query": "x"}'}]}
    )
    acts = Activities(
        {**defs(wf), **defs(AGENT)}, agent_turn=[asks_docs, DONE_TURN], generate_response=[answer("done")]
    )
    result, _ = start(acts, "workflow", "ask", tools=[TOOL])
    assert result["status"] == "completed"
    first, second = acts.named("agent_turn")
    assert first["task"]["lookups"] == []  # AGENT names no step kind among its tools
    refused = second["task"]["transcript"][0]
    assert refused["success"] is False and refused["error"]["code"] == "INVALID_INPUT"
    assert acts.named("consult_rag") == []
    # Named, it runs.
    reader = {**AGENT, "tools": ["consult_rag"]}
    acts = Activities(
        {**defs(wf), **defs(reader)},
        agent_turn=[asks_docs, DONE_TURN],
        consult_rag=[ok(RAG_OK)],
        generate_response=[answer("done")],
    )
    result, _ = start(acts, "workflow", "ask")
    assert acts.named("agent_turn")[0]["task"]["lookups"] == ["consult_rag"] and len(acts.named("consult_rag")) == 1


def test_an_agent_in_a_branch_asks_through_the_root_and_gets_the_answer() -> None:
    wf = {
        "id": "fan",
        "name": "Fan",
        "nodes": [
            {"id": "split", "kind": "parallel", "branches": ["a", "b"]},
            {"id": "a", "kind": "agent", "agent": "analyst", "version": 1, "input": PROMPT},
            change("b", {"value": 80}),
            {"id": "merge", "kind": "join", "after": ["a", "b"]},
        ],
    }
    asks = ok(
        {
            "reasoning": "?",
            "tool_calls": [{"id": "c1", "tool": "request_user_feedback", "arguments_json": '{"question": "Which?"}'}],
        }
    )
    acts = Activities({**defs(wf), **defs(AGENT)}, agent_turn=[asks, DONE_TURN], generate_response=[answer("done")])
    asked: list[str] = []

    def reply(event: str) -> dict[str, str]:
        asked.append(event)
        return {"answer": "north"}

    result, ctx = start(acts, "workflow", "fan", tools=[TOOL], reply=reply)
    assert result["status"] == "completed", result
    # The question is named after the part it waits in, so its id is unique across the run.
    assert asked == ["answer:a-t1-q1@a"]
    told = acts.named("agent_turn")[1]["task"]["transcript"][0]
    assert told["success"] is True and "north" in str(told["data"])
    # The branch told the root run of its question, then that it was answered.
    news = [call["news"] for call in acts.named("report_part")]
    assert [(n["instance"], n["question_id"], n["ended"]) for n in news] == [
        ("r1:a", "a-t1-q1@a", None),
        ("r1:a", "a-t1-q1@a", "answered"),
    ]
    assert news[0]["asked"]["question"] == "Which?" and news[0]["asked"]["instance"] == "r1:a"
    assert {call["to"]["instance"] for call in acts.named("report_part")} == {"r1"}
