"""What a fork rebuilds of the work its origin's orchestrator did itself (shared/jobs/fork_carry.py): pure functions."""

from __future__ import annotations

import json
from typing import Any

from shared.executors import writes_answer
from shared.jobs import fork_carry as carry
from shared.jobs.plan import PlanStep


def turn_event(
    question: str, transcript: list[dict[str, Any]], calls: list[dict[str, Any]], left: int
) -> dict[str, Any]:
    return {
        "EventType": "TaskCompleted",
        "FunctionName": "agent_turn",
        "Input": {"task_id": f"job:agent_turn:{9 - left}", "executor_type": "agent_turn",
                  "task": {"question": question, "transcript": transcript, "turns_left": left}},
        "Result": json.dumps({"status": "success", "result": {"reasoning": f"r{left}", "tool_calls": calls}}),
    }  # fmt: skip


def activity(step_id: str, kind: str, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "EventType": "TaskCompleted",
        "FunctionName": kind,
        "Input": {"task_id": f"job:{step_id}:1", "executor_type": kind, "task": {}},
        "Result": json.dumps({"status": "success", "result": result}),
    }


def record(step_id: str) -> dict[str, Any]:
    return {"id": "c", "tool": "consult_rag", "success": True, "step": step_id}


def call(call_id: str, tool: str = "consult_rag") -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "arguments_json": "{}"}


def test_two_agent_steps_in_a_row_each_get_their_own_turns() -> None:
    # The first step's last turn calls nothing; the second's first turn follows it with an empty transcript.
    history = [
        turn_event("a", [], [call("x")], 8),
        activity("s1-t1", "consult_rag", {"chunks": [1]}),
        turn_event("a", [record("s1-t1")], [], 7),
        turn_event("b", [], [call("y")], 8),
        activity("s2-t1", "consult_rag", {"chunks": [2]}),
        turn_event("b", [record("s2-t1")], [call("end", "format_output")], 7),
    ]
    loops = carry.agent_loops(history, ["s1", "s2"])
    assert [t["task"]["question"] for t in loops["s1"]] == ["a", "a"]
    assert [t["task"]["question"] for t in loops["s2"]] == ["b", "b"]
    outputs = {"s1-t1": {"chunks": [1]}, "s2-t1": {"chunks": [2]}}
    kinds = {"s1-t1": "consult_rag", "s2-t1": "consult_rag"}
    out, found = carry.agent_step_output("s2", loops["s2"], 12, outputs, kinds, {})
    assert out == {
        "question": "b",
        "turns": 2,
        "reasoning": ["r8", "r7"],
        "tool_calls": [{"id": "y", "tool": "consult_rag", "success": True}],
        "parts": [{"chunks": [2]}],
    }
    assert found == {"s2-t1": {"chunks": [2]}}


def test_a_call_without_a_result_failed_and_a_family_tool_is_no_source() -> None:
    turns = [{"task": {"turns_left": 8}, "result": {"result": {"tool_calls": [call("a"), call("b", "function.f")]}}}]
    calls, lookups = carry.agent_calls("s1", turns, 12, {"s1-t2": {"success": True}}, {"s1-t2": "call_tool"}, {})
    assert calls == [
        {"id": "a", "tool": "consult_rag", "success": False},  # refused or skipped: no result recorded
        {"id": "b", "tool": "function.f", "success": True},
    ]
    assert lookups == []
    # Calls past the loop's bound were never opened.
    assert len(carry.agent_calls("s1", turns, 1, {}, {}, {})[0]) == 1


def test_an_ask_user_answer_or_the_default_its_wait_expired_to() -> None:
    answers = carry.human_answers(
        [
            {"EventType": "EventRaised", "Name": "answer:s1-q1", "Input": json.dumps({"answer": "nonsense"})},
            {"EventType": "EventRaised", "Name": "answer:s1-q2", "Input": json.dumps({"answer": " returns "})},
        ]
    )
    assert carry.ask_user_output("s1", {"question": "?", "options": ["a"]}, answers) == {"answer": "returns"}
    assert carry.ask_user_output("s2", {"question": "?", "options": ["first", "b"]}, answers) == {"answer": "first"}
    assert carry.ask_user_output("s2", {"question": "?"}, answers) is None


