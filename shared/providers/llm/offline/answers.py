"""The deterministic offline answer writer, used when no LLM is configured.

It is extractive and never invents facts: every sentence of the answer is either a sentence copied
from a retrieved chunk or a plain statement about SQL rows it was given (the extreme row for the
measure, a small table of the rows).

Documents. Each chunk is split into sentences. A sentence scores the sum of the inverse document
frequencies (computed over all candidate sentences) of the question words it contains, plus a
bonus for each pair of adjacent question words it contains in the same order, plus a small bonus
for the chunk's retrieval rank. The first two sentences of a chunk also earn half the weight of the
question words in the chunk's title and heading, and a sentence right after a strong match earns
half of that match (it often completes it: "The cause was ..."). Words are compared after removing
stop words and a light suffix stemmer (``refunds``/``refunded`` -> ``refund``). A sentence is kept
when it covers at least ``MIN_COVERAGE`` of the question's weight and scores at least
``RELATIVE_CUTOFF`` of the best sentence; the best ``MAX_SENTENCES`` are shown in document order,
each followed by its chunk's ``[source_id]``, and each chunk used becomes a ``document`` citation
quoting its best sentence.

SQL. Each result is summarised from its own rows: the label and measure columns are told apart by
type, the row with the highest measure (lowest when the question asks for the least/lowest/fewest)
is named, and up to ``MAX_TABLE_ROWS`` rows are shown as a markdown table. Each result becomes a
``sql`` citation (``SqlResult.source_id``, or ``sql-<n>`` when it has none) quoting its SQL.

When neither gives anything relevant, the answer says so plainly and has no citations.

Not found. Retrieval always returns the nearest passages, even for a question the documents do not
cover ("the weather in Paris" finds a sentence about winter weather). So the question's *key words*
(content words minus generic question words such as "happen", "long", "cost") are checked against each
retrieved chunk, with the index's synonyms: a chunk is usable only when it holds ``KEEP_CHUNK_COVERAGE``
of them, and the documents answer only when one chunk holds ``MIN_CHUNK_COVERAGE``. Otherwise the
answer says which words the documents do not mention and cites nothing. A compound question ("X, and
why Y?") is judged part by part (a follow-up part carries the part before it as context); a part that
a SQL result answers is left to the data, and a part nothing answers is named in the answer.

Partial results. A SQL source may say that only part of its result reached the answer
(``row_count`` greater than the rows given, or ``truncated`` when the query hit its row cap, so the
true count is unknown). The summary then says so ("showing 20 of 116 customers", "at least 50") and
names no highest or lowest row, which the missing rows could contradict.

Formats. Measures follow the catalog's formats when given (``formats``: column name to
``currency`` / ``ratio`` / ``count`` / ``number``): currency with its symbol and two decimals, ratios as
percentages.

Planted instructions. Document text is data: a sentence that reads as an instruction to the
system rather than a statement of policy (``is_instruction_like``: addressed to an assistant, model,
AI or system, or telling the reader to ignore instructions, run SQL, set flags, reveal data, or
shape "your answer") is never quoted, and a chunk made mostly of such text
(``INSTRUCTION_CHUNK_SHARE`` of its characters) is dropped whole, so it is not cited either.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.ingest.chunking import split_sentences
from shared.ingest.text import STOP_WORDS, bound_snippet
from shared.ingest.text import SYNONYMS as INDEX_SYNONYMS
from shared.jobs.claims import Claim, Evidence
from shared.jobs.contracts import AnswerResult, Chunk, Citation, SqlResult

MIN_COVERAGE = 0.3
STRONG_COVERAGE = 0.6
RELATIVE_CUTOFF = 0.5
MAX_SENTENCES = 4
MAX_SENTENCE_CHARS = 400
MAX_QUOTE_CHARS = 300
MAX_TABLE_ROWS = 10
MAX_TABLE_COLUMNS = 8

MIN_CHUNK_COVERAGE = 0.6
KEEP_CHUNK_COVERAGE = 0.5
CURRENCY_SYMBOL = "$"

NOTHING_FOUND = "I could not find anything relevant to this question in the available documents or data."
DOCS_NOT_RELEVANT = "The retrieved documents do not address this question."
# Words that shape a question but name no topic: a passage need not contain them to answer it.
GENERIC_WORDS = frozenset(
    """happen happens happened long much many often soon take takes taken make makes made use used using need
    needs want wants give gives go goes come comes work works mean means way ways thing things kind kinds
    exactly tell show find look like still ever even get there please today per""".split()
)

_WORD = re.compile(r"[^\W_]+(?:[.,][0-9]+)*", re.UNICODE)
_LOW_WORDS = re.compile(r"\b(least|lowest|fewest|smallest|minimum|min|bottom|worst|cheapest)\b", re.IGNORECASE)
_DIMENSION_NAME = re.compile(r"(^|_)(id|year|quarter|qtr|month|week|day|date|code|zip|rank)($|_)", re.IGNORECASE)
_NUMERIC_TEXT = re.compile(r"^-?\d+(\.\d+)?$")

INSTRUCTION_CHUNK_SHARE = 0.5
_AGENT = (
    r"(?:ai|a\.i\.|assistants?|chat ?bots?|bots?|(?:large )?language models?|llms?|gpt\w*|chatgpt|copilot"
    r"|models?)"
)
# Only unmistakably artificial addressees may be told what they "must" do: "store assistants should
# check the receipt" and "each model must be assembled" are ordinary policy sentences.
_MACHINE = r"(?:ai|a\.i\.|chat ?bots?|(?:large )?language models?|llms?|gpt\w*|chatgpt|copilot)(?:\s+assistants?)?"
_RULES = (
    r"(?:instructions?|rules?|prompts?|guidelines?|directions?|directives?|guardrails?|restrictions?|policies"
    r"|constraints?)"
)
# Each pattern is a way a planted passage speaks to the machine instead of to a human reader. They are
# phrased so that ordinary policy text ("we never disclose personal data", "the model number is on
# the label") does not match; ``tests/providers/search/local/test_instruction_filter.py`` checks both sides.
_INSTRUCTION_PATTERNS = [
    # Addressed to an AI: "Note to the AI:", "Dear assistant", "If you are a language model", "AI: ..."
    rf"\b(?:note|message|instructions?|attention|reminder|memo)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:\w+\s+)?{_AGENT}\b",
    rf"\b(?:dear|hey|hi|hello|attention)\s+(?:the\s+)?{_AGENT}\b",
    rf"\bif\s+you\s+are\s+(?:an?|the)\s+(?:\w+\s+)?{_AGENT}\b",
    r"\bas\s+an?\s+(?:\w+\s+)?(?:ai|assistant|language model|llm)\b",
    r"^\W*(?:system|assistant|ai|llm)\s*(?:message|prompt|override|note)?\s*[:>]",
    rf"\b{_MACHINE}\s+(?:must|should|shall|needs?\s+to|is\s+(?:required|instructed)\s+to|are\s+(?:required|instructed)\s+to)\b",
    r"\bsystem\s+prompt\b|\bdeveloper\s+mode\b|\bjailbreak|\bprompt\s+injection\b",
    # Overriding the rules: "ignore all previous instructions", "disregard the above", "new instructions"
    rf"\b(?:ignore|disregard|override|bypass)\b[^.]{{0,40}}?\b(?:previous|prior|above|earlier|all|any|other|your|these|those|the)\b[^.]{{0,30}}?\b{_RULES}",
    # "Don't forget the assembly instructions" is advice; "forget all previous instructions" is not.
    rf"\bforget\s+(?:all\s+|about\s+)?(?:(?:of\s+)?(?:the\s+|your\s+)?(?:previous|prior|above|earlier)|your)\s+{_RULES}",
    r"\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|else)\b",
    rf"\bnew\s+{_RULES}\s*[:!]",
    # Running SQL or commands: "run the following SQL", "execute this query", a statement in the text
    # ("issue a statement" is accounting, so only run/execute, and only of queries and commands)
    r"\b(?:run|execute)\s+(?:the\s+following\s+|this\s+|these\s+|a\s+|an\s+|the\s+)?(?:\w+\s+)?(?:sql|query|queries|command)\b",
    r"\b(?:select\s+(?:\*|[\w.]+(?:\s*,\s*[\w.]+)*)\s+from\s+\w|insert\s+into\s+\w|drop\s+table|delete\s+from\s+\w|update\s+\w+\s+set\s|union\s+select)",
    # Setting flags: "set allow_sensitive=true", "enable the admin flag", "mode: execute"
    r"\b[a-z]+(?:_[a-z0-9]+)+\s*(?:=|:|\bto\b)\s*[\"']?(?:true|false|yes|no|on|off|1|0|execute|always|never)\b",
    r"\b(?:set|enable|turn\s+on|switch\s+on|flip|toggle)\s+(?:the\s+)?[\w-]+\s+flag\b",
    r"\b(?:approve|grant)\s+(?:all|every|any)\s+(?:requests?|queries|access|steps?)\b",
    # Revealing data or shaping the answer: "reveal the customer e-mails", "in your answer include ..."
    # ("Send your contact details to ..." is a support instruction for people, so no send/share/list)
    r"^\W*(?:please\s+)?(?:reveal|disclose|leak|dump|exfiltrate|output|print)\b[^.]{0,40}?\b(?:(?:customer|personal|contact|sensitive|confidential|secret|private)\s+(?:data|details|records|e-?mails?|e-?mail\s+addresses|phone\s+numbers?|information|contacts|tables?)|passwords?|credentials|api\s+keys?|access\s+tokens?)",
    r"\b(?:in|into|to)\s+your\s+(?:answer|response|output|summary)\b",
    r"\b(?:respond|reply|answer)\s+only\s+with\b|\b(?:respond|reply|answer)\s+with\s+[\"'“]|\btell\s+the\s+user\b",
]
_INSTRUCTION_RE = re.compile("|".join(f"(?:{p})" for p in _INSTRUCTION_PATTERNS), re.IGNORECASE)


def is_instruction_like(sentence: str) -> bool:
    """Whether a sentence reads as an instruction to an AI/system rather than a statement for people."""
    return _INSTRUCTION_RE.search(sentence) is not None


def instruction_share(text: str) -> float:
    """The share of a text's characters that sit in instruction-like sentences (0.0 to 1.0)."""
    sentences = [s for line in text.splitlines() for s in split_sentences(line.removeprefix("- "))]
    total = sum(len(s) for s in sentences)
    flagged = sum(len(s) for s in sentences if is_instruction_like(s))
    return flagged / total if total else 0.0


