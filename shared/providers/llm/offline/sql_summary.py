"""The offline writer's account of SQL rows: formats, partial results, the extreme row, a small table, claims.

See ``shared.providers.llm.offline.answers`` for how an answer is composed from these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.jobs.claims import Claim, Evidence
from shared.jobs.contracts import SqlResult

MAX_TABLE_ROWS = 10


MAX_TABLE_COLUMNS = 8


CURRENCY_SYMBOL = "$"


_LOW_WORDS = re.compile(r"\b(least|lowest|fewest|smallest|minimum|min|bottom|worst|cheapest)\b", re.IGNORECASE)


_DIMENSION_NAME = re.compile(r"(^|_)(id|year|quarter|qtr|month|week|day|date|code|zip|rank)($|_)", re.IGNORECASE)


_NUMERIC_TEXT = re.compile(r"^-?\d+(\.\d+)?$")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMERIC_TEXT.match(value.strip()):
        return float(value)
    return None


def format_value(value: Any, fmt: str | None = None) -> str:
    """Render a cell: thousands separators, two decimals for fractions, ``—`` for NULL; a catalog format if given.

    ``currency`` adds the symbol and always two decimals, ``ratio`` renders a share as a percentage,
    ``count`` a whole number.
    """
    if value is None:
        return "—"
    number = _as_number(value)
    if fmt is not None and number is not None:
        if fmt == "currency":
            sign = "-" if number < 0 else ""
            return f"{sign}{CURRENCY_SYMBOL}{abs(number):,.2f}"
        if fmt == "ratio":
            percent = round(number * 100, 2)
            return f"{percent:,.0f}%" if percent.is_integer() else f"{percent:,.2f}".rstrip("0").rstrip(".") + "%"
        if fmt == "count" and number.is_integer():
            return f"{int(number):,}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    if isinstance(value, str) and _NUMERIC_TEXT.match(value.strip()):
        return format_value(float(value) if "." in value else int(value))
    return str(value).replace("|", "\\|").replace("\n", " ")


def _humanize(column: str) -> str:
    return re.sub(r"[_\s]+", " ", column).strip().lower() or column


def _plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return noun[:-1] + "ies"
    return noun if noun.endswith("s") else noun + "s"


def _columns(result: SqlResult) -> list[str]:
    width = max((len(r) for r in result.rows), default=0)
    cols = list(result.columns[:width])
    return cols + [f"column {i + 1}" for i in range(len(cols), width)]


def _measure_index(columns: list[str], rows: list[list[Any]]) -> int | None:
    """The last numeric column that is not a dimension (id, year, quarter, ...)."""
    numeric = [
        i
        for i in range(len(columns))
        if all(_as_number(r[i]) is not None for r in rows if i < len(r) and r[i] is not None)
        and any(i < len(r) and r[i] is not None for r in rows)
    ]
    measures = [i for i in numeric if not _DIMENSION_NAME.search(columns[i])]
    return measures[-1] if measures else None


def is_partial(result: SqlResult) -> bool:
    """Whether only part of the result is in hand: the query hit its row cap, or fewer rows were passed on."""
    return result.truncated or result.row_count > len(result.rows)


def _extent(result: SqlResult, noun: str) -> str:
    """How much of the result is shown: "showing 20 of 116 customers", or "at least 50" when the cap hit."""
    shown = len(result.rows)
    total = max(result.row_count, shown)
    if result.truncated:
        if total > shown:
            return f"showing {shown:,} of at least {total:,} {noun}: the query stopped at its row limit"
        return f"showing {shown:,} {noun}; the query stopped at its row limit, so there are more"
    return f"showing {shown:,} of {total:,} {noun}"


@dataclass(frozen=True)
class _Rows:
    """A SQL result's rows with their column names and catalog formats, for writing sentences about them."""

    columns: list[str]
    rows: list[list[Any]]
    formats: Mapping[str, str]

    def cell(self, i: int, row: list[Any]) -> str:
        """Column ``i`` of a row in its catalog format ("" when the row is too short)."""
        return format_value(row[i], self.formats.get(self.columns[i])) if i < len(row) else ""

    def named(self, i: int, row: list[Any]) -> str:
        """Column ``i`` of a row after its column name ("quarter 2")."""
        return f"{_humanize(self.columns[i])} {self.cell(i, row)}"

    def label(self, row: list[Any], labels: Sequence[int]) -> str:
        """What tells a row apart from the others, from its label columns."""
        # A bare number says nothing ("9 has the highest ..."), so numbers carry their column name.
        parts = [
            self.named(i, row) if _as_number(row[i]) is not None else self.cell(i, row) for i in labels if i < len(row)
        ]
        return ", ".join(parts) or "one row"


