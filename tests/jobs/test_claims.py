"""The claim checker: figures against cells (value, sum, difference, ratio, percent change, count), quotes in spans."""

from __future__ import annotations

from typing import Any

import pytest

from shared.jobs.claims import Claim, ClaimSource, Evidence, check_claim, check_claims, parse_figure, summarize

POLICY = (
    "Returns are accepted within 30 days of delivery. Refunds after 30 days are issued as store credit only. "
    "Items must be unused."
)
SOURCES = {
    "sql:sales": ClaimSource(
        source_id="sql:sales",
        kind="sql",
        columns=["region", "return_count", "revenue", "return_rate"],
        rows=[["North", 120, 15234.5, 0.0594], ["South", 80, 9000, 0.031], ["West", 40, 1000.0, 0.5]],
        row_count=3,
    ),
    "policy#1": ClaimSource(source_id="policy#1", kind="document", content=POLICY),
}
FORMATS = {"revenue": "currency", "return_rate": "ratio", "return_count": "count"}


def cell(row: int, column: str, role: str = "operand") -> Evidence:
    return Evidence(source_id="sql:sales", row=row, column=column, role=role)  # type: ignore[arg-type]


def check(**claim: Any) -> tuple[str, str]:
    result = check_claim(Claim(**claim), SOURCES, FORMATS)
    return result.status, result.reason


def test_a_figure_equal_to_its_cell_is_verified_in_the_catalog_format() -> None:
    status, reason = check(
        text="North had the most returns (120).",
        figure="120",
        evidence=[cell(0, "return_count"), cell(0, "region", "label")],
    )
    assert status == "verified", reason
    assert check(text="Revenue was $15,234.50.", figure="$15,234.50", evidence=[cell(0, "revenue")])[0] == "verified"
    # A ratio column is written as a percentage, to the precision written.
    assert check(text="A rate of 5.94%.", figure="5.94%", evidence=[cell(0, "return_rate")])[0] == "verified"
    assert check(text="A rate of 6%.", figure="6%", evidence=[cell(0, "return_rate")])[0] == "verified"


def test_a_wrong_figure_is_unsupported_with_the_right_value_in_the_reason() -> None:
    status, reason = check(text="North had 130 returns.", figure="130", evidence=[cell(0, "return_count")])
    assert status == "unsupported" and "120" in reason
    status, reason = check(text="A rate of 5.9%.", figure="5.9%", evidence=[cell(0, "return_rate")])
    assert status == "verified", reason  # 5.94 rounds to 5.9 at one decimal
    assert check(text="A rate of 6.1%.", figure="6.1%", evidence=[cell(0, "return_rate")])[0] == "unsupported"
    # A count written as a percentage is not a share.
    assert check(text="120% returns", figure="120%", evidence=[cell(0, "return_count")])[0] == "unsupported"


def test_derived_figures_follow_their_declared_operation() -> None:
    both = [cell(0, "return_count"), cell(1, "return_count")]
    assert check(text="200 returns in all.", figure="200", operation="sum", evidence=both)[0] == "verified"
    assert check(text="40 more in North.", figure="40", operation="difference", evidence=both)[0] == "verified"
    assert check(text="North had 1.5 times South.", figure="1.5", operation="ratio", evidence=both)[0] == "verified"
    assert check(text="North had 150% of South.", figure="150%", operation="ratio", evidence=both)[0] == "verified"
    status, reason = check(
        text="Down 33.3% from North to South.", figure="-33.3%", operation="percent_change", evidence=both
    )
    assert status == "verified", reason
    assert check(text="Down 30%.", figure="-30%", operation="percent_change", evidence=both)[0] == "unsupported"
    # Without a declared operation, two different cells are not one figure.
    assert check(text="200 returns.", figure="200", evidence=both)[0] == "unsupported"


def test_a_count_of_rows_needs_the_whole_result() -> None:
    whole = [Evidence(source_id="sql:sales")]
    assert check(text="Across 3 regions.", figure="3", operation="count", evidence=whole)[0] == "verified"
    assert check(text="Across 4 regions.", figure="4", operation="count", evidence=whole)[0] == "unsupported"
    partial = dict(SOURCES, **{"sql:sales": SOURCES["sql:sales"].model_copy(update={"row_count": 50})})
    result = check_claim(Claim(text="3 regions", figure="3", operation="count", evidence=whole), partial, FORMATS)
    assert result.status == "unsupported" and "part" in result.reason


