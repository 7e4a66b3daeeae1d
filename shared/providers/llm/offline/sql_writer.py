"""The offline SQL writer: a small grammar over the semantic catalog, used when no LLM is configured.

A question is read as *metrics* (``revenue``, ``return rate``), optionally *grouped by* dimensions
(``by region``, ``per month``, ``monthly``, ``which category``, ``top 5 products``), *filtered* by
dimension values (``West``, ``Electronics``, ``Online``), a customer (``customer Isabella Davis``) and
a time period (``Q3``, ``March``, ``first half``, ``2025``, ``last quarter``), and *ranked*
(``top 5``, ``bottom 3``, ``most``, ``least``). Every word it understands comes from the catalog —
metric and dimension aliases, listed values and synonyms — so the writer knows exactly what the
catalog knows. When the question needs something outside that grammar (no metric, metrics over
different facts, a dimension the metric cannot reach), it returns None rather than guessing.

Relative time words resolve against the end of the catalog's ``data_period`` (the data is 2025):
"last quarter" is its last quarter, "this year" / "last year" its year.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from datetime import date

from shared.jobs.plan import SqlDraft
from shared.providers.sql.catalog import DIALECTS, Catalog, Dimension, Fact, Metric

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "twelve": 12, "twenty": 20,
}  # fmt: skip
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]  # fmt: skip
_ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "last": 4}
_GROUP_TRIGGERS = ("by", "per", "each", "every", "across", "which", "what", "for each", "for every", "broken down by",
                   "split by", "grouped by")  # fmt: skip
_COUNT_TRIGGERS = ("how many", "number of", "count of", "total number of", "count the")
_DESC_WORDS = ("top", "best", "highest", "largest", "biggest", "leading", "most", "greatest", "maximum", "higher",
               "larger", "bigger", "more")  # fmt: skip
_ASC_WORDS = ("bottom", "worst", "lowest", "smallest", "least", "fewest", "minimum", "lower", "smaller", "fewer")
_TIME_GROUP_WORDS = {"over time": "month", "trend": "month", "month by month": "month", "quarter by quarter": "quarter"}
_WORD = r"(?<![a-z0-9])"
_END = r"(?![a-z0-9])"
# Questions about rules and procedures belong to the documents, even when they name a metric word.
_DOCUMENT_WORDS = re.compile(
    _WORD + r"(polic(y|ies)|procedures?|guidelines?|terms|warranty|warranties|how (do|can|should) (i|we)|"
    r"how to|allowed to|eligible|eligibility)" + _END
)


@dataclass
class _Span:
    start: int
    end: int
    phrase: str
    kind: str  # "metric" | "dimension" | "value"
    target: str  # metric or dimension name
    value: str | None = None


@dataclass
class QueryIntent:
    """What the grammar understood from a question."""

    metrics: list[str]
    group_by: list[str] = field(default_factory=list)
    filters: dict[str, list[str]] = field(default_factory=dict)
    customer: str | None = None
    customer_id: int | None = None
    periods: list[tuple[str, str]] = field(default_factory=list)  # [start, end) ISO dates, OR-ed
    period_label: str | None = None
    order: str | None = None  # "desc" | "asc"
    limit: int | None = None

    def describe(self) -> str:
        """A one-line human summary of the intent."""
        parts = [", ".join(m.replace("_", " ") for m in self.metrics)]
        if self.group_by:
            parts.append("by " + ", ".join(self.group_by))
        for dim, values in self.filters.items():
            parts.append(f"{dim} = {' or '.join(values)}")
        if self.customer:
            parts.append(f"customer = {self.customer}")
        if self.customer_id is not None:
            parts.append(f"customer id = {self.customer_id}")
        if self.period_label:
            parts.append(self.period_label)
        if self.order:
            rank = "top" if self.order == "desc" else "bottom"
            parts.append(f"{rank} {self.limit}" if self.limit else f"ranked {self.order}")
        return "; ".join(parts)


# ---------------------------------------------------------------------------------------------------
# Phrase matching


def _normalize(text: str) -> str:
    text = text.lower().replace("\u2019", "'").replace("&", " and ")
    text = re.sub(r"[^a-z0-9'\- ]+", " ", text)
    return re.sub(r"\s+", " ", text).strip()


_PHRASE_CACHE: dict[int, tuple[Catalog, list[tuple[str, str, str, str | None]]]] = {}


def _phrases(catalog: Catalog) -> list[tuple[str, str, str, str | None]]:
    """(phrase, kind, target, value) for every alias, name and listed value, with synonym variants."""
    cached = _PHRASE_CACHE.get(id(catalog))
    if cached is not None and cached[0] is catalog:
        return cached[1]
    phrases = _build_phrases(catalog)
    _PHRASE_CACHE[id(catalog)] = (catalog, phrases)
    return phrases


def _build_phrases(catalog: Catalog) -> list[tuple[str, str, str, str | None]]:
    base: list[tuple[str, str, str, str | None]] = []
    for m in catalog.metrics:
        for alias in {m.name.replace("_", " "), *m.aliases}:
            base.append((_normalize(alias), "metric", m.name, None))
            if alias.endswith(("rate", "value", "amount", "count", "total")):
                base.append((_normalize(alias) + "s", "metric", m.name, None))  # "return rates"
    for d in catalog.dimensions:
        for alias in {d.name, *d.aliases}:
            base.append((_normalize(alias), "dimension", d.name, None))
        for listed in d.values:
            base.append((_normalize(listed), "value", d.name, listed))
    out = list(base)
    for term, canonical in catalog.synonyms.items():
        t, c = _normalize(term), _normalize(canonical)
        pattern = re.compile(_WORD + re.escape(c) + _END)
        for phrase, kind, target, value in base:
            if kind != "value" and pattern.search(phrase):
                out.append((pattern.sub(t, phrase), kind, target, value))
            elif kind == "value" and phrase == c:
                out.append((t, kind, target, value))
    return sorted(set(out), key=lambda p: (-len(p[0]), p[0], p[1]))


def _match(text: str, catalog: Catalog) -> list[_Span]:
    taken: list[tuple[int, int] | None] = [None] * len(text)
    spans: list[_Span] = []
    for phrase, kind, target, value in _phrases(catalog):
        if not phrase:
            continue
        for m in re.finditer(_WORD + re.escape(phrase) + _END, text):
            here = (m.start(), m.end())
            # Longest phrases win; an identical span may still carry a second meaning (metric vs dimension).
            if any(t is not None and t != here for t in taken[m.start() : m.end()]):
                continue
            spans.append(_Span(m.start(), m.end(), phrase, kind, target, value))
            for i in range(m.start(), m.end()):
                taken[i] = here
    # The same phrase can be a metric and a dimension ("customers"): keep one per position.
    by_pos: dict[int, list[_Span]] = {}
    for span in spans:
        by_pos.setdefault(span.start, []).append(span)
    result: list[_Span] = []
    for start in sorted(by_pos):
        options = by_pos[start]
        if len(options) == 1:
            result.append(options[0])
            continue
        before = text[:start]
        # "how many customers", "number of business clients": a count trigger a word or two before.
        counting = bool(re.search(r"(" + "|".join(_COUNT_TRIGGERS) + r")( [a-z0-9'-]+){0,2} $", before))
        wanted = "metric" if counting else "dimension"
        result.append(next((s for s in options if s.kind == wanted), options[0]))
    return result


def _preceded_by(text: str, start: int, words: tuple[str, ...], gap: int = 0) -> bool:
    """Whether one of ``words`` ends just before ``start`` (allowing ``gap`` extra words between)."""
    before = text[:start].split()
    for k in range(gap + 1):
        head = " ".join(before[: len(before) - k]) if k else " ".join(before)
        if any(head.endswith(" " + w) or head == w for w in words):
            return True
    return False


# ---------------------------------------------------------------------------------------------------
# Time


def _year_bounds(year: int, first_month: int, last_month: int) -> tuple[str, str]:
    start = date(year, first_month, 1)
    end = date(year + 1, 1, 1) if last_month == 12 else date(year, last_month + 1, 1)
    return start.isoformat(), end.isoformat()


_RECENT = r"(last|previous|past|latest|most recent|this|current)"


def _years(text: str, data_year: int) -> list[int]:
    """Years the question names, with "this year", "last year" and "YTD" read as the data's latest year."""
    years = [int(y) for y in re.findall(_WORD + r"((?:19|20)\d\d)" + _END, text)]
    if re.search(_WORD + r"(this|last|previous|past|latest|current) year" + _END, text) or re.search(
        _WORD + r"(ytd|year to date)" + _END, text
    ):
        years.append(data_year)
    return years


