"""Issue 9 §1: never draw a conclusion from a partial result; numbers in the catalog's formats."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.jobs.contracts import AnswerResult, SqlResult
from shared.providers.interfaces import LLMRequest, LLMTask
from shared.providers.llm.offline.answers import compose_answer_offline
from shared.providers.llm.offline.model import OfflineLLM
from shared.providers.llm.offline.sql_summary import format_value, is_partial, summarize_sql
from shared.providers.llm.prompts import render_prompt

CONCLUSION = re.compile(r"\b(has|have|share) the (highest|lowest)\b|\bthe (highest|lowest) is\b")


def _by_customer(n: int, **extra: Any) -> SqlResult:
    rows = [[f"Customer {i}", 1000.0 + 10 * i] for i in range(n)]
    return SqlResult.model_validate(
        {"question": "Revenue by business customer", "sql": "SELECT customer, revenue FROM t", "dialect": "sqlite",
         "columns": ["customer", "revenue"], "rows": rows, "row_count": n, "source_id": "sql:s1"} | extra
    )  # fmt: skip


def test_fewer_rows_than_returned_says_how_many_and_concludes_nothing() -> None:
    result = _by_customer(20, row_count=116)
    assert is_partial(result)
    text = summarize_sql("Which business customer spent the most?", result)
    assert "showing 20 of 116 customers" in text
    assert not CONCLUSION.search(text)


def test_a_capped_query_says_at_least() -> None:
    text = summarize_sql("lowest revenue per customer", _by_customer(50, truncated=True))
    assert "showing 50 customers; the query stopped at its row limit, so there are more" in text
    shown = summarize_sql("q", _by_customer(20, row_count=50, truncated=True))
    assert "showing 20 of at least 50 customers" in shown
    assert not CONCLUSION.search(text) and not CONCLUSION.search(shown)


def test_a_whole_result_still_names_its_extremes() -> None:
    text = summarize_sql("Which customer spent the most?", _by_customer(5))
    assert text.startswith("Customer 4 has the highest revenue (1,040); the lowest is Customer 0 (1,000)")


def _answer(offline: OfflineLLM, question: str, sources: list[dict[str, Any]], model: str | None = None) -> Any:
    request = LLMRequest(
        task=LLMTask.WRITE_ANSWER,
        inputs={"question": question, "sources": sources},
        output_type=AnswerResult,
        model=model,
        max_tokens=5,
    )
    return offline.generate(request)


def _source(n: int, **extra: Any) -> dict[str, Any]:
    rows = [[f"Customer {i}", 1000.0 + i] for i in range(n)]
    return {"source_id": "sql:s1", "kind": "sql", "title": "Revenue by customer", "sql": "SELECT 1",
            "columns": ["customer", "revenue"], "rows": rows} | extra  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"row_count": 116, "rows_shown": 20}, "showing 20 of 116 customers"),
        ({"row_count": 50, "truncated": True}, "showing 20 of at least 50 customers"),
        ({"truncated": True}, "the query stopped at its row limit"),
    ],
)
def test_the_offline_writer_reads_the_size_from_the_source(
    offline: OfflineLLM, extra: dict[str, Any], expected: str
) -> None:
    answer = _answer(offline, "Which customer has the highest revenue?", [_source(20, **extra)]).output.answer
    assert expected in answer
    assert not CONCLUSION.search(answer)


def test_without_size_fields_a_result_is_taken_as_whole(offline: OfflineLLM) -> None:
    answer = _answer(offline, "Which customer has the highest revenue?", [_source(3)]).output.answer
    assert "Customer 2 has the highest revenue ($1,002.00)" in answer


def test_the_llm_prompt_carries_the_size_in_the_tag() -> None:
    sources = [_source(2, row_count=116, rows_shown=2), _source(2, source_id="sql:s2", truncated=True, row_count=50)]
    rendered = render_prompt(LLMTask.WRITE_ANSWER, {"question": "q", "sources": sources})
    text = rendered.user
    assert 'source="sql:s1" kind="sql" rows_shown="2" row_count="116">' in text
    assert 'source="sql:s2" kind="sql" rows_shown="2" row_count="at least 50" truncated="true">' in text
    assert "never state an overall fact" in rendered.system
    whole = render_prompt(LLMTask.WRITE_ANSWER, {"question": "q", "sources": [_source(2)]}).user
    assert "rows_shown" not in whole


@pytest.mark.parametrize(
    ("value", "fmt", "shown"),
    [
        (1174615.9, "currency", "$1,174,615.90"),
        ("12.5", "currency", "$12.50"),
        (-3.0, "currency", "-$3.00"),
        (0.0594, "ratio", "5.94%"),
        (0.08, "ratio", "8%"),
        (0.12345, "ratio", "12.35%"),
        (1195, "count", "1,195"),
        (7, None, "7"),
        ("West", "currency", "West"),
        (None, "ratio", "—"),
    ],
)
def test_catalog_formats(value: object, fmt: str | None, shown: str) -> None:
    assert format_value(value, fmt) == shown


def test_the_offline_answer_uses_the_catalog_formats(offline: OfflineLLM) -> None:
    sources = [
        {"source_id": "sql:a", "kind": "sql", "title": "rate", "sql": "SELECT 1", "columns": ["return_rate"],
         "rows": [[0.0594]]},
        {"source_id": "sql:b", "kind": "sql", "title": "revenue", "sql": "SELECT 1",
         "columns": ["region", "revenue"], "rows": [["West", 1000.5], ["East", 2000.25]]},
    ]  # fmt: skip
    answer = _answer(offline, "q", sources).output.answer
    assert "return rate: 5.94%" in answer
    assert "East has the highest revenue ($2,000.25)" in answer and "| West | $1,000.50 |" in answer


def test_compose_without_formats_keeps_plain_numbers() -> None:
    result = compose_answer_offline("q", [], [_by_customer(1)])
    assert "revenue: 1,000" in result.answer