def _label_columns(rows: _Rows, measure: int | None) -> tuple[list[int], list[int]]:
    """The columns other than the measure: those that tell rows apart, and those with one value in every row."""
    others = [i for i in range(len(rows.columns)) if i != measure]
    constant = [i for i in others if len({repr(r[i]) if i < len(r) else "" for r in rows.rows}) == 1]
    labels = [i for i in others if i not in constant] or others
    return labels, constant


def _partial_sentence(result: SqlResult, rows: _Rows, labels: Sequence[int]) -> str:
    """Say how much of a partial result is shown, and that it supports no overall conclusion."""
    texts = [i for i in labels if all(_as_number(r[i]) is None for r in rows.rows if i < len(r))]
    noun = _plural(_humanize(rows.columns[texts[0]])) if len(texts) == 1 else "rows"
    # The missing rows could hold a higher or lower value: no overall conclusion from a part.
    return (
        f"Only part of the result is shown ({_extent(result, noun)}), so it does not tell which is "
        "highest or lowest overall, nor any total."
    )


def _at_extreme(valued: Sequence[tuple[int, float]], pick: Callable[[Iterable[float]], float]) -> list[int]:
    """The rows (their indexes) whose measure is the extreme value ``pick`` (``min`` or ``max``) chooses, in order."""
    extreme = pick(v for _, v in valued)
    return [i for i, v in valued if v == extreme]


def _fixed_clause(rows: _Rows, constant: Sequence[int], labels: Sequence[int]) -> str:
    """The columns with one value in every row, said once: " (quarter 2025-Q3)", or "" when there are none."""
    fixed = ", ".join(rows.named(i, rows.rows[0]) for i in constant if i not in labels)
    return f" ({fixed})" if fixed else ""


def _row_claim(
    text: str, source_id: str, rows: _Rows, measure: int, picked: Sequence[int], labels: Sequence[int]
) -> Claim:
    """A figure claim: the measure of the picked rows (all equal), the rows named by their label cells."""
    column = rows.columns[measure]
    evidence = [Evidence(source_id=source_id, row=i, column=column) for i in picked]
    evidence += [
        Evidence(source_id=source_id, row=i, column=rows.columns[c], role="label")
        for i in picked
        for c in labels
        if c < len(rows.rows[i]) and rows.rows[i][c] is not None
    ]
    return Claim(text=text, figure=rows.cell(measure, rows.rows[picked[0]]), evidence=evidence)