def _time_grain(text: str) -> str | None:
    """The time grain to group by ("monthly", "by quarter" …); the last one named wins."""
    grain: str | None = None
    for phrase, g in _TIME_GROUP_WORDS.items():
        if re.search(_WORD + phrase + _END, text):
            grain = g
    return grain


def _months(text: str) -> list[int]:
    """Month numbers the question names ("may" only where it is plainly the month)."""
    months: list[int] = []
    for i, name in enumerate(_MONTHS, start=1):
        if name == "may":
            if re.search(_WORD + r"(in|during|for|of|since) may" + _END, text) or re.search(r"may (?:19|20)\d\d", text):
                months.append(i)
        elif re.search(_WORD + name + _END, text):
            months.append(i)
    return months


def _quarters(text: str) -> list[int]:
    """Quarter numbers: "Q3", "quarter 3", "third quarter"."""
    quarters = [int(q) for q in re.findall(_WORD + r"q([1-4])" + _END, text)]
    quarters += [int(q) for q in re.findall(_WORD + r"quarter ([1-4])" + _END, text)]
    for word, q in _ORDINALS.items():
        if word != "last" and re.search(_WORD + word + r" quarter" + _END, text):
            quarters.append(q)
    return quarters


def _halves(text: str) -> list[int]:
    """Half-years: "H1"/"first half", "H2"/"second half"."""
    halves = []
    if re.search(_WORD + r"(h1|first half)" + _END, text):
        halves.append(1)
    if re.search(_WORD + r"(h2|second half)" + _END, text):
        halves.append(2)
    return halves


