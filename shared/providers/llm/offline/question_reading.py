"""How the offline SQL writer reads a question into a ``QueryIntent``: catalog phrases, periods, groups, ranking.

Every word it understands comes from the catalog (see ``shared.providers.llm.offline.sql_writer``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

from shared.providers.sql.catalog import Catalog, Dimension

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
DOCUMENT_WORDS = re.compile(
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


def normalize_text(text: str) -> str:
    """Lower case with punctuation turned to spaces, so phrases match word by word."""
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
            base.append((normalize_text(alias), "metric", m.name, None))
            if alias.endswith(("rate", "value", "amount", "count", "total")):
                base.append((normalize_text(alias) + "s", "metric", m.name, None))  # "return rates"
    for d in catalog.dimensions:
        for alias in {d.name, *d.aliases}:
            base.append((normalize_text(alias), "dimension", d.name, None))
        for listed in d.values:
            base.append((normalize_text(listed), "value", d.name, listed))
    out = list(base)
    for term, canonical in catalog.synonyms.items():
        t, c = normalize_text(term), normalize_text(canonical)
        pattern = re.compile(_WORD + re.escape(c) + _END)
        for phrase, kind, target, value in base:
            if kind != "value" and pattern.search(phrase):
                out.append((pattern.sub(t, phrase), kind, target, value))
            elif kind == "value" and phrase == c:
                out.append((t, kind, target, value))
    return sorted(set(out), key=lambda p: (-len(p[0]), p[0], p[1]))


def match_phrases(text: str, catalog: Catalog) -> list[_Span]:
    """The catalog phrases found in the text, longest first and not overlapping."""
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
        known = {normalize_text(v) for d in catalog.dimensions for v in d.values} | set(_MONTHS)
        if normalize_text(name) not in known and not re.fullmatch(r"(?i)q[1-4]|id|number|\d+", name):
            return name.strip(), None
    return None, None


def _one_when_asked(text: str, order: str | None, limit: int | None, singular_group: bool) -> int | None:
    """ "Which region had the most returns": one answer, the top of the ranking."""
    if order and limit is None and singular_group and _asks_for_one(text):
        return 1
    return limit


def interpret(question: str, catalog: Catalog) -> QueryIntent | None:
    """Read a question with the catalog grammar; None when it names no metric the catalog defines."""
    text = normalize_text(question)
    if not text or DOCUMENT_WORDS.search(text):
        return None
    spans = match_phrases(text, catalog)
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
    known |= set(normalize_text(customer).split()) if customer else set()
    for m in _CAPITALIZED.finditer(question):
        if m.start() == 0 or re.search(r"[.!?:]\s*$", question[: m.start()]):
            continue  # the first word of a sentence is capitalized anyway
        words = normalize_text(m.group(1)).split()
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
    if span.target in value_dims and before and any(before.endswith(normalize_text(v)) for v in (dim.values or [])):
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
MEASURE_NEIGHBOURS = (
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
        if not word or at in covered or word in MEASURE_NEIGHBOURS:
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