def test_a_label_the_claim_does_not_name_is_a_misattribution() -> None:
    status, reason = check(
        text="South had the most returns (120).",
        figure="120",
        evidence=[cell(0, "return_count"), cell(0, "region", "label")],
    )
    assert status == "unsupported" and "North" in reason


def test_quotes_must_be_in_the_cited_span() -> None:
    start = POLICY.index("Refunds")
    end = POLICY.index("only.") + len("only.")
    span = Evidence(source_id="policy#1", start=start, end=end)
    assert check(text="Refunds after 30 days are issued as store credit only.", evidence=[span])[0] == "verified"
    status, reason = check(text="“refunds after 30 DAYS are issued as  store credit only”", evidence=[span])
    assert status == "verified" and "normalised" in reason
    status, reason = check(text="Store credit only is issued for refunds after 30 days.", evidence=[span])
    assert status == "verified" and "paraphrase" in reason
    # The right words, the wrong span: the claim is not in the characters cited.
    wrong = Evidence(source_id="policy#1", start=0, end=start)
    status, reason = check(text="Refunds after 30 days are issued as store credit only.", evidence=[wrong])
    assert status == "unsupported" and "store" in reason
    assert check(text="Refunds after 30 days are paid in cash.", evidence=[span])[0] == "unsupported"
    out_of_range = Evidence(source_id="policy#1", start=0, end=len(POLICY) + 5)
    assert check(text="Items must be unused.", evidence=[out_of_range])[0] == "unsupported"


def test_a_figure_from_a_passage_must_be_written_in_it() -> None:
    span = [Evidence(source_id="policy#1", start=0, end=POLICY.index("delivery.") + 9)]
    assert check(text="Returns are accepted within 30 days.", figure="30", evidence=span)[0] == "verified"
    assert check(text="Returns are accepted within 60 days.", figure="60", evidence=span)[0] == "unsupported"


def test_no_evidence_or_evidence_pointing_nowhere_is_unsupported() -> None:
    assert check(text="Sales grew.", evidence=[]) == ("unsupported", "no evidence is cited for this claim")
    assert check(text="120", figure="120", evidence=[Evidence(source_id="sql:other", row=0, column="x")])[0] == (
        "unsupported"
    )
    assert check(text="120", figure="120", evidence=[cell(7, "return_count")])[0] == "unsupported"
    assert check(text="120", figure="120", evidence=[cell(-1, "return_count")])[0] == "unsupported"
    backwards = Evidence(source_id="policy#1", start=-5, end=10)
    assert check(text="Returns are", evidence=[backwards])[0] == "unsupported"
    assert check(text="120", figure="120", evidence=[cell(0, "returns")])[0] == "unsupported"


def test_a_sentence_about_cells_without_a_figure_is_not_checkable() -> None:
    assert check(text="North leads.", evidence=[cell(0, "region")])[0] == "not_checkable"
    assert check(text="West leads.", evidence=[cell(0, "region")])[0] == "unsupported"


def test_check_claims_replaces_a_writers_verdict_and_summarizes() -> None:
    claims = [
        Claim(text="120", figure="120", evidence=[cell(0, "return_count")]),
        Claim.model_validate({"text": "999", "figure": "999", "evidence": [], "check": {"status": "verified"}}),
    ]
    checked = check_claims(claims, list(SOURCES.values()), FORMATS)
    assert [c.check.status for c in checked] == ["verified", "unsupported"]
    summary = summarize(checked)
    assert summary.text == "verified 1 of 2; 1 unsupported" and summary.unsupported == 1


@pytest.mark.parametrize(
    ("written", "number", "percent"),
    [("$1,234.50", 1234.5, False), ("12.5%", 12.5, True), ("3.2 million", 3.2e6, False), ("-4", -4.0, False)],
)
def test_parse_figure(written: str, number: float, percent: bool) -> None:
    parsed = parse_figure(written)
    assert parsed is not None and parsed.number == pytest.approx(number) and parsed.percent is percent
    assert parse_figure("North") is None


def test_no_claims_is_summarised_as_nothing_checked() -> None:
    from shared.jobs.claims import NO_CLAIMS, summarize

    summary = summarize([])
    assert (summary.total, summary.verified, summary.text) == (0, 0, NO_CLAIMS)
