"""Claims with evidence, and the mechanical checker that verifies them (never a model).

An answer lists its claims: a figure or a sentence, each with the evidence it rests on, either SQL result
cells (a source, a row, a column) or a passage span (a document chunk and a character range). The checker
reads only the sources the answer was written from:

- A claim without evidence, or whose evidence points at nothing (an unknown source, a row or a column the
  result does not have, a range outside the passage), is ``unsupported``.
- A figure must equal what its declared operation gives over the cited operand cells: ``value`` (the cell
  itself), ``sum``, ``difference`` (first minus second), ``ratio`` (first over second), ``percent_change``
  (from the first to the second, in percent) or ``count`` (the cited rows, or the whole result's rows when
  the evidence names no row). The written figure is compared with the precision it is written in ("12.5%"
  is right for anything that rounds to it) and in the catalog's formats: a ``ratio`` column is written as a
  percentage. Label cells (``role="label"``) must be named in the claim's text.
- A figure from a passage must be written in the cited span.
- A quote or paraphrase must be contained in its cited span: exactly, after normalising case, accents,
  quotes and spaces, or (a paraphrase) with every content word of the claim in the span.
- A sentence about cells with no figure ("North had the most returns") is ``not_checkable``: the cells are
  checked to be named in it, the comparison is not.

It is pure (no I/O, no clock), so it can run anywhere: in the answer activity, in a benchmark, in a test.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Operation = Literal["value", "sum", "difference", "ratio", "percent_change", "count"]
CheckStatus = Literal["verified", "unsupported", "not_checkable"]
MAX_CLAIMS = 40
MAX_EVIDENCE = 12


class Evidence(BaseModel):
    """What a claim rests on: SQL result cells (``row``, ``column``) or a passage span (``start``, ``end``)."""

    model_config = ConfigDict(extra="ignore")

    source_id: str
    # SQL cells: the row (0-based, in the order given) and the column name; no row = the whole result.
    # No bounds here: a writer's bad offset makes its claim unsupported, never the whole answer invalid.
    row: int | None = None
    column: str | None = None
    # An operand feeds the figure's operation; a label must be named in the claim (the region, the quarter).
    role: Literal["operand", "label"] = "operand"
    # Passage spans: character offsets into the chunk's content; none = the whole chunk.
    start: int | None = None
    end: int | None = None


class ClaimCheck(BaseModel):
    """The checker's verdict on one claim, and why."""

    status: CheckStatus
    reason: str


class Claim(BaseModel):
    """One statement of the answer: a sentence or a figure, with its evidence (as the writer gives it)."""

    model_config = ConfigDict(extra="ignore")

    text: str
    # The figure as written in the text ("$12,345.00", "12.5%"), when the claim states one.
    figure: str | None = None
    operation: Operation = "value"
    evidence: list[Evidence] = Field(default_factory=list)

    @field_validator("evidence")
    @classmethod
    def _bounded(cls, evidence: list[Evidence]) -> list[Evidence]:
        # A writer's long list is cut, not refused: the answer must not fail over its evidence.
        return evidence[:MAX_EVIDENCE]


class CheckedClaim(Claim):
    """A claim with the checker's verdict (set only by ``check_claims``, never taken from a writer)."""

    check: ClaimCheck


class ClaimSource(BaseModel):
    """A source as the checker sees it: a passage's content, or a SQL result's columns and rows."""

    model_config = ConfigDict(extra="ignore")

    source_id: str
    kind: Literal["document", "sql"]
    content: str = ""
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int | None = None
    truncated: bool = False


class ClaimsSummary(BaseModel):
    """How many claims the checker verified, of how many, and which were not."""

    verified: int
    total: int
    unsupported: int
    not_checkable: int
    text: str


class _Fail(Exception):
    """A claim that fails its check: the message is the reason."""


# --- normalising ---------------------------------------------------------------------------------

