"""Issue 9 §1: "not found" when it is not found; cite only passages that support the answer."""

from __future__ import annotations

import pytest

from shared.jobs.contracts import Chunk, SqlResult
from shared.providers.llm.offline.answers import DOCS_NOT_RELEVANT, compose_answer_offline
from shared.providers.llm.offline.passages import coverage, key_terms
from shared.providers.search.local import LocalIndex

UNCOVERED = [
    ("What's the weather in Paris tomorrow?", ["Paris", "tomorrow"]),
    ("What is the parental leave policy?", ["parental"]),
    ("What was the profit margin on Books?", ["profit", "margin"]),
    ("Does the company offer pet insurance?", ["pet", "insurance"]),
    ("How many website visitors did we have in Q3?", ["visitors"]),  # "website" is in the privacy policy
]


@pytest.mark.parametrize(("question", "missing"), UNCOVERED)
def test_a_question_the_documents_do_not_cover_says_so_and_cites_nothing(
    corpus: LocalIndex, question: str, missing: list[str]
) -> None:
    chunks = corpus.search(question, top_k=5)
    assert chunks, "retrieval always finds something that shares a word: that is the trap"
    result = compose_answer_offline(question, chunks, [])
    assert result.answer.startswith(DOCS_NOT_RELEVANT)
    assert result.citations == []
    for word in missing:
        assert f"“{word}”" in result.answer


@pytest.mark.parametrize(
    ("question", "fact", "doc"),
    [
        ("How long is the warranty on furniture?", "2-year warranty", "policies/warranty.md"),
        ("Do you take checks for online orders?", "do not accept checks", "faq/customer-faq.md"),
        ("Who is the regional manager of the South region?", "Luis Ferreira", "operations/regional-operations"),
    ],
)
def test_covered_questions_are_still_answered(corpus: LocalIndex, question: str, fact: str, doc: str) -> None:
    result = compose_answer_offline(question, corpus.search(question, top_k=5), [])
    assert fact in result.answer
    assert any(c.source_id.startswith(doc) for c in result.citations)


def test_every_cited_chunk_holds_most_of_the_question(corpus: LocalIndex) -> None:
    question = "Can store credit be used to buy a gift card?"
    chunks = corpus.search(question, top_k=5)
    result = compose_answer_offline(question, chunks, [])
    by_id = {c.source_id: c for c in chunks}
    shares = dict(zip([c.source_id for c in chunks], coverage(question, chunks).per_chunk, strict=True))
    assert result.citations
    for citation in result.citations:
        assert shares[citation.source_id] >= 0.5
        assert citation.quote and citation.quote in by_id[citation.source_id].content


def test_a_part_nothing_answers_is_named_and_the_rest_is_answered(corpus: LocalIndex) -> None:
    question = "How many points do Gold members earn per dollar, and what is the weather in Paris?"
    result = compose_answer_offline(question, corpus.search(question, top_k=5), [])
    assert "1.5 points" in result.answer
    assert "do not answer “what is the weather in Paris”" in result.answer
    assert "“Paris”" in result.answer
    assert all("loyalty" in c.source_id for c in result.citations)


def test_a_part_the_data_answers_is_left_to_the_data(corpus: LocalIndex) -> None:
    question = "How many returns did the West have in Q3, and why did they rise?"
    sql = SqlResult(
        question="How many returns did the West have in Q3",
        sql="SELECT COUNT(*) AS return_count FROM returns",
        dialect="sqlite",
        columns=["return_count"],
        rows=[[101]],
        row_count=1,
        source_id="sql:s1",
    )
    query = "How many returns did the West have in Q3 why did they rise"
    result = compose_answer_offline(question, corpus.search(query, top_k=5), [sql])
    assert "return count: 101" in result.answer
    # The "why" part carries the part before it, so it finds the reason, not any sentence with "rise".
    assert "faulty supplier batch" in result.answer
    assert "do not answer" not in result.answer


def test_a_data_part_without_a_result_is_reported_as_not_found() -> None:
    chunks = [Chunk(source_id="g.md#1", title="Gift cards", content="Gift cards never expire and carry no fees.")]
    question = "Do gift cards expire, and what was the profit margin in March?"
    result = compose_answer_offline(question, chunks, [])
    assert "never expire" in result.answer
    assert "do not answer “what was the profit margin in March”" in result.answer


def test_key_terms_drop_question_words() -> None:
    assert list(key_terms("What happens when a product is recalled?").values()) == ["product", "recalled"]
    assert coverage("", []).best == 0.0
