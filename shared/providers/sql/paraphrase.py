"""Whether a question rewords a verified query's template: the same request in other words, never another one.

No model: both texts are reduced to their canonical content words and compared as sets.

- Phrases first (``how many`` / ``number of`` → ``count``, ``third quarter`` → ``q3``, ``how much`` → ``total
  amount``), then words: the catalog's own synonyms (``area``, ``territory`` → ``region``; ``purchases`` →
  ``orders``) and a small table of question words (``highest``/``top`` → ``most``, ``excluding``/``not`` →
  ``not``, ``per``/``by`` → ``each``), then the Snowball stemmer (``refunded`` → ``refund``).
- A catalog synonym whose word names a metric of its own is left out (``refunds`` → ``returns`` would make the
  refund amount the return count).
- Each slot takes exactly one of its allowed values, matched as written, stemmed, or as the compass adjective
  (``western`` → ``West``); two values for one slot, or none, is no match.
- What remains must be the same set on both sides, apart from filler (the verbs and prepositions that join a
  request together: ``came in through``, ``have``, ``total``) and the slot's own noun (``the West`` is ``the
  West region``). Any other word on one side only (another quarter, ``average``, ``not``, ``by channel``,
  a number, a word the table does not know) means another question: precision first, a wrong verified query
  is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache

import snowballstemmer

SLOT = re.compile(r"\{([a-z][a-z0-9_]{0,31})\}")
_TOKEN = re.compile(r"[a-z0-9]+")
_ORDINALS = {"1": ("first", "1st", "one"), "2": ("second", "2nd", "two"), "3": ("third", "3rd", "three"),
             "4": ("fourth", "4th", "four")}  # fmt: skip

# Multi-word phrases of a question, longest first when applied (the catalog's multi-word synonyms join them).
PHRASES: dict[str, str] = {
    "how many": "count",
    "total number of": "count",
    "number of": "count",
    "count of": "count",
    "how much": "total amount",
    "in total": "total",
    "by way of": "via",
    "came in": "arrive",
    "come in": "arrive",
    "coming in": "arrive",
    "returned items": "return",
    "returned item": "return",
    "returned products": "return",
    "returned order lines": "return",
    **{f"{o} quarter": f"q{n}" for n, words in _ORDINALS.items() for o in words},
    **{f"quarter {o}": f"q{n}" for n, words in _ORDINALS.items() for o in (n, *words)},
}
# Single words that say the same thing in a question (applied before stemming).
WORDS: dict[str, str] = {
    "avg": "average",
    "mean": "average",
    "highest": "most",
    "max": "most",
    "maximum": "most",
    "top": "most",
    "largest": "most",
    "biggest": "most",
    "greatest": "most",
    "lowest": "least",
    "fewest": "least",
    "min": "least",
    "minimum": "least",
    "smallest": "least",
    "excluding": "not",
    "except": "not",
    "without": "not",
    "never": "not",
    "no": "not",
    "non": "not",
    "nt": "not",
    "per": "each",
    "every": "each",
    "by": "each",
    "sum": "total",
    "overall": "total",
    "altogether": "total",
    "combined": "total",
    "placed": "arrive",
    "received": "arrive",
    "submitted": "arrive",
    "through": "via",
    "using": "via",
}
# Dropped before comparing: articles, scope prepositions, auxiliaries, the request's own wording.
STOP = frozenset(
    """a an the of in on at for during within to into from with and is are was were be been being do does did
    done have has had having what which whats there theres it its this that these those me i we us our you your
    please tell show give know like want would could can let find out didn doesn don wasn weren isn aren haven
    hasn""".split()
)
# Ignored when on one side only: words that join a request together without changing what it asks.
FILLER = frozenset("arrive via came come get got see saw record happen total amount figure value".split())
_COMPASS = {"north", "south", "east", "west"}


@dataclass(frozen=True)
class Vocabulary:
    """The phrase and word tables in force: the built-in ones plus the catalog's synonyms."""

    phrases: Mapping[str, str] = field(default_factory=lambda: dict(PHRASES))
    words: Mapping[str, str] = field(default_factory=lambda: dict(WORDS))


