"""Issue 9 §1: the offline model is labelled honestly, and it answers the question that was asked."""

from __future__ import annotations

import sqlite3

import pytest

from shared.executors.common import usage_of
from shared.jobs.contracts import AnswerResult, ErrorCode, ExecutorInput, ProviderError
from shared.jobs.plan import Plan, SqlDraft
from shared.jobs.tokens import estimate_tokens
from shared.providers.clients import Clients
from shared.providers.interfaces import LLMRequest, LLMTask
from shared.providers.llm.offline.model import OFFLINE_MODEL, OfflineLLM


def test_model_used_is_the_offline_model_whatever_was_requested(offline: OfflineLLM, clients: Clients) -> None:
    request = LLMRequest(
        task=LLMTask.WRITE_ANSWER,
        inputs={"question": "Do gift cards expire?", "sources": []},
        output_type=AnswerResult,
        model="gpt-4o",
        max_tokens=1,
    )
    response = offline.generate(request)
    assert response.model_used == OFFLINE_MODEL
    assert usage_of(response, clients).estimated_cost == 0.0
    # max_tokens is not applied to the output, so the count is not clamped to it either.
    assert response.tokens_output == estimate_tokens(response.output.model_dump_json()) > 1


def _sql(offline: OfflineLLM, question: str) -> SqlDraft:
    request = LLMRequest(
        task=LLMTask.WRITE_SQL, inputs={"question": question, "dialect": "sqlite"}, output_type=SqlDraft
    )
    return offline.generate(request).output


def _rows(clients: Clients, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(clients.settings.sqlite_database_path) as conn:
        return conn.execute(sql).fetchall()


def test_one_figure_when_one_figure_is_asked(offline: OfflineLLM, clients: Clients) -> None:
    draft = _sql(offline, "Average order value for business customers")
    rows = _rows(clients, draft.sql)
    expected = _rows(
        clients,
        "SELECT ROUND(SUM(i.quantity * i.unit_price) / COUNT(DISTINCT o.order_id), 2) FROM order_items i "
        "JOIN orders o ON o.order_id = i.order_id JOIN customers c ON c.customer_id = o.customer_id "
        "WHERE c.segment = 'Business'",
    )
    assert rows == expected and len(rows) == 1


@pytest.mark.parametrize(
    ("question", "groups"),
    [
        ("Revenue for each business customer", True),
        ("Number of orders for business clients", False),
        ("top 3 Electronics products by revenue", True),
    ],
)
def test_a_value_before_a_dimension_filters_unless_a_breakdown_is_asked(
    offline: OfflineLLM, question: str, groups: bool
) -> None:
    sql = _sql(offline, question).sql
    assert ("GROUP BY" in sql) is groups
    assert "= 'Business'" in sql or "= 'Electronics'" in sql


def test_ordinary_wording_maps_to_the_catalog(offline: OfflineLLM, clients: Clients) -> None:
    sql = _sql(offline, "What's the refund total for returns where the customer changed their mind?").sql
    assert _rows(clients, sql) == _rows(clients, "SELECT ROUND(SUM(refund_amount), 2) FROM returns "
                                                 "WHERE reason = 'Changed mind'")  # fmt: skip
    segment = _sql(offline, "Which segment has the higher average order value?").sql
    assert len(_rows(clients, segment)) == 1 and "segment" in segment


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("What is our employee turnover rate?", ["employee", "rate", "“turnover” as revenue"]),
        ("What was the profit margin on Books?", ["profit", "margin"]),
        ("net revenue by region", ["net"]),
    ],
)
def test_what_the_writer_cannot_express_is_explained_in_plain_words(
    offline: OfflineLLM, question: str, words: list[str]
) -> None:
    with pytest.raises(ProviderError) as caught:
        _sql(offline, question)
    message = caught.value.message
    assert caught.value.code is ErrorCode.BAD_REQUEST
    assert "configure an LLM" not in message
    assert "not a language model" in message and "The data holds: revenue" in message
    assert "Rephrase the step's question" in message
    for word in words:
        assert word in message


def test_the_failed_sql_step_shows_that_message(clients: Clients) -> None:
    from shared.executors.runner import run_executor

    payload = ExecutorInput(
        task_id="t1", executor_type="execute_azure_sql", task={"question": "employee turnover rate"}
    )
    out = run_executor(payload.model_dump(mode="json"), clients=clients)
    assert out["status"] == "failed" and "“employee”" in out["error"]["message"]


def _plan(offline: OfflineLLM, question: str) -> Plan:
    request = LLMRequest(task=LLMTask.PLAN, inputs={"question": question}, output_type=Plan)
    return offline.generate(request).output


def test_why_looks_for_the_reason_in_the_documents(offline: OfflineLLM) -> None:
    plan = _plan(offline, "How many Electronics returns did the West have in Q3, and why did they rise?")
    kinds = [s.kind for s in plan.steps]
    assert kinds == ["execute_azure_sql", "consult_rag", "generate_response"]
    # The "why" part is searched with the part it refers to, not as "why did they rise".
    assert "West" in plan.steps[1].input["query"] and "rise" in plan.steps[1].input["query"]


@pytest.mark.parametrize(
    "question",
    [
        "Within how many days must returned items be inspected after they arrive?",
        "Do you take checks for online orders?",
        "Why did returns rise in the West?",
        "What caused the delays in the South?",
    ],
)
def test_rules_and_reasons_go_to_the_documents(offline: OfflineLLM, question: str) -> None:
    assert [s.kind for s in _plan(offline, question).steps][0] == "consult_rag"


def test_a_measure_the_catalog_lacks_is_not_queried(offline: OfflineLLM) -> None:
    assert "execute_azure_sql" not in [s.kind for s in _plan(offline, "What is our employee turnover rate?").steps]


def test_faults_fail_or_slow_the_next_calls_of_a_task() -> None:
    from shared.providers.llm.offline.model import _parse_faults

    faults, delays = _parse_faults("plan:RATE_LIMITED:2, write_sql:DELAY:1:60000")
    assert faults == {"plan": (ErrorCode.RATE_LIMITED, 2)}
    assert delays == {"write_sql": (1, 60.0)}
    for bad in ("write_sql:DELAY:1", "plan:RATE_LIMITED:1:5", "plan:NOT_A_CODE:1"):
        with pytest.raises(ValueError):
            _parse_faults(bad)