def _periods(
    year: int, years: list[int], months: list[int], quarters: list[int], halves: list[int]
) -> tuple[list[tuple[str, str]], str | None]:
    """Date ranges and their label from the finest unit named: months, else quarters, else halves, else years."""
    if months:
        picked = sorted(set(months))
        return [_year_bounds(year, mo, mo) for mo in picked], ", ".join(_MONTHS[mo - 1].title() for mo in picked) + (
            f" {year}"
        )
    if quarters:
        picked = sorted(set(quarters))
        return [_year_bounds(year, 3 * q - 2, 3 * q) for q in picked], ", ".join(f"Q{q}" for q in picked) + f" {year}"
    if halves:
        picked = sorted(set(halves))
        return [_year_bounds(year, 6 * h - 5, 6 * h) for h in picked], ", ".join(f"H{h}" for h in picked) + f" {year}"
    if years:
        picked = sorted(set(years))
        return [_year_bounds(y, 1, 12) for y in picked], ", ".join(str(y) for y in picked)
    return [], None


def _parse_time(text: str, catalog: Catalog) -> tuple[list[tuple[str, str]], str | None, str | None]:
    """Date ranges, a label, and a time grain to group by, from the question's time words."""
    end = date.fromisoformat(catalog.data_period.end)
    years = _years(text, end.year)
    year = years[0] if years else end.year
    months, quarters, halves = _months(text), _quarters(text), _halves(text)
    # "last quarter", "this month": the data's latest one.
    if re.search(_WORD + _RECENT + r" quarter" + _END, text):
        quarters.append((end.month - 1) // 3 + 1)
        year = end.year
    if re.search(_WORD + _RECENT + r" month" + _END, text):
        months.append(end.month)
        year = end.year
    ranges, label = _periods(year, years, months, quarters, halves)
    return ranges, label, _time_grain(text)


# ---------------------------------------------------------------------------------------------------
# Understanding


_CUSTOMER_NAME = re.compile(
    r"\b(?:[Cc]ustomer|[Cc]lient|[Bb]uyer)s?\s+(?:named\s+|called\s+)?"
    r"(?:\"([^\"]{2,80})\"|'([^']{2,80})'|([A-Z][\w&.'-]*(?:\s+[A-Z][\w&.'-]*){0,4}))"
)
_CUSTOMER_ID = re.compile(r"\b(?:customer|client|buyer)\s*(?:id|number|no\.?|#)\s*#?\s*(\d{1,9})\b", re.IGNORECASE)


def _ranking(text: str) -> tuple[str | None, int | None]:
    """Order and row limit: "top 5", "bottom three", "the 10 best", or just "most"/"least"."""
    words = "|".join(_DESC_WORDS + _ASC_WORDS)
    numbers = r"(\d{1,4}|" + "|".join(_NUMBER_WORDS) + r")"
    word: str | None = None
    n: str | None = None
    if rank := re.search(_WORD + r"(" + words + r")\s+" + numbers + _END, text):
        word, n = rank.group(1), rank.group(2)
    elif rank := re.search(_WORD + numbers + r"\s+(" + words + r")" + _END, text):
        word, n = rank.group(2), rank.group(1)
    elif m := re.search(_WORD + r"(" + words + r")" + _END, text):
        word = m.group(1)
    if word is None:
        return None, None
    order = "desc" if word in _DESC_WORDS else "asc"
    limit = None if n is None else (int(n) if n.isdigit() else _NUMBER_WORDS[n])
    return order, limit


@dataclass
class _Reading:
    """What the catalog phrases of a question say: measures, breakdowns and filter values."""

    metrics: list[str] = field(default_factory=list)
    group_by: list[str] = field(default_factory=list)
    filters: dict[str, list[str]] = field(default_factory=dict)
    mentioned: list[str] = field(default_factory=list)
    singular_group: bool = False


def _read_spans(text: str, spans: list[_Span], catalog: Catalog) -> _Reading:
    """Sort the matched phrases into metrics, filter values and dimensions (grouped or only mentioned)."""
    reading = _Reading()
    counted = [s for s in spans if s.kind == "metric" and not _population(text, s, spans, catalog)]
    value_dims = {s.target for s in spans if s.kind == "value"}
    # Where each value phrase starts, keyed by where it ends ("business customers": "business" ends before).
    value_starts = {s.end: s.start for s in spans if s.kind == "value"}
    last_group_end = -1
    for span in spans:
        if span.kind == "metric":
            if span in counted and span.target not in reading.metrics:
                reading.metrics.append(span.target)
        elif span.kind == "value":
            assert span.value is not None
            values = reading.filters.setdefault(span.target, [])
            if span.value not in values:
                values.append(span.value)
        else:
            grouped = _read_dimension(text, span, catalog, reading, last_group_end, (value_dims, value_starts))
            last_group_end = span.end if grouped else last_group_end
    _add_compared(text, reading)
    return reading


def _read_dimension(
    text: str,
    span: _Span,
    catalog: Catalog,
    reading: _Reading,
    last_group_end: int,
    values: tuple[set[str], dict[int, int]],
) -> bool:
    """Note a dimension phrase; group by it when the question asks for a breakdown. True when grouped."""
    dim = catalog.dimension(span.target)
    assert dim is not None
    reading.mentioned.append(span.target)
    # "by region and channel": a dimension listed right after a grouped one is grouped too.
    listed = last_group_end >= 0 and text[last_group_end : span.start].strip() in {"and", ",", "", "or"}
    if not (listed or _is_group(text, span, dim, *values)):
        return False
    if span.target not in reading.group_by:
        reading.group_by.append(span.target)
        reading.singular_group = reading.singular_group or not _is_plural(span.phrase, dim)
    return True


def _add_compared(text: str, reading: _Reading) -> None:
    """Comparing values ("Electronics vs Apparel") asks for one row per value."""
    if re.search(_WORD + r"(vs|versus|compare|compared|comparing|against|between)" + _END, text):
        reading.group_by += [d for d, vs in reading.filters.items() if len(vs) > 1 and d not in reading.group_by]


def _default_metric(reading: _Reading, catalog: Catalog) -> str | None:
    """ "return reasons in Q3": a dimension of a fact table counts that fact's rows."""
    for dim_name in reading.group_by + list(reading.filters) + reading.mentioned:
        dim = catalog.dimension(dim_name)
        fact = next((f for f in catalog.facts if dim and f.table == dim.table and f.default_metric), None)
        if fact is not None and fact.default_metric:
            return fact.default_metric
    return None


def _customer(question: str, catalog: Catalog) -> tuple[str | None, int | None]:
    """A customer the question names ("customer Isabella Davis", "customer #42"), by name or id."""
    if m := _CUSTOMER_ID.search(question):
        return None, int(m.group(1))
    if m := _CUSTOMER_NAME.search(question):
        name = next(g for g in m.groups() if g)
        known = {_normalize(v) for d in catalog.dimensions for v in d.values} | set(_MONTHS)
        if _normalize(name) not in known and not re.fullmatch(r"(?i)q[1-4]|id|number|\d+", name):
            return name.strip(), None
    return None, None


def _one_when_asked(text: str, order: str | None, limit: int | None, singular_group: bool) -> int | None:
    """ "Which region had the most returns": one answer, the top of the ranking."""
    if order and limit is None and singular_group and _asks_for_one(text):
        return 1
    return limit


def interpret(question: str, catalog: Catalog) -> QueryIntent | None:
    """Read a question with the catalog grammar; None when it names no metric the catalog defines."""
    text = _normalize(question)
    if not text or _DOCUMENT_WORDS.search(text):
        return None
    spans = _match(text, catalog)
    order, limit = _ranking(text)
    if any(_modified_metric(question, text, span, spans) for span in spans if span.kind == "metric"):
        return None  # "employee turnover", "turnover rate": a measure the catalog does not hold
    reading = _read_spans(text, spans, catalog)
    group_by, filters = reading.group_by, reading.filters
    metrics = reading.metrics or [m for m in [_default_metric(reading, catalog)] if m]
    if not metrics:
        return None
    periods, label, time_grain = _parse_time(text, catalog)
    if time_grain and time_grain not in group_by:
        group_by.append(time_grain)
    customer, customer_id = _customer(question, catalog)
    if _unknown_names(question, text, spans, customer):
        return None
    if customer is not None or customer_id is not None:
        # "orders did customer X place": the customer is a filter, not a grouping.
        group_by = [g for g in group_by if g != "customer"]
    limit = _one_when_asked(text, order, limit, reading.singular_group)
    return QueryIntent(metrics=metrics, group_by=group_by, filters=filters, customer=customer,
                       customer_id=customer_id, periods=periods, period_label=label, order=order,
                       limit=limit)  # fmt: skip


_CAPITALIZED = re.compile(r"(?<![\w'])([A-Z][a-z][\w&'-]*(?:\s+[A-Z][\w&'-]*)*)")


def _unknown_names(question: str, text: str, spans: list[_Span], customer: str | None) -> bool:
    """Whether the question names something (a capitalized name) the grammar did not understand.

    "How many orders did Isabella Davis place" without the word "customer" must not silently count
    every order; the writer declines instead.
    """
    known = {w for s in spans for w in text[s.start : s.end].split()} | set(_MONTHS)
    known |= set(_normalize(customer).split()) if customer else set()
    for m in _CAPITALIZED.finditer(question):
        if m.start() == 0 or re.search(r"[.!?:]\s*$", question[: m.start()]):
            continue  # the first word of a sentence is capitalized anyway
        words = _normalize(m.group(1)).split()
        if any(w not in known and not re.fullmatch(r"q[1-4]|h[12]|(?:19|20)\d\d", w) for w in words):
            return True
    return False


def _is_group(
    text: str, span: _Span, dim: Dimension, value_dims: set[str], value_starts: dict[int, int] | None = None
) -> bool:
    if dim.time_grain is not None and span.phrase in {"monthly", "quarterly", "yearly", "annual", "annually"}:
        return True
    after = text[span.end :].lstrip()
    before = text[: span.start].rstrip()
    # "the West region": the dimension word names the filter value just before it.
    if span.target in value_dims and before and any(before.endswith(_normalize(v)) for v in (dim.values or [])):
        return False
    # "customer Isabella Davis", "customer 42": a filter follows.
    if span.target == "customer" and (after[:1].isdigit() or after.startswith(("named", "called", "id", "#"))):
        return False
    # "for business customers" names the customers counted, not a breakdown; "each business customer" and
    # "top 5 Electronics products" still group: the trigger is read before the value.
    start = span.start
    qualified = (value_starts or {}).get(span.start - 1)
    if qualified is not None:
        start = qualified
        before = text[:start].rstrip()
    if _preceded_by(text, start, _GROUP_TRIGGERS, gap=0):
        return True
    if re.search(r"(" + "|".join(_DESC_WORDS + _ASC_WORDS) + r")(\s+(\d+|" + "|".join(_NUMBER_WORDS) + r"))?$",
                 before):  # fmt: skip
        return True
    if qualified is not None:
        return False
    # A plural dimension word ("products", "regions") asks for a breakdown.
    return _is_plural(span.phrase, dim)


# Words that may stand right next to a measure without changing what it measures.
_MEASURE_NEIGHBOURS = (
    frozenset(
        """total overall gross all our whole combined sum company company's store's how many much what what's whats
    which who show list give get see compare compared versus vs trend over time broken split grouped made
    generated brought came come had has have got sold bought ordered placed did do does was were is are be been
    in during since between across by per each every for from of on to at with and or the a an this last next
    previous past current latest first second third fourth half year years quarter quarters month months week
    day today ytd me us we you they it its their them there where when than then so more less up down out""".split()
    )
    | frozenset(_MONTHS)
    | frozenset(_NUMBER_WORDS)
    | frozenset(_DESC_WORDS + _ASC_WORDS)
    | frozenset(_ORDINALS)
)


def _neighbour_words(text: str, span: _Span) -> tuple[str, str]:
    before = text[: span.start].split()
    after = text[span.end :].split()
    return (before[-1] if before else ""), (after[0] if after else "")


def _modified_metric(question: str, text: str, span: _Span, spans: list[_Span]) -> bool:
    """Whether an unknown word qualifies a measure ("employee turnover", "turnover rate", "net revenue")."""
    covered = {i for s in spans for i in range(s.start, s.end)}
    before, after = _neighbour_words(text, span)
    for word, at in ((before, span.start - 2), (after, span.end + 1)):
        if not word or at in covered or word in _MEASURE_NEIGHBOURS:
            continue
        if re.fullmatch(r"\d[\d,.]*|q[1-4]|h[12]|(?:19|20)\d\d|'s|s", word):
            continue
        if word in {"rate", "rates", "margin", "margins", "ratio", "share", "growth", "cost", "costs", "per"}:
            return True  # a different measure built on this one
        # A capitalized word before it is a name, handled with names (a quoted customer name may hold anything).
        lower_case = re.search(r"(?<![A-Za-z])" + re.escape(word) + r"(?![A-Za-z])", question) is not None
        if word == before and word.isalpha() and len(word) > 2 and lower_case:
            return True
    return False


def _population(text: str, span: _Span, spans: list[_Span], catalog: Catalog) -> bool:
    """Whether a count measure only names what another measure is about ("refund total for returns")."""
    metric = catalog.metric(span.target)
    others = [s for s in spans if s.kind == "metric" and s.target != span.target]
    if metric is None or metric.format != "count" or not others:
        return False
    before, _ = _neighbour_words(text, span)
    return before in {"for", "of", "on", "from", "among", "across", "over"} and any(
        s.start < span.start for s in others
    )


def _is_plural(phrase: str, dim: Dimension) -> bool:
    return phrase.endswith("s") and phrase != dim.name and not phrase.endswith("ss")


def _asks_for_one(text: str) -> bool:
    return bool(re.match(r"^(which|what)\b", text)) or bool(
        re.search(_WORD + r"(which|what) (\w+ )?(had|has|have|was|is|were|got|made|sold|saw)" + _END, text)
    )


# ---------------------------------------------------------------------------------------------------
# SQL


def _is_time(catalog: Catalog, dimension: str) -> bool:
    dim = catalog.dimension(dimension)
    return dim is not None and dim.time_grain is not None


def _tables_in(sql: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"\b([a-z_][a-z0-9_]*)\.[a-z_][a-z0-9_]*\b", sql)))


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _join_path(catalog: Catalog, start: set[str], target: str) -> list[tuple[str, str]] | None:
    """Many-to-one joins (from, to) leading from the joined tables to ``target``; None if unreachable."""
    if target in start:
        return []
    queue: deque[tuple[str, list[tuple[str, str]]]] = deque((t, []) for t in sorted(start))
    seen = set(start)
    while queue:
        table, path = queue.popleft()
        for j in catalog.join_paths:
            if j.from_table == table and j.to_table not in seen:
                step = path + [(j.from_table, j.to_table)]
                if j.to_table == target:
                    return step
                seen.add(j.to_table)
                queue.append((j.to_table, step))
    return None


