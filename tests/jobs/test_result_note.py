"""What the answer step is told of a run_python result: prose within the note's 300 characters, never JSON cut."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrators.run.code import NOTE_CHARS, result_note

GROWTH: dict[str, Any] = {
    "column": "revenue",
    "first": 68317.0,
    "last": 175324.0,
    "growth_rate": 1.56633,
    "average_growth_per_period": 0.089457,
    "periods": 11,
    "period_changes": [-0.137931, 0.487435, -0.306355, 0.401998, 0.198929, -0.00653, 0.048447, -0.251845],
    "by_region": {"North": 0.1, "South": 0.2, "East": 0.3, "West": 0.4, "Central": 0.5},
}


@pytest.mark.parametrize("title", ["Growth", "Compute the growth rate of revenue by month in 2025 and chart it " * 3])
def test_a_result_is_told_in_whole_values_within_the_note(title: str) -> None:
    note = result_note(title, {"result": GROWTH, "files": [{"name": "chart.png"}]})
    assert len(note) <= NOTE_CHARS
    assert "{" not in note and '"' not in note  # no JSON object, whole or cut
    assert "column = 'revenue'" in note and "growth_rate = 1.56633" in note
    assert note.endswith("It made the file(s) chart.png.")


def test_nested_values_are_named_by_size_and_a_long_result_says_how_much_is_left_out() -> None:
    note = result_note("Growth", {"result": GROWTH})
    assert "period_changes (a list of 8 values)" in note
    assert "by_region (a table of 5 entries: North, South, East, West, …)" in note
    wide = {f"value_{i}": i for i in range(80)}
    cut = result_note("Wide", {"result": wide})
    assert len(cut) <= NOTE_CHARS and "more value(s)" in cut and "value_0 = 0" in cut


def test_a_plain_value_is_a_sentence() -> None:
    assert result_note("Count", {"result": 3}) == "The step 'Count' computed with Python: result = 3."
