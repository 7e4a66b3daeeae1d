"""The offline Supervisor decides from the step outcome (hybrid mode is visibly different), and its bounds hold.

The rules are a pure function (table below); the jobs run the real offline executors inline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.providers.llm.offline.questions import split_question
from shared.providers.llm.offline.supervisor import supervise_offline
from shared.runtime.settings import Settings

OFFLINE = Clients(Settings(llm_provider="offline", search_provider="local", sql_provider="sqlite"))
SQL_STEP = {"id": "s1", "kind": "execute_azure_sql", "title": "t", "input": {"question": "revenue by region"}}
RAG_STEP = {"id": "s1", "kind": "consult_rag", "title": "t", "input": {"query": "refund policy"}}
ANSWER = {"id": "s2", "kind": "generate_response", "title": "a", "input": {"question": "q"}}


def decide(step: dict[str, Any], output: dict[str, Any], *, question: str = "revenue by region", **kw: Any) -> Any:
    plan = kw.pop("plan", [step, ANSWER])
    return supervise_offline(
        {"question": question, "plan": plan, "step": step, "output": output},
        split=split_question,
        covers_data=kw.pop("covers_data", lambda t: "revenue" in t),
        docs_have=kw.pop("docs_have", lambda t: "policy" in t),
    )


ROWS = {"columns": ["region", "revenue"], "rows": [["EU", 10.0]], "row_count": 1}


@pytest.mark.parametrize(
    ("step", "output", "question", "action", "extra"),
    [
        (SQL_STEP, ROWS, "revenue by region", "continue", {}),
        (SQL_STEP, {**ROWS, "truncated": True, "row_count": 51}, "revenue by region", "continue", {}),
        (SQL_STEP, {"columns": ["revenue"], "rows": [], "row_count": 0}, "revenue by region", "ask_user", {}),
        (SQL_STEP, {"columns": ["revenue"], "rows": [[None]], "row_count": 1}, "revenue by region", "ask_user", {}),
        (RAG_STEP, {"chunks": [{"source_id": "p#1", "content": "x"}]}, "refund policy", "continue", {}),
        (RAG_STEP, {"chunks": []}, "refund policy", "ask_user", {}),
        (
            {**RAG_STEP, "input": {"query": "revenue by region"}},
            {"chunks": []},
            "revenue by region",
            "choose_tool",
            {"executor_type": "execute_azure_sql"},
        ),
        (SQL_STEP, {"skipped": True, "error_code": "TRANSIENT", "skipped_by_user": False}, "q", "retry", {}),
        (SQL_STEP, {"skipped": True, "error_code": "TRANSIENT", "skipped_by_user": True}, "q", "continue", {}),
        (
            {**SQL_STEP, "input": {"question": "the refund policy"}},
            {"skipped": True, "error_code": "BAD_REQUEST", "skipped_by_user": False},
            "q",
            "choose_tool",
            {"executor_type": "consult_rag"},
        ),
        (SQL_STEP, {"skipped": True, "error_code": "BAD_REQUEST"}, "q", "continue", {}),
        (SQL_STEP, ROWS, "What was the revenue by region, and what does the refund policy say?", "replan", {}),
        (SQL_STEP, {"truncated": '{"rows": ...'}, "revenue by region", "continue", {}),
    ],
)
def test_each_rule_decides_and_says_why(
    step: dict[str, Any], output: dict[str, Any], question: str, action: str, extra: dict[str, Any]
) -> None:
    decision = decide(step, output, question=question)
    assert decision.action == action, decision.reason
    assert decision.reason
    for key, value in extra.items():
        assert getattr(decision, key) == value
    if action == "ask_user":
        assert decision.question and decision.options


def test_a_plan_that_looks_everything_up_is_not_replanned() -> None:
    question = "What was the revenue by region, and what does the refund policy say?"
    plan = [SQL_STEP, {**RAG_STEP, "id": "s2"}, ANSWER]
    assert decide(SQL_STEP, ROWS, question=question, plan=plan).action == "continue"


# --- whole jobs on the offline executors ----------------------------------------------------------------


class Offline:
    """Runs the real executors; ``plan`` can be replaced to stand for a planner that forgot a part."""

    def __init__(self, plan: dict[str, Any] | None = None) -> None:
        self.plan = plan
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.asked: list[str] = []

    def __call__(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any]
        if name == "plan" and self.plan is not None and not self.calls:
            out = {"status": "success", "result": self.plan, "usage": {}, "model_used": "offline"}
        else:
            # Clients of their own: another test may have left process-wide clients pointing elsewhere.
            out = run_executor(payload, expected_type=name, clients=OFFLINE)
        self.calls.append((name, out))
        return out

    def answer(self, event: str) -> Any:
        self.asked.append(event)
        return {"answer": "continue without it"}

    def decisions(self) -> list[str]:
        return [out["result"]["action"] for name, out in self.calls if name == "supervise"]


def run_job(question: str, mode: str, script: Offline) -> tuple[dict[str, Any], InlineContext]:
    job = {
        "job_id": "j1",
        "request": {"question": question, "mode": mode},
        "policy": {"first_retry_ms": 1, "max_retry_ms": 5},
    }
    ctx = InlineContext(job, script, script.answer)
    return run_inline(job_orchestrator_body, ctx), ctx


def test_hybrid_asks_the_user_when_the_query_finds_no_data_and_deterministic_does_not() -> None:
    question = "What was the total revenue in 2015?"
    hybrid = Offline()
    result, ctx = run_job(question, "hybrid", hybrid)
    assert result["status"] == "completed"
    assert hybrid.decisions() == ["ask_user"]
    assert hybrid.asked == ["answer:s1-q1"]  # the Supervisor's question was shown, once

    plain = Offline()
    result, ctx = run_job(question, "deterministic", plain)
    assert result["status"] == "completed" and plain.decisions() == [] and plain.asked == []


def test_hybrid_replans_when_the_plan_forgot_a_part_of_the_question() -> None:
    question = "What was the revenue by region, and what does the refund policy say about damaged items?"
    forgot = {
        "steps": [
            {"id": "s1", "kind": "execute_azure_sql", "title": "data", "input": {"question": "revenue by region"}},
            {"id": "s2", "kind": "generate_response", "title": "answer", "input": {"question": question}},
        ]
    }
    script = Offline(plan=forgot)
    result, ctx = run_job(question, "hybrid", script)
    assert result["status"] == "completed"
    assert script.decisions()[0] == "replan"
    steps = ctx.custom_status["steps"]
    kinds = [s["kind"] for s in steps]
    # The new plan looks up the forgotten part and does not query the data again.
    assert kinds.count("execute_azure_sql") == 1 and "consult_rag" in kinds
    assert ctx.custom_status["replans"] == 1
    cited = {c["source_id"] for c in result["citations"]}
    assert any(c.startswith("sql:") for c in cited) and any("refund" in c for c in cited)
    supervise_log = [json.dumps(out["result"]) for name, out in script.calls if name == "supervise"]
    assert "refund policy" in supervise_log[0]