def _fact_for(metrics: list[Metric], catalog: Catalog) -> Fact | None:
    """The one fact table the metrics come from (None when they span several)."""
    facts = {m.fact for m in metrics}
    if facts == {"sales", "sales_with_returns"}:
        # Order lines with their (at most one) return keep the order-line grain: sales metrics stay exact.
        facts = {"sales_with_returns"}
    return catalog.fact(facts.pop()) if len(facts) == 1 else None


@dataclass
class _Query:
    """The parts of one SELECT as they are assembled."""

    select: list[str] = field(default_factory=list)
    group: list[str] = field(default_factory=list)
    order_dims: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    needed: list[str] = field(default_factory=list)


def _add_groups(q: _Query, intent: QueryIntent, catalog: Catalog, date_sql: str, dialect: str) -> bool:
    """Select and group by each breakdown dimension; False when one is unknown."""
    for name in intent.group_by:
        dim = catalog.dimension(name)
        if dim is None:
            return False
        expr = catalog.time_expression(dim.time_grain, date_sql, dialect) if dim.time_grain else dim.sql
        assert expr is not None
        q.select.append(f"{expr} AS {dim.name}")
        q.group.append(expr)
        q.order_dims.append(dim.name)
        q.needed += _tables_in(expr)
    return True


def _add_filters(q: _Query, intent: QueryIntent, catalog: Catalog, date_sql: str) -> bool:
    """The WHERE conditions: filter values, the customer, the periods; False when a filter is unknown."""
    for name, values in intent.filters.items():
        dim = catalog.dimension(name)
        if dim is None or dim.sql is None:
            return False
        quoted = ", ".join(_quote(v) for v in values)
        q.where.append(f"{dim.sql} = {quoted}" if len(values) == 1 else f"{dim.sql} IN ({quoted})")
        q.needed += _tables_in(dim.sql)
    if intent.customer is not None:
        q.where.append(f"customers.name = {_quote(intent.customer)}")
        q.needed.append("customers")
    if intent.customer_id is not None:
        q.where.append(f"orders.customer_id = {intent.customer_id}")
        q.needed.append("orders")
    if intent.periods:
        ranges = [f"({date_sql} >= '{a}' AND {date_sql} < '{b}')" for a, b in intent.periods]
        q.where.append(ranges[0][1:-1] if len(ranges) == 1 else "(" + " OR ".join(ranges) + ")")
    q.needed += _tables_in(date_sql)
    return True


