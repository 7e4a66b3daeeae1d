"""The real executors with the real provider against the fake server: plan → write_sql → write_answer.

This pins the seam between the executors and the provider: their inputs fill the prompt files,
the real catalog grounds the prompts, and the contract outputs carry usage, cost and model_used.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from shared.executors.generate_response import STREAM_OBSERVER
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.pricing import estimate_cost
from shared.runtime.settings import Settings
from tests.fakes.openai_server import FakeOpenAI, JsonReply, rate_limited

PLAN = {
    "steps": [
        {
            "id": "docs",
            "kind": "consult_rag",
            "title": "Returns policy",
            "input": {"query": "returns"},
            "depends_on": [],
        },
        {
            "id": "sales",
            "kind": "execute_azure_sql",
            "title": "Regions",
            "input": {"question": "list regions"},
            "depends_on": [],
        },
        {
            "id": "answer",
            "kind": "generate_response",
            "title": "Answer",
            "input": {"question": "q"},
            "depends_on": ["docs", "sales"],
        },
    ],
    "rationale": "Needs documents and data.",
}
SQL = {"sql": "SELECT name FROM regions ORDER BY name LIMIT 10", "tables": ["regions"], "explanation": "Region names."}
ANSWER = {
    "answer": "There are four regions: East, North, South and West [sql:sales].",
    "citations": [{"source_id": "sql:sales", "kind": "sql", "title": "Regions", "quote": None}],
    "claims": [],
}


def _payload(executor_type: str, task: dict[str, Any], **context: Any) -> dict[str, Any]:
    return {
        "task_id": f"t-{executor_type}",
        "executor_type": executor_type,
        "task": task,
        "execution_context": {"job_id": "j1", "step_id": executor_type, **context},
        "constraints": {"max_tokens": 800, "timeout_ms": 10_000},
    }


@pytest.fixture
def clients(fake_openai: FakeOpenAI, tmp_path: Any) -> Clients:
    settings = Settings(
        llm_provider="azure_openai",
        azure_openai_endpoint=fake_openai.endpoint,
        azure_openai_api_key=SecretStr("k"),
        azure_openai_chat_deployment="chat-dep",
        model_prices={"chat-dep": {"input_per_million": 1.0, "output_per_million": 4.0}},  # type: ignore[dict-item]
        sqlite_database_path=tmp_path / "sample.db",
    )
    return Clients(settings)


def test_plan_sql_answer_through_the_real_provider(fake_openai: FakeOpenAI, clients: Clients) -> None:
    fake_openai.always(JsonReply(PLAN, usage=(3000, 200)), task="plan")
    fake_openai.script(rate_limited(retry_after_ms=20), task="write_sql")
    fake_openai.always(JsonReply(SQL, usage=(2500, 60)), task="write_sql")
    fake_openai.always(JsonReply(ANSWER, usage=(1500, 90), chunks=12), task="write_answer")

    plan = run_executor(_payload("plan", {"question": "Which regions are there?"}), clients=clients)
    assert plan["status"] == "success" and [s["id"] for s in plan["result"]["steps"]] == ["docs", "sales", "answer"]
    assert plan["model_used"] == "chat-dep"
    assert plan["usage"]["tokens_input"] == 3000
    assert plan["usage"]["estimated_cost"] == pytest.approx(
        estimate_cost("chat-dep", 3000, 200, clients.settings.model_prices)
    )
    plan_request = fake_openai.requests_for("plan")[0]
    assert "- regions: Sales regions." in plan_request.system_text  # grounded in the real catalog
    assert "- consult_rag:" in plan_request.system_text  # the registry's step kinds

    throttled = run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert throttled["status"] == "failed"
    assert throttled["error"]["code"] == "RATE_LIMITED" and throttled["error"]["retry_after_ms"] == 20
    sql = run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert sql["status"] == "success", sql
    assert sql["result"]["rows"] == [["East"], ["North"], ["South"], ["West"]]
    assert sql["model_used"] == "chat-dep" and sql["usage"]["tokens_output"] == 60
    assert "sqlite database" in fake_openai.requests_for("write_sql")[-1].system_text

    seen: list[str] = []
    sources = [{"source_id": "sql:sales", "kind": "sql", "title": "Regions", "columns": ["name"], "rows": [["East"]]}]
    token = STREAM_OBSERVER.set(seen.append)
    try:
        answer = run_executor(
            _payload("generate_response", {"question": "Which regions are there?"}, sources=sources), clients=clients
        )
    finally:
        STREAM_OBSERVER.reset(token)
    assert answer["status"] == "success", answer
    assert answer["result"]["answer"] == ANSWER["answer"]
    assert "".join(seen) == ANSWER["answer"] and len(seen) > 1
    assert answer["usage"]["estimated_cost"] == pytest.approx((1500 * 1.0 + 90 * 4.0) / 1e6)
    assert '<untrusted_data source="sql:sales" kind="sql">\ntitle: Regions\nname\nEast' in (
        fake_openai.requests_for("write_answer")[0].user_text
    )
    assert fake_openai.failures == []
