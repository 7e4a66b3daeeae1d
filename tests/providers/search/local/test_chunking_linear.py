"""Chunking is linear in the input: pathological documents finish, and the fast paths match the simple ones.

The 800 KB cases run under a pytest-timeout hang guard (quadratic code took tens of minutes on them),
not a speed target; timings live in ``python -m bench``-style measurements, never in asserts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from shared.ingest.chunking import (
    DEFAULT_MAX_CHARS,
    _hard_split,
    _pack,
    chunk_sections,
    parse_markdown,
    parse_plain,
    split_sentences,
)
from shared.ingest.models import IngestedDocument
from shared.ingest.pipeline import iter_documents

SIZE = 800_000

PATHOLOGICAL = {
    "open brackets": "[" * SIZE,
    "brackets then close": "[" * SIZE + "](u)",
    "link openers": "[a](" * (SIZE // 4),
    "one heading line of hashes": "# a" + "#" * SIZE + "x",
    "heading spaces": "# " + " " * SIZE + "x #",
    "one huge word": "a" * SIZE,
    "one huge line of words": "word " * (SIZE // 5),
    "abbreviations that never end a sentence": "e.g. A " * (SIZE // 7),
    "single-letter initials": "A. " * (SIZE // 3),
    "many headings": "".join(f"## h{i}\n\ntext.\n\n" for i in range(SIZE // 15)),
    "deep heading nesting": "".join(f"{'#' * (1 + i % 6)} h{i}\n" for i in range(SIZE // 6)),
    "nested quotes and lists": "> - " * (SIZE // 4) + "x",
    "emphasis runs": "**a__b" * (SIZE // 6),
    "backticks": "`" * SIZE,
    "rule-like line": "- " * (SIZE // 2) + "x",
    "setext-like underline": "a\n" + "=" * SIZE + "x",
}


@pytest.mark.timeout(60)  # hang guard only
@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_input_is_chunked(name: str) -> None:
    text = PATHOLOGICAL[name]
    for parsed in (parse_markdown(text), parse_plain(text)):
        chunks = chunk_sections(parsed.sections)
        assert all(len(chunk.content) <= DEFAULT_MAX_CHARS for chunk in chunks)
        assert len(chunks) <= len(text) // 5 + 10  # no blow-up in the number of chunks


@pytest.mark.timeout(60)  # hang guard only
def test_800kb_of_brackets_ingests_through_the_whole_pipeline(tmp_path: Path) -> None:
    (tmp_path / "brackets.md").write_text("[" * SIZE, encoding="utf-8")
    (document,) = list(iter_documents(tmp_path))
    assert isinstance(document, IngestedDocument)
    assert sum(len(chunk.content) for chunk in document.chunks) >= SIZE  # nothing dropped


def test_markdown_details_kept_by_the_linear_patterns() -> None:
    parsed = parse_markdown(
        "# Title #\n\n## Part ##  \n\nSee [the guide](http://x/a_(b)) and [[x](u).\n\n### C# ###\n\nBody.\n"
    )
    assert parsed.title == "Title"
    assert [s.heading for s in parsed.sections] == ["Part", "Part > C#"]
    assert parsed.sections[0].paragraphs == ["See the guide and [x."]


def test_long_words_and_abbreviations_split_as_before() -> None:
    assert split_sentences("Use e.g. Cards. Then A. Smith signs. Done.") == [
        "Use e.g. Cards.",
        "Then A. Smith signs.",
        "Done.",
    ]
    word = "x" * 100 + "e.g."  # far longer than any abbreviation: a sentence end
    assert split_sentences(f"{word} Next one.") == [word, "Next one."]
    assert _hard_split("a" * 1500, 700) == ["a" * 700, "a" * 700, "a" * 100]
    assert _hard_split("ab " + "c" * 1400 + " d", 700) == ["ab", "c" * 700, "c" * 700, "d"]


def _reference_pack(units: list[tuple[int, str]], max_chars: int, overlap_chars: int) -> list[str]:
    """The original packer: re-renders the candidate chunk for every decision (quadratic, obviously right)."""

    def render(run: list[tuple[int, str]]) -> str:
        out = ""
        for idx, (p_no, sentence) in enumerate(run):
            if idx:
                out += "\n" if p_no != run[idx - 1][0] else " "
            out += sentence
        return out

    chunks: list[str] = []
    current: list[tuple[int, str]] = []
    fresh = 0
    for unit in units:
        if current and fresh and len(render([*current, unit])) > max_chars:
            chunks.append(render(current))
            overlap: list[tuple[int, str]] = []
            for prev in reversed(current):
                if len(render([prev, *overlap, unit])) > max_chars or len(render([prev, *overlap])) > overlap_chars:
                    break
                overlap.insert(0, prev)
            current, fresh = overlap, 0
        current.append(unit)
        fresh += 1
    if current and fresh:
        chunks.append(render(current))
    return chunks


@pytest.mark.parametrize("seed", range(20))
def test_packer_matches_the_reference(seed: int) -> None:
    rnd = random.Random(seed)
    max_chars = rnd.choice([50, 80, 200, 700])
    overlap = rnd.randrange(0, max_chars // 2)
    units = [(rnd.randrange(0, 4) + i // 7, "x" * rnd.randint(1, max_chars)) for i in range(300)]
    units.sort(key=lambda unit: unit[0])
    assert _pack(units, max_chars, overlap) == _reference_pack(units, max_chars, overlap)
