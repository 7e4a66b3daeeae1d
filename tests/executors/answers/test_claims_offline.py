"""The offline writer's claims: each figure cites its cells, each quote its span, and the checker verifies them all."""

from __future__ import annotations

from shared.jobs.claims import CheckedClaim, ClaimSource, check_claims, summarize
from shared.jobs.contracts import AnswerResult, Chunk, SqlResult
from shared.providers.llm.offline.answers import compose_answer_offline

POLICY = Chunk(
    source_id="returns-policy.md#2",
    title="Refunds",
    content=(
        "## Refunds\n- Refunds after 30 days are issued as store credit only.\n"
        "- A refund is paid to the original payment method within 5 business days."
    ),
)


def _returns(**extra: object) -> SqlResult:
    rows = [["North", 120, 15234.5, 0.0594], ["South", 80, 9000.0, 0.031], ["West", 40, 1000.0, 0.5]]
    fields = {"row_count": len(rows), **extra}
    return SqlResult(
        question="Returns by region in Q3",
        sql="SELECT region, return_count, revenue, return_rate FROM t",
        dialect="sqlite",
        columns=["region", "return_count", "revenue", "return_rate"],
        rows=rows,
        source_id="sql:sales",
        **fields,  # type: ignore[arg-type]
    )


def _sources(chunks: list[Chunk], results: list[SqlResult]) -> list[ClaimSource]:
    return [ClaimSource(source_id=c.source_id, kind="document", content=c.content) for c in chunks] + [
        ClaimSource(
            source_id=r.source_id or "",
            kind="sql",
            columns=r.columns,
            rows=r.rows,
            row_count=r.row_count,
            truncated=r.truncated,
        )
        for r in results
    ]


def _checked(
    answer: AnswerResult, chunks: list[Chunk], results: list[SqlResult], formats: dict[str, str]
) -> list[CheckedClaim]:
    return check_claims(answer.claims, _sources(chunks, results), formats)


def test_every_claim_of_a_mixed_answer_is_verified() -> None:
    formats = {"return_rate": "ratio", "revenue": "currency"}
    question = "Which region had the highest return rate, and what does the policy say about refunds after 30 days?"
    answer = compose_answer_offline(question, [POLICY], [_returns()], formats)
    checked = _checked(answer, [POLICY], [_returns()], formats)
    assert summarize(checked).text == f"verified {len(checked)} of {len(checked)}", [c.check for c in checked]
    figures = {c.figure for c in checked if c.figure}
    assert "50%" in figures and "3" in figures  # West's 0.5 as a percentage, and the row count
    quotes = [c for c in checked if c.evidence[0].source_id == POLICY.source_id]
    span = quotes[0].evidence[0]
    assert span.start is not None and span.end is not None
    assert POLICY.content[span.start : span.end] == "Refunds after 30 days are issued as store credit only."
    # Each claim's figure appears in the answer text as written.
    assert all(c.figure in answer.answer for c in checked if c.figure)


def test_a_single_row_gives_one_claim_per_number() -> None:
    one = SqlResult(sql="SELECT 1", dialect="sqlite", columns=["total_refunds", "orders"], rows=[[12345.5, 40]])
    one = one.model_copy(update={"source_id": "sql:total", "row_count": 1})
    answer = compose_answer_offline("total refunds", [], [one], {"total_refunds": "currency"})
    checked = _checked(answer, [], [one], {"total_refunds": "currency"})
    assert [(c.figure, c.check.status) for c in checked] == [("$12,345.50", "verified"), ("40", "verified")]


def test_a_partial_result_claims_no_figure() -> None:
    partial = _returns(row_count=116)
    answer = compose_answer_offline("Which region had the most returns?", [], [partial])
    assert answer.claims == []


def test_a_tampered_answer_fails_the_check() -> None:
    counts = _returns().model_copy(
        update={"columns": ["region", "return_count"], "rows": [["North", 120], ["South", 80]]}
    )
    counts = counts.model_copy(update={"row_count": 2})
    answer = compose_answer_offline("Which region had the most returns?", [], [counts])
    assert answer.claims[0].figure == "120"
    wrong = [c.model_copy(update={"figure": "130", "text": c.text.replace("120", "130")}) for c in answer.claims]
    checked = _checked(answer.model_copy(update={"claims": wrong}), [], [counts], {})
    assert checked[0].check.status == "unsupported" and "120" in checked[0].check.reason