_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "«": '"', "»": '"', "–": "-", "—": "-"})
_WORD = re.compile(r"[^\W_]+(?:[.,]\d+)*", re.UNICODE)
_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being it its this that
    these those there their they them we our you your he she his her i not no do does did has have had can could
    will would shall should may might must than then so such also which who whom whose what when where why how
    all any each every some""".split()
)


def normalise(text: str) -> str:
    """Text for comparison: NFKC, accents and case folded, typographic quotes plain, spaces collapsed."""
    folded = unicodedata.normalize("NFKD", text.translate(_QUOTES))
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch)).casefold()
    plain = re.sub(r"[\"'`*_\[\]()]", "", plain)
    return " ".join(plain.split()).strip(" .;:,")


def _stem(word: str) -> str:
    w = word.casefold()
    if len(w) <= 3 or w[0].isdigit():
        return w
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w


def _content_words(text: str) -> list[str]:
    words = [w.casefold() for w in _WORD.findall(normalise(text))]
    return [_stem(w) for w in words if w not in _STOP]


# --- figures -------------------------------------------------------------------------------------

_FIGURE = re.compile(
    r"^(?P<sign>[-−])?\s*(?P<cur>[$€£])?\s*(?P<sign2>[-−])?(?P<num>\d[\d,]*(?:\.\d+)?|\.\d+)\s*"
    r"(?P<unit>%|percent|k|thousand|m|million|bn|billion)?$",
    re.IGNORECASE,
)
_SCALE = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}


class Written(BaseModel):
    """A figure as written: its number, whether it is a percentage, and half a unit of its last digit."""

    number: float
    percent: bool
    tolerance: float


def parse_figure(figure: str) -> Written | None:
    """The number a written figure states ("$1,234.50", "12.5%", "3.2 million"), or None if it is not one."""
    match = _FIGURE.match(figure.strip())
    if match is None:
        return None
    raw = match["num"].replace(",", "")
    decimals = len(raw.split(".")[1]) if "." in raw else 0
    unit = (match["unit"] or "").casefold()
    scale = _SCALE.get(unit, 1.0)
    sign = -1.0 if (match["sign"] or match["sign2"]) else 1.0
    return Written(
        number=sign * float(raw) * scale,
        percent=unit in ("%", "percent"),
        tolerance=0.5 * 10.0**-decimals * scale + 1e-9,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        written = parse_figure(value)
        return written.number if written and not written.percent else None
    return None


def _cell_text(value: Any) -> list[str]:
    """The ways a label cell may be written in a claim (as stored, and a number with thousands separators)."""
    forms = [str(value)]
    number = _number(value)
    if number is not None and number.is_integer():
        forms.append(f"{int(number):,}")
    return forms


# --- the checker ---------------------------------------------------------------------------------


class _Cells:
    """The cells a claim cites, resolved against its sources."""

    def __init__(self, evidence: Sequence[Evidence], sources: Mapping[str, ClaimSource]) -> None:
        self.operands: list[tuple[Evidence, ClaimSource, Any]] = []
        self.labels: list[Any] = []
        self.whole: list[ClaimSource] = []
        for ev in evidence:
            source = sources.get(ev.source_id)
            if source is None:
                raise _Fail(f"cites {ev.source_id!r}, which is not one of the answer's sources")
            if source.kind != "sql":
                raise _Fail(f"cites cells of {ev.source_id!r}, a passage, not a SQL result")
            if ev.row is None:
                self.whole.append(source)
                continue
            if not 0 <= ev.row < len(source.rows):
                raise _Fail(f"cites row {ev.row} of {ev.source_id!r}, which has {len(source.rows)} rows")
            if ev.column is None or ev.column not in source.columns:
                raise _Fail(f"cites column {ev.column!r} of {ev.source_id!r}, which has {source.columns}")
            index = source.columns.index(ev.column)
            row = source.rows[ev.row]
            value = row[index] if index < len(row) else None
            if ev.role == "label":
                self.labels.append(value)
            else:
                self.operands.append((ev, source, value))


def _expected(claim: Claim, cells: _Cells, formats: Mapping[str, str]) -> tuple[float, bool]:
    """The figure the cited cells give by the claim's operation, and whether it is a share (written as a %)."""
    op = claim.operation
    if op == "count":
        if cells.whole:
            source = cells.whole[0]
            if source.truncated or (source.row_count is not None and source.row_count > len(source.rows)):
                raise _Fail(f"counts the rows of {source.source_id!r}, but only part of its result is in hand")
            return float(source.row_count if source.row_count is not None else len(source.rows)), False
        rows = {(ev.source_id, ev.row) for ev, _, _ in cells.operands}
        if not rows:
            raise _Fail("a count cites no rows")
        return float(len(rows)), False
    values: list[float] = []
    shares: list[bool] = []
    for ev, _source, value in cells.operands:
        number = _number(value)
        if number is None:
            raise _Fail(f"cites {ev.source_id!r} row {ev.row} column {ev.column!r}, which holds no number ({value!r})")
        values.append(number)
        shares.append(formats.get(ev.column or "") == "ratio")
    if not values:
        raise _Fail("cites no cell holding a number")
    share = all(shares)
    if op == "value":
        if len(set(values)) != 1:
            raise _Fail(f"states one value but cites {len(values)} different cells; declare the operation")
        return values[0], share
    if op == "sum":
        return math.fsum(values), share
    if len(values) != 2:
        raise _Fail(f"{op.replace('_', ' ')} needs exactly two cells, cites {len(values)}")
    first, second = values
    if op == "difference":
        return first - second, share
    if (second == 0 and op == "ratio") or (first == 0 and op == "percent_change"):
        raise _Fail(f"{op.replace('_', ' ')} divides by zero")
    if op == "ratio":
        return first / second, True
    return (second - first) / abs(first) * 100.0, False  # percent_change is in percent already


