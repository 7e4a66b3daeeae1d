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
(``INSTRUCTION_CHUNK_SHARE`` of its characters) is dropped whole, so it is not cited either."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shared.ingest.text import bound_snippet
from shared.jobs.claims import Claim, Evidence
from shared.jobs.contracts import AnswerResult, Chunk, Citation, SqlResult
from shared.providers.llm.offline.passages import (
    INSTRUCTION_CHUNK_SHARE,
    KEEP_CHUNK_COVERAGE,
    MAX_QUOTE_CHARS,
    MAX_SENTENCE_CHARS,
    MIN_CHUNK_COVERAGE,
    Coverage,
    ScoredSentence,
    content_terms,
    coverage,
    instruction_share,
    key_terms,
    not_found_sentence,
    quoted_list,
    select_sentences,
)
from shared.providers.llm.offline.sql_summary import sql_table, summarize_sql_claims

NOTHING_FOUND = "I could not find anything relevant to this question in the available documents or data."


DOCS_NOT_RELEVANT = "The retrieved documents do not address this question."


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
    part: str, chunks: Sequence[Chunk], used: dict[int, ScoredSentence]
) -> tuple[list[tuple[ScoredSentence, str]], Coverage]:
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
        stems = set(content_terms(word)) or {word}
        usable = [i for i in usable if stems & set(content_terms(chunks[i].content))]
        if not usable:
            return [], Coverage([0.0] * len(chunks), [word, *cover.missing])
    picked = select_sentences(part, [chunks[i] for i in usable])
    out: list[tuple[ScoredSentence, str]] = []
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
    used: dict[int, ScoredSentence] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)
    claims: list[Claim] = field(default_factory=list)

    def quote(self, found: Sequence[tuple[ScoredSentence, str]], contents: Mapping[str, str]) -> None:
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
        detail = f" They do not mention {quoted_list(missing[:5])}." if missing else ""
        return AnswerResult(answer=DOCS_NOT_RELEVANT + detail, citations=[])
    parts += docs.unanswered
    if not parts:
        return AnswerResult(answer=NOTHING_FOUND, citations=[])
    return AnswerResult(answer="\n\n".join(parts), citations=citations, claims=claims)