def plan_event(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return activity("plan", "plan", {"steps": steps})


def supervise_event(plan: list[dict[str, Any]], step_id: str) -> dict[str, Any]:
    event = activity("supervise", "supervise", {"action": "continue", "reason": ""})
    event["Input"]["task"] = {"plan": plan, "step": next(s for s in plan if s["id"] == step_id)}
    return event


def s(step_id: str, kind: str, deps: list[str] | None = None) -> dict[str, Any]:
    text = {"consult_rag": "query"}.get(kind, "question")
    return {"id": step_id, "kind": kind, "title": step_id, "input": {text: "q"}, "depends_on": deps or []}


def test_the_plan_in_force_at_a_step_of_a_replanned_job() -> None:
    first = [s("s1", "execute_azure_sql"), s("s2", "generate_response", ["s1"])]
    again = [s("s1", "consult_rag"), s("s2", "generate_response", ["s1"])]
    replanned = [*first[:1], s("s1r1", "consult_rag"), s("s2r1", "generate_response", ["s1", "s1r1"])]
    history = [plan_event(first), supervise_event(first, "s1"), plan_event(again), supervise_event(replanned, "s1r1")]
    # Before the replan, at s1: the first plan (what the Supervisor did after s1 is after the fork point).
    plan, replans = carry.plan_at(history, "s1", {"s1"}, writes_answer)
    assert plan is not None and [p.id for p in plan.steps] == ["s1", "s2"] and replans == 0
    # At the replanned answer: no Supervisor call after it, so the replan is applied as the orchestrator did.
    plan, replans = carry.plan_at(history, "s2r1", {"s1", "s1r1"}, writes_answer)
    assert plan is not None and replans == 1
    assert [(p.id, p.depends_on) for p in plan.steps] == [("s1", []), ("s1r1", []), ("s2r1", ["s1", "s1r1"])]
    # A fork's own history starts from its base's plan (and its replans).
    start = [PlanStep.model_validate(x) for x in replanned]
    plan, replans = carry.plan_at([], "s2r1", set(), writes_answer, start, 1)
    assert plan is not None and [p.id for p in plan.steps] == ["s1", "s1r1", "s2r1"] and replans == 1


def test_a_sub_workflow_result_and_a_loops_iterations() -> None:
    done = {
        "EventType": "SubOrchestrationInstanceCompleted",
        "Input": json.dumps({"job_id": "job:sub:1", "run": {"kind": "workflow", "id": "inner", "part": None}}),
        "Result": json.dumps({"status": "completed", "result": {"percent": 25.0}}),
    }
    branch = dict(done, Input=json.dumps({"job_id": "job:left", "run": {"part": {"entry": "left"}}}))
    assert carry.sub_workflow_results([done, branch], "job") == {
        "sub": {"status": "completed", "result": {"percent": 25.0}}
    }
    assert carry.loop_iterations("3 iterations") == 3 and carry.loop_iterations("…") is None


def test_what_people_told_the_supervisor_or_the_default_its_wait_expired_to() -> None:
    asked = {"action": "ask_user", "reason": "r", "question": "Which?", "options": ["first", "b"]}
    plan = [s("s1", "consult_rag"), s("s2", "consult_rag"), s("s3", "generate_response")]

    told = [plan[0], s("s2", "consult_rag", ["s1"]), s("s3", "generate_response", ["s1"])]  # after s1's question

    def supervised(step_id: str, decision: dict[str, Any]) -> dict[str, Any]:
        event = supervise_event(plan if step_id == "s1" else told, step_id)
        event["Result"] = json.dumps({"status": "success", "result": decision})
        return event

    answered = {"EventType": "EventRaised", "Name": "answer:s1-q1", "Input": json.dumps({"answer": " online "})}
    history = [supervised("s1", asked), answered, activity("s2", "consult_rag", {}), supervised("s2", asked)]
    history.append(activity("s3", "generate_response", {}))
    assert carry.supervisor_answers(history, expiry_default=False) == {"s1": "online"}
    assert carry.supervisor_answers(history, expiry_default=True) == {"s1": "online", "s2": "first"}
    # The later steps depend on the step asked about, as the orchestrator made them.
    rebuilt, _ = carry.plan_at([plan_event(plan), *history], "s3", {"s1", "s2"}, writes_answer)
    assert rebuilt is not None and rebuilt.steps[2].depends_on == ["s1", "s2"]