def _ranking_sentence(
    question: str, rows: _Rows, measure: int, labels: Sequence[int], constant: Sequence[int], source_id: str
) -> tuple[str, list[Claim]]:
    """Name the row(s) with the highest measure (lowest if the question asks for the least), and the other end."""
    count = f"{len(rows.rows)} rows"
    valued = [
        (i, v)
        for i, r in enumerate(rows.rows)
        if (v := _as_number(r[measure] if measure < len(r) else None)) is not None
    ]
    whole = Claim(
        text=f"across {count}", figure=str(len(rows.rows)), operation="count", evidence=[Evidence(source_id=source_id)]
    )
    if not valued:
        return f"The query returned {count}.", [whole.model_copy(update={"text": f"The query returned {count}."})]
    low = bool(_LOW_WORDS.search(question))
    word, opposite = ("lowest", "highest") if low else ("highest", "lowest")
    best = _at_extreme(valued, min if low else max)
    who = " and ".join(rows.label(rows.rows[i], labels) for i in best[:3]) + (" (and others)" if len(best) > 3 else "")
    verb = "share" if len(best) > 1 else "has"
    text = f"{who} {verb} the {word} {_humanize(rows.columns[measure])} ({rows.cell(measure, rows.rows[best[0]])})"
    claims = [_row_claim(text, source_id, rows, measure, best[:3], labels)]
    if len(valued) >= 3:
        other = _at_extreme(valued, max if low else min)[0]
        clause = f"the {opposite} is {rows.label(rows.rows[other], labels)} ({rows.cell(measure, rows.rows[other])})"
        claims.append(_row_claim(clause, source_id, rows, measure, [other], labels))
        text += f"; {clause}"
    claims.append(whole)
    return f"{text}, across {count}{_fixed_clause(rows, constant, labels)}.", claims


def summarize_sql(question: str, result: SqlResult, formats: Mapping[str, str] | None = None) -> str:
    """One or two plain sentences about a result's rows (no claims beyond the rows)."""
    return summarize_sql_claims(question, result, formats)[0]


def summarize_sql_claims(
    question: str, result: SqlResult, formats: Mapping[str, str] | None = None, source_id: str = "sql"
) -> tuple[str, list[Claim]]:
    """The sentences of ``summarize_sql`` and their claims: each figure with the cells it comes from."""
    if not result.rows:
        return "The query returned no rows.", []
    rows = _Rows(_columns(result), result.rows, formats or {})
    measure = _measure_index(rows.columns, rows.rows)
    partial = is_partial(result)
    if len(rows.rows) == 1 and not partial:
        row = rows.rows[0]
        text = "The query returned one row — " + ", ".join(
            f"{_humanize(c)}: {rows.cell(i, row)}" for i, c in enumerate(rows.columns)
        )
        numbers = [i for i in range(len(rows.columns)) if _as_number(row[i] if i < len(row) else None) is not None]
        # The row is named by its other cells (the region), each figure by its own cell.
        named_by = [
            Evidence(source_id=source_id, row=0, column=c, role="label")
            for i, c in enumerate(rows.columns)
            if i not in numbers and i < len(row) and row[i] is not None
        ]
        claims = [
            Claim(
                text=f"{text}.",
                figure=rows.cell(i, row),
                evidence=[Evidence(source_id=source_id, row=0, column=rows.columns[i]), *named_by],
            )
            for i in numbers
        ]
        return f"{text}.", claims
    # Columns with one value in every row (e.g. the quarter asked about) are said once, not per row.
    labels, constant = _label_columns(rows, measure)
    if partial:
        return _partial_sentence(result, rows, labels), []
    if measure is None:
        text = f"The query returned {len(rows.rows)} rows."
        whole = [Evidence(source_id=source_id)]
        return text, [Claim(text=text, figure=str(len(rows.rows)), operation="count", evidence=whole)]
    return _ranking_sentence(question, rows, measure, labels, constant, source_id)


def sql_table(result: SqlResult, formats: Mapping[str, str] | None = None) -> str:
    """The first rows of a result as a markdown table (at most 10 rows and 8 columns)."""
    if not result.rows:
        return ""
    formats = formats or {}
    columns = _columns(result)[:MAX_TABLE_COLUMNS]
    lines = [
        "| " + " | ".join(format_value(c) for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in result.rows[:MAX_TABLE_ROWS]:
        cells = [format_value(row[i], formats.get(columns[i])) if i < len(row) else "" for i in range(len(columns))]
        lines.append("| " + " | ".join(cells) + " |")
    more = len(result.rows) - MAX_TABLE_ROWS
    if more > 0:
        lines.append(f"… and {more} more rows.")
    return "\n".join(lines)