def _check_figure_in_cells(claim: Claim, sources: Mapping[str, ClaimSource], formats: Mapping[str, str]) -> str:
    figure = claim.figure or ""
    written = parse_figure(figure)
    if written is None:
        raise _Fail(f"the figure {figure!r} is not a number")
    cells = _Cells(claim.evidence, sources)
    expected, share = _expected(claim, cells, formats)
    # A share (a ratio column, a ratio) is written as a percentage; a percent change is in percent already.
    shown = expected * 100.0 if share and written.percent else expected
    if written.percent and not share and claim.operation != "percent_change":
        raise _Fail(f"writes {figure} as a percentage, but the cells are not a share")
    if abs(shown - written.number) > written.tolerance:
        op = claim.operation.replace("_", " ")
        raise _Fail(f"{figure} does not match the {op} of the cited cells ({_fmt(shown)})")
    text = normalise(claim.text)
    missing = [v for v in cells.labels if not any(normalise(f) in text for f in _cell_text(v))]
    if missing:
        raise _Fail(f"names the row by cells it does not mention: {missing}")
    how = "the cited cell" if claim.operation == "value" else f"the {claim.operation.replace('_', ' ')} of the cells"
    return f"{figure} equals {how} ({_fmt(shown)})"


def _fmt(value: float) -> str:
    return f"{value:,.4f}".rstrip("0").rstrip(".")


def _span(ev: Evidence, sources: Mapping[str, ClaimSource]) -> str:
    source = sources.get(ev.source_id)
    if source is None:
        raise _Fail(f"cites {ev.source_id!r}, which is not one of the answer's sources")
    if source.kind != "document":
        raise _Fail(f"cites a span of {ev.source_id!r}, a SQL result, not a passage")
    start = ev.start or 0
    end = len(source.content) if ev.end is None else ev.end
    if start < 0 or end > len(source.content) or start >= end:
        raise _Fail(f"cites characters {start}-{end} of {ev.source_id!r}, which has {len(source.content)}")
    return source.content[start:end]


