"""The offline answer writer: extractive sentences with the right citations, SQL summaries, empty inputs."""

from __future__ import annotations

import re

import pytest

from shared.jobs.contracts import Chunk, SqlResult
from shared.jobs.tokens import estimate_tokens
from shared.providers.llm.offline.answers import DOCS_NOT_RELEVANT, NOTHING_FOUND, compose_answer_offline
from shared.providers.llm.offline.sql_summary import format_value, sql_table, summarize_sql
from shared.providers.search.local import LocalIndex

_CITED = re.compile(r"^- (.*) \[([^\]]+)\]$")


def _returns_by_region(**overrides: object) -> SqlResult:
    fields: dict[str, object] = {
        "question": "Returns by region in Q3 2025",
        "sql": "SELECT region, quarter, COUNT(*) AS returns\nFROM returns GROUP BY region, quarter",
        "dialect": "sqlite",
        "columns": ["region", "quarter", "returns"],
        "rows": [
            ["North", "2025-Q3", 301],
            ["South", "2025-Q3", 288],
            ["East", "2025-Q3", 356],
            ["West", "2025-Q3", 412],
        ],
        "row_count": 4,
        "source_id": "sql:returns-by-region",
    }
    fields.update(overrides)
    return SqlResult.model_validate(fields)


@pytest.mark.parametrize(
    ("question", "source_prefix", "words"),
    [
        (
            "What does the returns policy say about refunds after 30 days?",
            "policies/returns-and-refunds.md#",
            "31 to 60 days after delivery are accepted for store credit only",
        ),
        ("My sofa arrived broken, what should I do?", "faq/customer-faq.md#", "within 48 hours"),
        ("How much is the late charge on corporate invoices?", "business/corporate-account-terms.pdf#", "1.5%"),
        ("Do gift cards expire?", "policies/gift-cards-and-store-credit.txt#", "never expire"),
        ("How long do you keep order records?", "policies/customer-data-privacy.md#", "7 years"),
    ],
)
def test_answers_quote_and_cite_the_right_passage(
    corpus_index: LocalIndex, question: str, source_prefix: str, words: str
) -> None:
    chunks = corpus_index.search(question, top_k=5)
    result = compose_answer_offline(question, chunks, [])
    assert words in result.answer
    by_id = {c.source_id: c for c in chunks}
    cited = [c for c in result.citations if c.kind == "document"]
    assert any(c.source_id.startswith(source_prefix) for c in cited)
    # Every cited line is a sentence copied from the chunk it names: nothing is invented.
    lines = [m for line in result.answer.splitlines() if (m := _CITED.match(line))]
    assert lines
    for match in lines:
        sentence, source_id = match.group(1), match.group(2)
        assert source_id in by_id and sentence.rstrip("…") in by_id[source_id].content
        assert source_id in {c.source_id for c in cited}
    for citation in cited:
        assert citation.quote and citation.quote in by_id[citation.source_id].content
        assert citation.title == by_id[citation.source_id].title


def test_sql_summary_names_the_extreme_row_and_cites_the_query() -> None:
    result = compose_answer_offline("Which region had the most returns in Q3 2025?", [], [_returns_by_region()])
    assert result.answer.startswith(
        "From the data: West has the highest returns (412); the lowest is South (288), across 4 rows "
        "(quarter 2025-Q3). [sql:returns-by-region]"
    )
    assert "| West | 2025-Q3 | 412 |" in result.answer
    [citation] = result.citations
    assert citation.kind == "sql" and citation.source_id == "sql:returns-by-region"
    assert citation.quote == "SELECT region, quarter, COUNT(*) AS returns FROM returns GROUP BY region, quarter"
    assert citation.title == "Returns by region in Q3 2025"


def test_sql_summary_follows_the_question_direction_and_ties() -> None:
    fewest = summarize_sql("Which region had the fewest returns?", _returns_by_region())
    assert fewest.startswith("South has the lowest returns (288); the highest is West (412)")
    tie = _returns_by_region(rows=[["North", "Q3", 5], ["West", "Q3", 5]], row_count=2)
    assert summarize_sql("most returns", tie).startswith("North and West share the highest returns (5)")


def test_sql_summary_shapes() -> None:
    assert summarize_sql("q", _returns_by_region(rows=[], row_count=0)) == "The query returned no rows."
    one = _returns_by_region(columns=["total_refunds"], rows=[[12345.5]], row_count=1)
    assert summarize_sql("q", one) == "The query returned one row — total refunds: 12,345.50."
    names = _returns_by_region(columns=["name"], rows=[["a"], ["b"]], row_count=2)
    assert summarize_sql("q", names) == "The query returned 2 rows."
    # Year and id columns are dimensions, never the measure; numeric strings and NULLs are handled.
    by_year = _returns_by_region(
        columns=["customer_id", "year", "refund_amount"],
        rows=[[7, 2025, "10.50"], [8, 2025, None], [9, 2025, "99.00"]],
        row_count=3,
    )
    assert summarize_sql("q", by_year).startswith("customer id 9 has the highest refund amount (99)")
    # A partial result is called partial and no overall highest or lowest is drawn from it.
    capped = summarize_sql("Which region had the most returns?", _returns_by_region(truncated=True))
    assert "showing 4 regions; the query stopped at its row limit" in capped
    assert "has the highest" not in capped and "the lowest is" not in capped


