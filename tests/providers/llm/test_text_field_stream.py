"""The incremental scanner that turns streamed JSON deltas into the answer's prose."""

from __future__ import annotations

import json

import pytest

from shared.jobs.contracts import AnswerResult
from shared.jobs.plan import Plan, SqlDraft
from shared.providers.llm.openai_stream import JsonTextFieldStream, stream_field

TRICKY = {
    "citations": [{"source_id": "a#1", "answer": "not this one", "kind": "document"}],
    "note": "answer",
    "answer": 'Line one\nLine "two" \\ done \u00e9\u20ac \U0001f600 end',
    "after": "not streamed",
}


def _scan(raw: str, size: int, field: str = "answer") -> list[str]:
    out: list[str] = []
    stream = JsonTextFieldStream(field, out.append)
    for i in range(0, len(raw), size):
        stream.feed(raw[i : i + size])
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 10_000])
@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped-unicode", "raw-unicode"])
def test_only_the_top_level_field_is_streamed_whatever_the_chunking(size: int, ensure_ascii: bool) -> None:
    raw = json.dumps(TRICKY, ensure_ascii=ensure_ascii, indent=1 if size % 2 else None)
    out = _scan(raw, size)
    assert "".join(out) == TRICKY["answer"]
    assert all(out)  # no empty deltas


def test_no_field_no_text_and_code_fences_are_ignored() -> None:
    assert _scan(json.dumps({"other": "x"}), 3) == []
    assert "".join(_scan('```json\n{"answer": "hi"}\n```', 4)) == "hi"
    assert _scan('{"answer": 42}', 2) == []


def test_streamed_field_per_output_type() -> None:
    assert stream_field(AnswerResult) == "answer"
    assert stream_field(SqlDraft) == "sql"
    assert stream_field(Plan) is None