def _joins(fact: Fact, needed: list[str], catalog: Catalog) -> tuple[list[str], set[str]] | None:
    """JOIN clauses reaching every needed table from the fact, and the tables joined; None when one is out of reach."""
    joined = {fact.table} | {t for j in fact.extra_joins for t in _tables_in(j)}
    joins: list[str] = list(fact.extra_joins)
    on = {(j.from_table, j.to_table): j.on for j in catalog.join_paths}
    for table in dict.fromkeys(needed):
        path = _join_path(catalog, joined, table) if catalog.table(table) is not None else None
        if path is None:
            return None
        for a, b in path:
            joins.append(f"JOIN {b} ON {on[(a, b)]}")
            joined.add(b)
    return joins, joined


def _order_by(q: _Query, intent: QueryIntent, metrics: list[Metric], catalog: Catalog) -> str:
    """Ranked by the first metric when asked; a breakdown largest first; time in order."""
    if intent.order and metrics:
        order_by = f"{metrics[0].name} {intent.order.upper()}"
    else:
        order_by = ", ".join(q.order_dims)
    if q.group and not intent.order and not any(_is_time(catalog, g) for g in intent.group_by):
        order_by = f"{metrics[0].name} DESC"  # a breakdown reads best largest first; time reads in order
    return order_by