@cache
def _stemmer() -> snowballstemmer.stemmer:
    return snowballstemmer.stemmer("english")


def stem(word: str) -> str:
    """The Snowball (Porter 2) stem of one lower-case word."""
    return str(_stemmer().stemWord(word))


def vocabulary(synonyms: Mapping[str, str], metric_names: Iterable[str]) -> Vocabulary:
    """The tables with the catalog's synonyms added, except those whose word names a metric of its own."""
    metric_words = {stem(w) for name in metric_names for w in name.split("_")}
    phrases, words = dict(PHRASES), dict(WORDS)
    for said, meant in synonyms.items():
        key = " ".join(tokens(said))
        if not key or any(stem(w) in metric_words for w in key.split()):
            continue
        (phrases if " " in key else words)[key] = " ".join(tokens(meant))
    return Vocabulary(phrases=phrases, words=words)


def tokens(text: str) -> list[str]:
    """Lower-case word tokens: possessives and apostrophes go ("region's" → "region", "didn't" → "didn nt")."""
    text = re.sub(r"['’]s\b", "", text.casefold())
    text = re.sub(r"n['’]t\b", " nt", text)
    return _TOKEN.findall(text)


def _phrased(words: list[str], vocab: Vocabulary) -> list[str]:
    text = f" {' '.join(words)} "
    for said in sorted(vocab.phrases, key=lambda p: -len(p.split())):
        text = text.replace(f" {said} ", f" {vocab.phrases[said]} ")
        text = text.replace(f" {said} ", f" {vocab.phrases[said]} ")  # overlapping repeats ("how many how many")
    return text.split()


def content(words: list[str], vocab: Vocabulary) -> set[str]:
    """The canonical content words of a token list, stemmed (phrases, synonyms; stop words dropped)."""
    out: set[str] = set()
    for word in _phrased(words, vocab):
        for part in vocab.words.get(word, word).split():
            canonical = vocab.words.get(part, part)
            if canonical not in STOP:
                out.add(stem(canonical))
    return out


def _value_at(words: list[str], value: str) -> list[int]:
    """Where the value's tokens start in ``words`` (as written, stemmed, or a compass adjective)."""
    want = tokens(value)
    if not want:
        return []

    def same(word: str, wanted: str) -> bool:
        return word == wanted or stem(word) == stem(wanted) or (wanted in _COMPASS and word == f"{wanted}ern")

    n = len(want)
    return [i for i in range(len(words) - n + 1) if all(same(words[i + k], want[k]) for k in range(n))]


def slot_values(words: list[str], variables: Mapping[str, list[str]]) -> tuple[dict[str, str], list[str]] | None:
    """Each slot's one value named in the question, and the words left; None when a slot has none or several."""
    values: dict[str, str] = {}
    left = list(words)
    for name, allowed in variables.items():
        named = [v for v in allowed if _value_at(left, v)]
        if len({v.casefold() for v in named}) != 1:
            return None
        value = named[0]
        for start in reversed(_value_at(left, value)):
            del left[start : start + len(tokens(value))]
        values[name] = value
    return values, left


def reworded(
    question: str, template: str, variables: Mapping[str, list[str]], vocab: Vocabulary
) -> dict[str, str] | None:
    """The slot values when ``question`` asks what ``template`` asks (see the module's rules), else None."""
    found = slot_values(tokens(question), variables)
    if found is None:
        return None
    values, left = found
    asked = content(left, vocab)
    meant = content(tokens(SLOT.sub(" ", template)), vocab)
    nouns = {w for name in variables for w in content(tokens(name.replace("_", " ")), vocab)}
    ignored = {stem(w) for w in FILLER} | nouns
    if not meant - ignored:
        return None  # a template of filler alone says too little to match anything by its words
    return values if asked - ignored == meant - ignored else None