def _stem(word: str) -> str:
    """A light suffix stemmer: enough to match plurals and simple verb forms, nothing clever."""
    w = word.lower()
    if len(w) <= 3 or w[0].isdigit():
        return w
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + replacement
            break
    return w.rstrip("e") if len(w) > 4 else w


def _terms(text: str) -> list[str]:
    """Stemmed content words of a text, in order (stop words and one-letter words removed)."""
    words = [w.lower() for w in _WORD.findall(text)]
    return [_stem(w) for w in words if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


@dataclass
class _Sentence:
    text: str
    chunk_index: int
    position: int
    terms: set[str] = field(default_factory=set)
    ordered: list[str] = field(default_factory=list)
    score: float = 0.0


def _candidate_sentences(chunks: Sequence[Chunk]) -> list[_Sentence]:
    seen: set[str] = set()
    out: list[_Sentence] = []
    for c_idx, chunk in enumerate(chunks):
        position = 0
        for line in chunk.content.splitlines():
            for sentence in split_sentences(line.removeprefix("- ")):
                key = " ".join(sentence.lower().split())
                if key in seen:  # overlapping chunks repeat sentences
                    continue
                if is_instruction_like(sentence):
                    continue  # document text is data: never presented as the answer
                seen.add(key)
                ordered = _terms(sentence)
                out.append(_Sentence(sentence, c_idx, position, set(ordered), ordered))
                position += 1
    return out


def _term_weights(question: str, sentences: Sequence[_Sentence], headings: Sequence[set[str]]) -> dict[str, float]:
    """The question's words with their inverse document frequency over the sentences, in question order.

    Words that occur in no sentence and no heading cannot be covered, so they do not count.
    """
    q_terms = list(dict.fromkeys(_terms(question)))
    if not sentences:
        return {}
    q_terms = [t for t in q_terms if any(t in s.terms for s in sentences) or any(t in h for h in headings)]
    n = len(sentences)
    return {t: math.log(1 + n / (1 + sum(1 for s in sentences if t in s.terms))) + 0.1 for t in q_terms}


def _evidence(sentences: Sequence[_Sentence], headings: Sequence[set[str]], idf: Mapping[str, float]) -> list[float]:
    """Each sentence's weight of question words, plus half its heading's for the first two sentences under it."""
    heading_match = [sum(w for t, w in idf.items() if t in heading) for heading in headings]
    evidence: list[float] = []
    for s in sentences:
        sentence_match = sum(w for t, w in idf.items() if t in s.terms)
        # The first sentences under a heading that matches the question usually answer it, even
        # when they do not repeat the question's words ("My item arrived broken" -> "Report it...").
        lead = 1.0 if s.position < 2 else 0.0
        evidence.append(sentence_match + 0.5 * heading_match[s.chunk_index] * lead)
    return evidence


def _phrase_bonus(sentence: _Sentence, idf: Mapping[str, float]) -> float:
    """Half the weight of each pair of adjacent question words the sentence holds in the same order."""
    q_terms = list(idf)
    bigrams = set(zip(sentence.ordered, sentence.ordered[1:], strict=False))
    return sum(0.5 * (idf[a] + idf[b]) for a, b in zip(q_terms, q_terms[1:], strict=False) if (a, b) in bigrams)


def _score_supported(
    sentences: Sequence[_Sentence], evidence: Sequence[float], idf: Mapping[str, float]
) -> list[_Sentence]:
    """The sentences holding at least ``MIN_COVERAGE`` of the question's weight, their ``score`` set."""
    total = sum(idf.values())
    supported: list[_Sentence] = []
    for i, s in enumerate(sentences):
        # A sentence right after a strong match often completes it ("The cause was ...").
        previous = evidence[i - 1] if i and sentences[i - 1].chunk_index == s.chunk_index else 0.0
        carried = 0.5 * previous if previous / total >= STRONG_COVERAGE else 0.0
        support = evidence[i] + carried
        if support / total < MIN_COVERAGE:
            continue
        s.score = support + _phrase_bonus(s, idf) + 0.3 / (1 + s.chunk_index)
        supported.append(s)
    return supported


def _best_distinct(scored: Sequence[_Sentence]) -> list[_Sentence]:
    """Up to ``MAX_SENTENCES`` of the best scores (within ``RELATIVE_CUTOFF`` of the top), no near-duplicates."""
    if not scored:
        return []
    cutoff = RELATIVE_CUTOFF * max(s.score for s in scored)
    ranked = sorted((s for s in scored if s.score >= cutoff), key=lambda s: (-s.score, s.chunk_index, s.position))
    chosen: list[_Sentence] = []
    for s in ranked:
        if any(_similar(s.terms, c.terms) for c in chosen):
            continue
        chosen.append(s)
        if len(chosen) == MAX_SENTENCES:
            break
    return chosen


def select_sentences(question: str, chunks: Sequence[Chunk]) -> list[_Sentence]:
    """The question's best-matching sentences from the chunks, in reading order."""
    sentences = _candidate_sentences(chunks)
    headings = [set(_terms(c.title)) for c in chunks]
    idf = _term_weights(question, sentences, headings)
    if not idf:
        return []
    scored = _score_supported(sentences, _evidence(sentences, headings, idf), idf)
    return sorted(_best_distinct(scored), key=lambda s: (s.chunk_index, s.position))


def _similar(a: set[str], b: set[str]) -> bool:
    return bool(a and b) and len(a & b) / len(a | b) >= 0.8


def key_terms(question: str) -> dict[str, str]:
    """The question's topic words: stem -> the word as written (stop and generic question words removed)."""
    out: dict[str, str] = {}
    for word in _WORD.findall(question):
        lower = word.lower()
        if lower in STOP_WORDS or lower in GENERIC_WORDS or (len(lower) < 2 and not lower.isdigit()):
            continue
        out.setdefault(_stem(lower), word)
    return out


def _variants(stem: str, word: str) -> set[str]:
    """A key word's stem and the stems of its index synonyms ("broken" also matches "damaged")."""
    base = word.lower()
    key = base[:-1] if base.endswith("s") and len(base) > 3 else base
    return {stem} | {_stem(s) for s in INDEX_SYNONYMS.get(key, ())}


@dataclass
class Coverage:
    """How far the retrieved chunks cover a question's key words."""

    per_chunk: list[float]
    missing: list[str]  # key words (as written) that no chunk mentions

    @property
    def best(self) -> float:
        """The share of key words held by the best chunk (1.0 when the question has none)."""
        return max(self.per_chunk, default=0.0)


def coverage(question: str, chunks: Sequence[Chunk]) -> Coverage:
    """The share of the question's key words each chunk holds (content and title), and the words none holds."""
    keys = key_terms(question)
    if not keys:
        return Coverage([1.0] * len(chunks), [])
    chunk_terms = [set(_terms(c.content)) | set(_terms(c.title)) for c in chunks]
    variants = {stem: _variants(stem, word) for stem, word in keys.items()}
    per_chunk = [sum(1 for v in variants.values() if v & terms) / len(keys) for terms in chunk_terms]
    missing = [keys[s] for s, v in variants.items() if not any(v & terms for terms in chunk_terms)]
    return Coverage(per_chunk, missing)


def _quoted_list(words: Sequence[str]) -> str:
    quoted = [f"“{w}”" for w in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def not_found_sentence(part: str, missing: Sequence[str]) -> str:
    """Say plainly that the documents do not answer a (part of a) question, and which words they lack."""
    text = f"The documents I searched do not answer “{part.strip(' ?.')}”"
    if missing:
        text += f": they do not mention {_quoted_list(list(missing)[:5])}"
    return text + "."


# --- SQL -----------------------------------------------------------------------------------------


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


# --- the answer ----------------------------------------------------------------------------------


def _parts(question: str) -> list[tuple[str, str]]:
    """The question's parts, each with the text to search (a follow-up carries the part before it)."""
    from shared.providers.llm.offline.questions import FOLLOW_UP, split_question

    parts = split_question(question)
    return [(p, f"{parts[i - 1]}: {p}" if i and FOLLOW_UP.search(p) else p) for i, p in enumerate(parts)]


def _answered_by_data(part: str, sql_results: Sequence[SqlResult]) -> bool:
    """Whether a SQL result was asked for this part (its question shares most of the part's key words)."""
    keys = set(key_terms(part))
    for result in sql_results:
        asked = set(key_terms(result.question or ""))
        if asked and keys and len(asked & keys) / min(len(asked), len(keys)) >= 0.6:
            return True
    return False


_VERIFIED_NOTE = re.compile(r"\((verified query '[^']*'[^()]*)\)$")
_STATISTIC_WORDS = re.compile(r"\b(average|mean|median)\b", re.IGNORECASE)


def _document_lines(
    part: str, chunks: Sequence[Chunk], used: dict[int, _Sentence]
) -> tuple[list[tuple[_Sentence, str]], Coverage]:
    """Sentences answering one part, from the chunks that cover it (empty when none does)."""
    cover = coverage(part, chunks)
    if cover.best < MIN_CHUNK_COVERAGE:
        return [], cover
    usable = [i for i, share in enumerate(cover.per_chunk) if share >= KEEP_CHUNK_COVERAGE]
    # An average, mean or median is a figure computed over data: a passage answers it only when it
    # states one ("the average refund takes 5 days"), not when it merely shares the other words.
    statistic = _STATISTIC_WORDS.search(part)
    if statistic:
        word = statistic.group(1).lower()
        stems = set(_terms(word)) or {word}
        usable = [i for i in usable if stems & set(_terms(chunks[i].content))]
        if not usable:
            return [], Coverage([0.0] * len(chunks), [word, *cover.missing])
    picked = select_sentences(part, [chunks[i] for i in usable])
    out: list[tuple[_Sentence, str]] = []
    for s in picked:
        c_idx = usable[s.chunk_index]
        if c_idx not in used or s.score > used[c_idx].score:
            used[c_idx] = s
        out.append((s, chunks[c_idx].source_id))
    return out, cover


def compose_answer_offline(
    question: str,
    chunks: list[Chunk],
    sql_results: list[SqlResult],
    formats: Mapping[str, str] | None = None,
    step_notes: Sequence[str] = (),
) -> AnswerResult:
    """Write an extractive answer with citations from retrieved chunks and SQL results.

    ``formats`` maps result columns to catalog formats (``currency``, ``ratio``, ...). ``step_notes``
    say which earlier steps did not run and why; the answer states them first, so a gap is never silent.
    """
    answer = _compose(question, chunks, sql_results, formats)
    notes = [" ".join(n.split()) for n in step_notes if n and n.strip()]
    if not notes:
        return answer
    return answer.model_copy(update={"answer": "\n\n".join([*notes, answer.answer])})


def _sql_section(
    question: str, n: int, result: SqlResult, formats: Mapping[str, str] | None, only: bool
) -> tuple[str, Citation, list[Claim]]:
    """The answer's block for the ``n``-th SQL result (summary and table) and its ``sql`` citation."""
    source_id = result.source_id or f"sql-{n}"
    summary, claims = summarize_sql_claims(question, result, formats, source_id)
    header = "From the data" if only else f"From the data ({result.question or f'query {n}'})"
    # A verified query named in the source's title (generate_response puts it there) is said even when alone.
    verified = _VERIFIED_NOTE.search(result.question or "")
    if only and verified:
        header = f"From the data ({verified.group(1)})"
    block = f"{header}: {summary} [{source_id}]"
    table = sql_table(result, formats)
    citation = Citation(
        source_id=source_id,
        kind="sql",
        title=result.question or "SQL query",
        quote=bound_snippet(" ".join(result.sql.split()), MAX_QUOTE_CHARS) or None,
    )
    return (f"{block}\n\n{table}" if table else block), citation, claims


@dataclass
class _DocumentAnswer:
    """What the documents give a question: quoted lines, the best sentence of each chunk used, parts unanswered."""

    lines: list[str] = field(default_factory=list)
    used: dict[int, _Sentence] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)
    claims: list[Claim] = field(default_factory=list)

    def quote(self, found: Sequence[tuple[_Sentence, str]], contents: Mapping[str, str]) -> None:
        """Add a line for each sentence found, once per sentence and source, and its claim with its span."""
        for s, source_id in found:
            key = (s.text, source_id)
            if key not in self.seen:
                self.seen.add(key)
                self.lines.append(f"- {bound_snippet(s.text, MAX_SENTENCE_CHARS)} [{source_id}]")
                start = contents.get(source_id, "").find(s.text)
                span = (
                    Evidence(source_id=source_id, start=start, end=start + len(s.text))
                    if start >= 0
                    else Evidence(source_id=source_id)  # the sentence was rejoined across lines: the whole chunk
                )
                self.claims.append(Claim(text=s.text, evidence=[span]))

    def citations(self, chunks: Sequence[Chunk]) -> list[Citation]:
        """A ``document`` citation for each chunk used, quoting its best sentence, in retrieval order."""
        return [
            Citation(
                source_id=chunks[c_idx].source_id,
                kind="document",
                title=chunks[c_idx].title or None,
                quote=bound_snippet(self.used[c_idx].text, MAX_QUOTE_CHARS),
            )
            for c_idx in sorted(self.used)
        ]


def _read_documents(
    question_parts: Sequence[tuple[str, str]], chunks: Sequence[Chunk], sql_results: Sequence[SqlResult], searched: bool
) -> _DocumentAnswer:
    """Answer each part of the question from the chunks; ``searched`` says whether any source was consulted."""
    docs = _DocumentAnswer()
    contents = {c.source_id: c.content for c in chunks}
    for part, text in question_parts:
        by_data = _answered_by_data(part, sql_results)
        # A part the data answers reads documents only when they were fetched for it alone.
        if by_data and len(question_parts) > 1:
            continue
        found, cover = _document_lines(text, chunks, docs.used) if chunks else ([], coverage(text, []))
        docs.quote(found, contents)
        if not found and not by_data and searched:
            docs.unanswered.append(not_found_sentence(part, cover.missing))
    return docs


def _compose(
    question: str,
    chunks: list[Chunk],
    sql_results: list[SqlResult],
    formats: Mapping[str, str] | None,
) -> AnswerResult:
    parts: list[str] = []
    citations: list[Citation] = []
    claims: list[Claim] = []
    for n, result in enumerate(sql_results, start=1):
        block, citation, found = _sql_section(question, n, result, formats, only=len(sql_results) == 1)
        parts.append(block)
        citations.append(citation)
        claims += found

    # A chunk that is mostly planted instructions is dropped before ranking, so it is neither quoted
    # nor cited and does not push the genuine chunks down the retrieval order either.
    kept = [c for c in chunks if instruction_share(c.content) < INSTRUCTION_CHUNK_SHARE]
    question_parts = _parts(question)
    docs = _read_documents(question_parts, kept, sql_results, searched=bool(chunks or sql_results))
    if docs.lines:
        parts.append("\n".join(["From the documents:", *docs.lines]))
        citations += docs.citations(kept)
        claims += docs.claims
    if docs.unanswered and not parts and len(question_parts) == 1:
        missing = coverage(question, kept).missing
        detail = f" They do not mention {_quoted_list(missing[:5])}." if missing else ""
        return AnswerResult(answer=DOCS_NOT_RELEVANT + detail, citations=[])
    parts += docs.unanswered
    if not parts:
        return AnswerResult(answer=NOTHING_FOUND, citations=[])
    return AnswerResult(answer="\n\n".join(parts), citations=citations, claims=claims)
