"""What the answer is told of a run_python step: whole values only, never a JSON text cut mid-object."""

from __future__ import annotations

import json

from orchestrators.python_step import NOTE_CHARS, result_note


def test_a_result_is_told_as_whole_values_and_its_lists_by_their_size() -> None:
    result = {"column": "revenue", "growth_rate": 1.56633, "period_changes": [0.1] * 11, "by": {"a": 1}}
    note = result_note("Chart it", {"result": result, "files": [{"name": "chart.png"}]})
    assert note == (
        "The step 'Chart it' computed (run_python): column = \"revenue\"; growth_rate = 1.56633; "
        "period_changes: a list of 11; by: an object of 1 fields. Files: chart.png."
    )


def test_a_long_result_names_what_does_not_fit_instead_of_cutting_it() -> None:
    result = {f"key{i}": "v" * 40 for i in range(40)}
    note = result_note("Wide", {"result": result})
    assert len(note) < NOTE_CHARS + 100
    assert note.endswith("more fields.")
    told = note.split(": ", 1)[1].rstrip(".").split("; ")[:-1]
    assert all(json.loads(part.split(" = ", 1)[1]) == "v" * 40 for part in told)  # each value whole
    assert result_note("Big", {"result": "x" * 5000}).endswith("a result of 5002 characters.")