def test_sql_table_is_bounded() -> None:
    many = _returns_by_region(rows=[[f"R{i}", "Q1", i] for i in range(25)], row_count=25)
    table = sql_table(many)
    assert table.count("\n| R") == 10 and table.endswith("… and 15 more rows.")
    wide = _returns_by_region(columns=[f"c{i}" for i in range(12)], rows=[list(range(12))], row_count=1)
    assert sql_table(wide).splitlines()[0].count("|") == 9
    assert format_value(None) == "—" and format_value(1234567) == "1,234,567" and format_value("a|b") == "a\\|b"


def test_sql_without_source_id_gets_a_positional_id() -> None:
    result = compose_answer_offline("q", [], [_returns_by_region(source_id=None), _returns_by_region(source_id=None)])
    assert [c.source_id for c in result.citations] == ["sql-1", "sql-2"]
    assert "From the data (Returns by region in Q3 2025)" in result.answer


def test_data_and_documents_together(corpus_index: LocalIndex) -> None:
    question = "Which region had the most returns in Q3 2025, and what does the policy say about refunds after 30 days?"
    result = compose_answer_offline(question, corpus_index.search(question, top_k=5), [_returns_by_region()])
    assert result.answer.index("From the data") < result.answer.index("From the documents")
    kinds = [c.kind for c in result.citations]
    assert kinds[0] == "sql" and "document" in kinds


def test_nothing_relevant_is_said_plainly() -> None:
    assert compose_answer_offline("Which region had the most returns?", [], []).model_dump() == {
        "answer": NOTHING_FOUND,
        "citations": [],
        "claims": [],
    }
    unrelated = [Chunk(source_id="x.md#1", title="Gardening", content="Tomatoes need full sun and regular water.")]
    result = compose_answer_offline("What is the restocking fee?", unrelated, [])
    assert result.answer.startswith(DOCS_NOT_RELEVANT) and result.citations == []
    assert "“restocking” or “fee”" in result.answer
    assert compose_answer_offline("", unrelated, []).answer == DOCS_NOT_RELEVANT
    empty = [Chunk(source_id="e.md#1", title="", content="")]
    assert compose_answer_offline("restocking fee", empty, []).answer.startswith(DOCS_NOT_RELEVANT)


def test_answers_are_deterministic(corpus_index: LocalIndex) -> None:
    question = "Is there a restocking fee for opened electronics?"
    chunks = corpus_index.search(question, top_k=5)
    first = compose_answer_offline(question, chunks, [_returns_by_region()])
    assert all(compose_answer_offline(question, chunks, [_returns_by_region()]) == first for _ in range(3))


def test_overlapping_chunks_do_not_repeat_sentences() -> None:
    text = "Refunds are paid within 3 business days. Banks take 5 to 10 more days to post refunds."
    chunks = [
        Chunk(source_id="a.md#1", title="Refunds", content=text),
        Chunk(source_id="a.md#2", title="Refunds", content=text.split(". ")[1]),
    ]
    answer = compose_answer_offline("When are refunds paid and posted?", chunks, []).answer
    assert answer.count("Banks take 5 to 10 more days") == 1


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 400) == 100


def test_step_notes_say_what_did_not_run() -> None:
    from shared.providers.llm.offline.answers import compose_answer_offline

    note = "The SQL step 'Returns by region' did not run: the user rejected its query."
    answer = compose_answer_offline("Which region had the most returns?", [], [], step_notes=[note])
    assert answer.answer.startswith(note)
    assert answer.citations == []
    assert compose_answer_offline("Which region had the most returns?", [], []).answer != answer.answer


def test_an_average_is_answered_only_by_a_passage_that_states_one() -> None:
    from shared.providers.llm.offline.answers import compose_answer_offline

    unrelated = Chunk(
        source_id="ops#2",
        title="Regional operations",
        content="Storms delayed deliveries in the North for three days in total.",
    )
    answer = compose_answer_offline("What is the average delivery time in days for the North?", [unrelated], [])
    assert answer.citations == []
    assert "average" in answer.answer

    stated = Chunk(
        source_id="ops#3",
        title="Regional operations",
        content="The average delivery time in the North is 4 days.",
    )
    answer = compose_answer_offline("What is the average delivery time in days for the North?", [stated], [])
    assert [c.source_id for c in answer.citations] == ["ops#3"]
