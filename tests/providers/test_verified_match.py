"""Verified queries: a question matches a template, its values become SQL string literals from the allowed list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.providers.sql.paraphrase import Vocabulary, vocabulary
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


def _catalog_vocabulary() -> Vocabulary:
    from shared.providers.sql.catalog import load_catalog

    catalog = load_catalog()
    return vocabulary(catalog.synonyms, [m.name for m in catalog.metrics])


REFUNDS = "What was the total refund amount in the {region} region?"
CHANNEL = "How many orders came in through the {channel} channel?"


@pytest.mark.parametrize(
    ("template", "question", "value"),
    [
        # Synonyms (the catalog's: area, territory, zone; the question table: number of, third quarter).
        (Q3, "Number of returns in the western area during the third quarter?", "West"),
        (Q3, "What is the count of returned items for the North territory in Q3?", "North"),
        (Q3, "Q3: how many returns were recorded in the East zone?", "East"),
        # Inflections and other slot phrasing.
        (REFUNDS, "How much was refunded in the East region?", "East"),
        (REFUNDS, "What's the refund amount of the southern region?", "South"),
        (CHANNEL, "How many orders were placed via the Store channel?", "Store"),
        (CHANNEL, "Number of online orders?", "Online"),
        (CHANNEL, "How many purchases came in through the online channel?", "Online"),
        # Near misses: another question, however close its words.
        (Q3, "How many returns did the West region have in Q3 2025?", None),  # a year added
        (Q3, "How many returns did the West region have in Q3, by channel?", None),  # a breakdown
        (Q3, "How many returns didn't the West region have in Q3?", None),  # negated
        (Q3, "What was the average number of returns in the West region in Q3?", None),  # another aggregate
        (Q3, "How many damaged returns did the West region have in Q3?", None),  # a filter the template lacks
        (Q3, "Which region had the most returns in Q3?", None),  # no value: a ranking
        (Q3, "How many refunds did the South region have in Q3?", None),  # refunds name a metric of their own
        (REFUNDS, "What was the average refund amount in the East region?", None),
        (REFUNDS, "What was the total refund amount in the West region per month?", None),
        (REFUNDS, "What was the total revenue in the West region?", None),
        (CHANNEL, "How many orders did not come in through the Online channel?", None),
        (CHANNEL, "How many orders came in through the Store channel in Q3?", None),
        (CHANNEL, "How many customers ordered through the Store channel?", None),
    ],
)
def test_a_rewording_matches_and_a_near_miss_does_not(template: str, question: str, value: str | None) -> None:
    slot = "channel" if "{channel}" in template else "region"
    values = ["Online", "Store"] if slot == "channel" else ["North", "South", "East", "West"]
    sql = SQL.replace("{region}", "{channel}") if slot == "channel" else SQL
    verified = query(question=template, sql=sql, variables={slot: Slot(values=values)})
    found = match(question, [verified], _catalog_vocabulary())
    assert (found.values[slot] if found else None) == value


def test_a_synonym_naming_a_metric_of_its_own_is_not_collapsed() -> None:
    vocab = vocabulary({"refunds": "returns", "area": "region"}, ["refund_amount", "return_count"])
    assert "refunds" not in vocab.words and vocab.words["area"] == "region"