def _render(q: _Query, table: str, joins: list[str], order_by: str, limit: int | None, dialect: str) -> str:
    """The SELECT text, with the row cap as the dialect writes it (TOP for T-SQL, else LIMIT)."""
    top = f"TOP {limit} " if limit and dialect == "tsql" else ""
    clauses = [f"SELECT {top}{', '.join(q.select)} FROM {table}", " ".join(joins)]
    clauses.append("WHERE " + " AND ".join(q.where) if q.where else "")
    clauses.append("GROUP BY " + ", ".join(q.group) if q.group else "")
    clauses.append(f"ORDER BY {order_by}" if order_by and q.group else "")
    clauses.append(f"LIMIT {limit}" if limit and dialect in ("sqlite", "postgres") else "")
    return " ".join(c for c in clauses if c)


def build_sql(intent: QueryIntent, catalog: Catalog, dialect: str) -> SqlDraft | None:
    """Write the SQL for an intent in a dialect; None when the catalog cannot join what it needs."""
    if dialect not in DIALECTS:
        return None
    metrics: list[Metric] = [m for name in intent.metrics if (m := catalog.metric(name)) is not None]
    fact = _fact_for(metrics, catalog)
    if fact is None:
        return None
    q = _Query()
    if not _add_groups(q, intent, catalog, fact.time_column, dialect):
        return None
    for metric in metrics:
        q.select.append(f"{metric.sql} AS {metric.name}")
        q.needed += _tables_in(metric.sql)
    if not _add_filters(q, intent, catalog, fact.time_column):
        return None
    reached = _joins(fact, q.needed, catalog)
    if reached is None or any(catalog.is_sensitive(t) for t in reached[1]):
        return None
    joins, joined = reached
    sql = _render(q, fact.table, joins, _order_by(q, intent, metrics, catalog), intent.limit, dialect)
    return SqlDraft(sql=sql, tables=sorted(joined), explanation=f"offline catalog query: {intent.describe()}")


