"""Requests, outputs and a fake Azure credential shared by the LLM tests."""

from __future__ import annotations

from typing import Any

from shared.jobs.contracts import AnswerResult
from shared.jobs.plan import Plan, SqlDraft
from shared.providers.interfaces import LLMRequest, LLMTask

CATALOG: dict[str, Any] = {
    "tables": [
        {
            "name": "orders",
            "description": "One row per customer order.",
            "columns": [
                {"name": "order_id", "type": "INTEGER"},
                {"name": "region", "type": "TEXT", "description": "Sales region"},
                {"name": "amount_eur", "type": "REAL", "description": "Order total in euros"},
            ],
        }
    ]
}

SQL_DRAFT = {
    "sql": "SELECT region, SUM(amount_eur) AS total_eur FROM orders GROUP BY region LIMIT 50",
    "tables": ["orders"],
    "explanation": "Total order value per region.",
}

PLAN = {
    "steps": [
        {
            "id": "docs",
            "kind": "consult_rag",
            "title": "Search the policy",
            "input": {"query": "refund policy"},
            "depends_on": [],
        },
        {
            "id": "sales",
            "kind": "execute_azure_sql",
            "title": "Sales by region",
            "input": {"question": "total sales by region"},
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
    "rationale": "Needs the policy and the figures.",
}

ANSWER = {
    "answer": "North sold the most (1200 EUR) [sql:sales]; refunds take 14 days [policy#1].",
    "citations": [
        {"source_id": "sql:sales", "kind": "sql", "title": "Sales by region", "quote": None},
        {"source_id": "policy#1", "kind": "document", "title": "Refund policy", "quote": "within 14 days"},
    ],
    "claims": [],
}

SOURCES = [
    {
        "source_id": "policy#1",
        "kind": "document",
        "title": "Refund policy",
        "content": "Refunds are paid within 14 days.",
    },
    {
        "source_id": "sql:sales",
        "kind": "sql",
        "title": "Sales by region",
        "content": "",
        "sql": "SELECT region, SUM(amount_eur) AS total_eur FROM orders GROUP BY region",
        "columns": ["region", "total_eur"],
        "rows": [["North", 1200.0], ["South", None]],
    },
]


def sql_request(**kwargs: Any) -> LLMRequest[SqlDraft]:
    """A write_sql request over the test catalog."""
    inputs = {"question": "Total sales by region?", "dialect": "sqlite", "catalog": CATALOG, "max_rows": 50}
    return LLMRequest(task=LLMTask.WRITE_SQL, inputs=inputs, output_type=SqlDraft, **kwargs)


# The step kinds the plan executor passes from the registry (the provider knows none of its own).
STEP_KINDS = {
    "consult_rag": "Search the document collection.",
    "execute_azure_sql": "Answer a data question from the SQL database.",
    "generate_response": "Write the final answer from the earlier steps' outputs.",
    "ask_user": "Ask the user a clarifying question with options.",
}


def plan_request(**kwargs: Any) -> LLMRequest[Plan]:
    """A plan request over the test catalog and two documents."""
    inputs = {
        "question": "Which region sells most, and what is the refund policy?",
        "catalog": CATALOG,
        "documents": ["Refund policy", "Holiday calendar"],
        "step_kinds": STEP_KINDS,
    }
    return LLMRequest(task=LLMTask.PLAN, inputs=inputs, output_type=Plan, **kwargs)


def answer_request(**kwargs: Any) -> LLMRequest[AnswerResult]:
    """A write_answer request over a document chunk and a SQL result."""
    inputs = {"question": "Which region sells most, and what is the refund policy?", "sources": SOURCES}
    return LLMRequest(task=LLMTask.WRITE_ANSWER, inputs=inputs, output_type=AnswerResult, **kwargs)


# An agent with an output schema, in a one-node workflow (the fake and the real-model tier run it).
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "refund_possible": {"type": "boolean", "description": "Whether a refund is possible after 30 days."},
        "days": {"type": "integer", "description": "How many days a refund takes."},
    },
    "required": ["refund_possible", "days"],
    "additionalProperties": False,
}
JUDGE_AGENT = {
    "kind": "agent",
    "id": "judge",
    "name": "Judge",
    "instructions": "Answer briefly.",
    "limits": {"max_turns": 1, "max_tool_calls": 1},
    "constraints": {"max_tokens": 160, "timeout_ms": 180_000},
    "output_schema": JUDGE_SCHEMA,
}
JUDGE_WORKFLOW = {
    "id": "judge-refunds",
    "name": "Judge refunds",
    "nodes": [
        {
            "id": "judge",
            "kind": "agent",
            "agent": "judge",
            "version": 1,
            "input": {"prompt": {"value": "Can a customer get a refund after 30 days?"}},
        }
    ],
    "outputs": {"refund_possible": {"from": "judge.refund_possible"}, "days": {"from": "judge.days"}},
}
