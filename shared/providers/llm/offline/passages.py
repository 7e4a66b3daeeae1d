"""The offline writer's reading of documents: sentence scoring, key-term coverage, planted instructions.

See ``shared.providers.llm.offline.answers`` for how an answer is composed from these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shared.ingest.chunking import split_sentences
from shared.ingest.text import STOP_WORDS
from shared.ingest.text import SYNONYMS as INDEX_SYNONYMS
from shared.jobs.contracts import Chunk

MIN_COVERAGE = 0.3


STRONG_COVERAGE = 0.6


RELATIVE_CUTOFF = 0.5


MAX_SENTENCES = 4


MAX_SENTENCE_CHARS = 400


MAX_QUOTE_CHARS = 300


MIN_CHUNK_COVERAGE = 0.6


KEEP_CHUNK_COVERAGE = 0.5


# Words that shape a question but name no topic: a passage need not contain them to answer it.
GENERIC_WORDS = frozenset(
    """happen happens happened long much many often soon take takes taken make makes made use used using need
    needs want wants give gives go goes come comes work works mean means way ways thing things kind kinds
    exactly tell show find look like still ever even get there please today per""".split()
)


_WORD = re.compile(r"[^\W_]+(?:[.,][0-9]+)*", re.UNICODE)


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


def content_terms(text: str) -> list[str]:
    """Stemmed content words of a text, in order (stop words and one-letter words removed)."""
    words = [w.lower() for w in _WORD.findall(text)]
    return [_stem(w) for w in words if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


@dataclass
class ScoredSentence:
    text: str
    chunk_index: int
    position: int
    terms: set[str] = field(default_factory=set)
    ordered: list[str] = field(default_factory=list)
    score: float = 0.0


def _candidate_sentences(chunks: Sequence[Chunk]) -> list[ScoredSentence]:
    seen: set[str] = set()
    out: list[ScoredSentence] = []
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
                ordered = content_terms(sentence)
                out.append(ScoredSentence(sentence, c_idx, position, set(ordered), ordered))
                position += 1
    return out


def _term_weights(question: str, sentences: Sequence[ScoredSentence], headings: Sequence[set[str]]) -> dict[str, float]:
    """The question's words with their inverse document frequency over the sentences, in question order.

    Words that occur in no sentence and no heading cannot be covered, so they do not count.
    """
    q_terms = list(dict.fromkeys(content_terms(question)))
    if not sentences:
        return {}
    q_terms = [t for t in q_terms if any(t in s.terms for s in sentences) or any(t in h for h in headings)]
    n = len(sentences)
    return {t: math.log(1 + n / (1 + sum(1 for s in sentences if t in s.terms))) + 0.1 for t in q_terms}


def _evidence(
    sentences: Sequence[ScoredSentence], headings: Sequence[set[str]], idf: Mapping[str, float]
) -> list[float]:
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


def _phrase_bonus(sentence: ScoredSentence, idf: Mapping[str, float]) -> float:
    """Half the weight of each pair of adjacent question words the sentence holds in the same order."""
    q_terms = list(idf)
    bigrams = set(zip(sentence.ordered, sentence.ordered[1:], strict=False))
    return sum(0.5 * (idf[a] + idf[b]) for a, b in zip(q_terms, q_terms[1:], strict=False) if (a, b) in bigrams)


def _score_supported(
    sentences: Sequence[ScoredSentence], evidence: Sequence[float], idf: Mapping[str, float]
) -> list[ScoredSentence]:
    """The sentences holding at least ``MIN_COVERAGE`` of the question's weight, their ``score`` set."""
    total = sum(idf.values())
    supported: list[ScoredSentence] = []
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


def _best_distinct(scored: Sequence[ScoredSentence]) -> list[ScoredSentence]:
    """Up to ``MAX_SENTENCES`` of the best scores (within ``RELATIVE_CUTOFF`` of the top), no near-duplicates."""
    if not scored:
        return []
    cutoff = RELATIVE_CUTOFF * max(s.score for s in scored)
    ranked = sorted((s for s in scored if s.score >= cutoff), key=lambda s: (-s.score, s.chunk_index, s.position))
    chosen: list[ScoredSentence] = []
    for s in ranked:
        if any(_similar(s.terms, c.terms) for c in chosen):
            continue
        chosen.append(s)
        if len(chosen) == MAX_SENTENCES:
            break
    return chosen


def select_sentences(question: str, chunks: Sequence[Chunk]) -> list[ScoredSentence]:
    """The question's best-matching sentences from the chunks, in reading order."""
    sentences = _candidate_sentences(chunks)
    headings = [set(content_terms(c.title)) for c in chunks]
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
    chunk_terms = [set(content_terms(c.content)) | set(content_terms(c.title)) for c in chunks]
    variants = {stem: _variants(stem, word) for stem, word in keys.items()}
    per_chunk = [sum(1 for v in variants.values() if v & terms) / len(keys) for terms in chunk_terms]
    missing = [keys[s] for s, v in variants.items() if not any(v & terms for terms in chunk_terms)]
    return Coverage(per_chunk, missing)


def quoted_list(words: Sequence[str]) -> str:
    """Words in curly quotes joined as English: “a”, “b” or “c”."""
    quoted = [f"“{w}”" for w in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def not_found_sentence(part: str, missing: Sequence[str]) -> str:
    """Say plainly that the documents do not answer a (part of a) question, and which words they lack."""
    text = f"The documents I searched do not answer “{part.strip(' ?.')}”"
    if missing:
        text += f": they do not mention {quoted_list(list(missing)[:5])}"
    return text + "."