# ---------------------------------------------------------------------------------------------------
# Public API


def write_sql_offline(question: str, catalog: Catalog, dialect: str) -> SqlDraft | None:
    """Write SQL for a question from the catalog alone; None when the catalog does not cover it."""
    intent = interpret(question, catalog)
    if intent is None:
        return None
    return build_sql(intent, catalog, dialect)


_PLAIN_WORDS = frozenset(
    """how many much what which who whom whose when where why is are was were be been do does did the a an of in on
    for to by per and or with from at our my your we i you me us it its this that these those there their show list
    give tell get me all each every any total overall please can could would should will have has had what's whats
    whose during since between across over than then so as about""".split()
)


def unmapped_words(question: str, catalog: Catalog) -> list[str]:
    """The question's words that no catalog phrase, time word or question word accounts for."""
    text = _normalize(question)
    covered = {i for s in _match(text, catalog) for i in range(s.start, s.end)}
    out: list[str] = []
    for m in re.finditer(r"[a-z0-9'-]+", text):
        word = m.group(0)
        if m.start() in covered or word in _PLAIN_WORDS or word in _MEASURE_NEIGHBOURS:
            continue
        if re.fullmatch(r"\d[\d,.]*|q[1-4]|h[12]|20\d\d|'s|s|-+", word) or word in out:
            continue
        out.append(word)
    return out