def _check_text_in_spans(claim: Claim, sources: Mapping[str, ClaimSource]) -> str:
    spans = [_span(ev, sources) for ev in claim.evidence]
    joined = " ".join(spans)
    if claim.figure is not None:
        written = parse_figure(claim.figure)
        if normalise(claim.figure) not in normalise(joined) and not (
            written and any(_close(written, n) for n in _numbers_in(joined))
        ):
            raise _Fail(f"the figure {claim.figure} is not in the cited passage")
    if claim.text in joined:
        return "the exact words are in the cited passage"
    if normalise(claim.text) in normalise(joined):
        return "the words are in the cited passage (normalised match)"
    words = _content_words(claim.text)
    have = set(_content_words(joined))
    missing = [w for w in dict.fromkeys(words) if w not in have]
    if words and not missing:
        return f"a paraphrase: all {len(set(words))} content words are in the cited passage"
    absent = ", ".join(missing[:6]) or "the claim has no words"
    raise _Fail(f"the cited passage does not contain it (missing: {absent})")


def _numbers_in(text: str) -> list[Written]:
    out = []
    for token in re.findall(r"[$€£]?\d[\d,]*(?:\.\d+)?%?", text):
        written = parse_figure(token.rstrip(",."))
        if written is not None:
            out.append(written)
    return out


def _close(a: Written, b: Written) -> bool:
    return a.percent == b.percent and abs(a.number - b.number) <= max(a.tolerance, b.tolerance)


def check_claim(
    claim: Claim, sources: Mapping[str, ClaimSource], formats: Mapping[str, str] | None = None
) -> ClaimCheck:
    """Check one claim against the sources it cites (see the module docstring for the rules)."""
    if not claim.evidence:
        return ClaimCheck(status="unsupported", reason="no evidence is cited for this claim")
    kinds = {sources[ev.source_id].kind for ev in claim.evidence if ev.source_id in sources}
    try:
        if kinds == {"document"}:
            return ClaimCheck(status="verified", reason=_check_text_in_spans(claim, sources))
        if claim.figure is not None:
            return ClaimCheck(status="verified", reason=_check_figure_in_cells(claim, sources, formats or {}))
        cells = _Cells(claim.evidence, sources)
        text = normalise(claim.text)
        named = [v for _, _, v in cells.operands] + cells.labels
        missing = [v for v in named if not any(normalise(f) in text for f in _cell_text(v))]
        if missing:
            raise _Fail(f"cites cells it does not mention: {missing}")
        return ClaimCheck(
            status="not_checkable",
            reason="a statement about the cited cells without a figure: the cells are named, the rest is not checked",
        )
    except _Fail as fail:
        return ClaimCheck(status="unsupported", reason=str(fail))


def check_claims(
    claims: Sequence[Claim], sources: Sequence[ClaimSource], formats: Mapping[str, str] | None = None
) -> list[CheckedClaim]:
    """Each claim with the checker's verdict (at most ``MAX_CLAIMS``)."""
    by_id = {s.source_id: s for s in sources}
    return [
        CheckedClaim(**Claim.model_validate(c.model_dump()).model_dump(), check=check_claim(c, by_id, formats))
        for c in claims[:MAX_CLAIMS]
    ]


NO_CLAIMS = "no claims: nothing in this answer is checked against a source"


def summarize(claims: Sequence[CheckedClaim]) -> ClaimsSummary:
    """``verified 5 of 6``, with the counts of unsupported and uncheckable claims."""
    status = [c.check.status for c in claims]
    verified, unsupported = status.count("verified"), status.count("unsupported")
    uncheckable = status.count("not_checkable")
    if not claims:
        # Text with no claims is not shown as checked: the summary says that nothing in it was.
        return ClaimsSummary(verified=0, total=0, unsupported=0, not_checkable=0, text=NO_CLAIMS)
    text = f"verified {verified} of {len(claims)}"
    if unsupported:
        text += f"; {unsupported} unsupported"
    if uncheckable:
        text += f"; {uncheckable} not checkable"
    return ClaimsSummary(
        verified=verified, total=len(claims), unsupported=unsupported, not_checkable=uncheckable, text=text
    )
