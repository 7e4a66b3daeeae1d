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
"last quarter" is its last quarter, "this year" / "last year" its year."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from shared.jobs.plan import SqlDraft
from shared.providers.llm.offline.question_reading import (
    DOCUMENT_WORDS,
    MEASURE_NEIGHBOURS,
    QueryIntent,
    interpret,
    match_phrases,
    normalize_text,
)
from shared.providers.sql.catalog import DIALECTS, Catalog, Fact, Metric


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
    text = normalize_text(question)
    covered = {i for s in match_phrases(text, catalog) for i in range(s.start, s.end)}
    out: list[str] = []
    for m in re.finditer(r"[a-z0-9'-]+", text):
        word = m.group(0)
        if m.start() in covered or word in _PLAIN_WORDS or word in MEASURE_NEIGHBOURS:
            continue
        if re.fullmatch(r"\d[\d,.]*|q[1-4]|h[12]|20\d\d|'s|s|-+", word) or word in out:
            continue
        out.append(word)
    return out


def explain_unwritable(question: str, catalog: Catalog, dialect: str) -> str:
    """Why the offline writer cannot write SQL for a question, in plain words for the person who asked.

    Says what it understood, which words it could not map to the data, and what the data holds.
    """
    text = normalize_text(question)
    spans = match_phrases(text, catalog) if text else []
    intent = interpret(question, catalog) if text else None
    lines = ["The offline SQL writer (keyword matching over the data catalog, not a language model) could not "
             "turn this question into a query."]  # fmt: skip
    if text and DOCUMENT_WORDS.search(text):
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