def explain_unwritable(question: str, catalog: Catalog, dialect: str) -> str:
    """Why the offline writer cannot write SQL for a question, in plain words for the person who asked.

    Says what it understood, which words it could not map to the data, and what the data holds.
    """
    text = _normalize(question)
    spans = _match(text, catalog) if text else []
    intent = interpret(question, catalog) if text else None
    lines = ["The offline SQL writer (keyword matching over the data catalog, not a language model) could not "
             "turn this question into a query."]  # fmt: skip
    if text and _DOCUMENT_WORDS.search(text):
        lines.append("It reads as a question about policies or procedures, which the documents answer, not the data.")
    elif dialect not in DIALECTS:
        lines.append(f"It writes only {', '.join(DIALECTS)}, not {dialect!r}.")
    elif intent is not None:
        lines.append(f"It understood: {intent.describe()}, but the data cannot be joined or combined that way.")
    else:
        read = [f"“{text[s.start : s.end]}” as {s.value or s.target.replace('_', ' ')}" for s in spans]
        if any(s.kind == "metric" for s in spans):
            lines.append(
                "It read " + ", ".join(dict.fromkeys(read)) + ", but the words around the measure ask for "
                "something else, which the data does not hold."
            )
        elif read:
            lines.append("It read " + ", ".join(dict.fromkeys(read)) + ", but found no measure of the data in it.")
        else:
            lines.append("It found no measure of the data in it.")
    unknown = unmapped_words(question, catalog)
    if unknown:
        lines.append("Words it could not map to the data: " + ", ".join(f"“{w}”" for w in unknown[:8]) + ".")
    measures = ", ".join(m.name.replace("_", " ") for m in catalog.metrics)
    dims = ", ".join(d.name for d in catalog.dimensions)
    lines.append(f"The data holds: {measures}; by {dims}.")
    lines.append("Rephrase the step's question with these words, or give the SQL yourself.")
    return " ".join(lines)


def coverage_score(question: str, catalog: Catalog) -> float:
    """How well the catalog covers a question: 1.0 answerable offline, 0.5 names a metric only, 0.0 none."""
    intent = interpret(question, catalog)
    if intent is None:
        return 0.0
    return 1.0 if build_sql(intent, catalog, "sqlite") is not None else 0.5


def catalog_covers(question: str, catalog: Catalog) -> bool:
    """Whether the question is about the catalog's data (it names at least one metric)."""
    return coverage_score(question, catalog) > 0.0
