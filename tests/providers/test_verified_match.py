"""Verified queries: a question matches a template, its values become SQL string literals from the allowed list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.providers.sql.verified import Slot, VerifiedQuery, VerifiedQueryIn, match, now, sample_sql

SQL = "SELECT COUNT(*) FROM orders o JOIN regions g ON g.region_id = o.region_id WHERE g.name = {region}"


def query(**extra: object) -> VerifiedQuery:
    fields = {
        "id": "orders-by-region",
        "name": "orders by region",
        "question": "How many orders did the {region} region get?",
        "sql": SQL,
        "variables": {"region": Slot(values=["North", "South"])},
        "approved_at": now(),
        "catalog_version": "abc",
        **extra,
    }
    return VerifiedQuery.model_validate(fields)


def test_a_question_fills_the_slot_with_the_allowed_value() -> None:
    found = match("how many ORDERS did the  south region get", [query()])
    assert found is not None and found.values == {"region": "South"}
    assert found.sql.endswith("WHERE g.name = 'South'")
    assert found.describe()["id"] == "orders-by-region"


@pytest.mark.parametrize(
    "question",
    [
        "How many orders did the Mars region get?",  # not an allowed value
        "How many orders did the x' OR '1'='1 region get?",  # quotes never reach the SQL
        "How many orders did the South region get last year?",  # more than the template
    ],
)
def test_no_match(question: str) -> None:
    assert match(question, [query()]) is None


def test_a_retired_query_is_not_used() -> None:
    assert match("How many orders did the North region get?", [query(retired=True)]) is None


def test_slots_must_agree_and_values_must_be_plain() -> None:
    base = {"id": "x", "name": "x", "question": "Orders in {region}?", "sql": SQL}
    with pytest.raises(ValidationError, match="must be the same"):
        VerifiedQueryIn.model_validate(base | {"variables": {}})
    with pytest.raises(ValidationError, match="letters, digits"):
        VerifiedQueryIn.model_validate(base | {"variables": {"region": {"values": ["a';--"]}}})
    ok = VerifiedQueryIn.model_validate(base | {"variables": {"region": {"values": ["West"]}}})
    assert sample_sql(ok).endswith("= 'West'")


Q3 = "How many returns did the {region} region have in Q3?"


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("In Q3, how many returns did the West region have?", "West"),
        ("Returns in the north region in Q3: how many?", "North"),
        ("How many returns did the Q3 region have in South?", "South"),  # the same words: a reading, not meaning
        ("How many returns did the South region have in Q2?", None),  # another quarter
        ("How many refunds did the South region have in Q3?", None),  # another measure
        ("How many returns did the South and North regions have in Q3?", None),  # two values for one slot
    ],
)
def test_a_paraphrase_matches_only_with_the_same_words(question: str, value: str | None) -> None:
    regions = Slot(values=["North", "South", "East", "West"])
    found = match(question, [query(question=Q3, variables={"region": regions})])
    assert (found.values["region"] if found else None) == value
