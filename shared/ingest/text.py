"""Text utilities shared by indexing, retrieval and the offline model: stop words, synonyms, snippets."""

from __future__ import annotations

# Longest snippet a retriever returns for one chunk.
MAX_SNIPPET_CHARS = 800

STOP_WORDS = frozenset(
    """a about above again against all am an and any are as at be been being both but by can could did do
    does doing down during each few for from further had has have having he her here hers him his i if in
    into is it its itself just me more most my myself no nor not of off on once only or other our ours out
    own same she should so some such than that the their theirs them then there these they this those
    through to too up very was we were what when where which while who whom why will with would you your
    yours how say says said tell explain describe please know anything something us let get got much many
    does did also there's what's i'm""".split()
)

# Domain synonyms: a query word (lower case, trailing "s" removed) also matches these words.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "broken": ("damaged", "defective"),
    "broke": ("damaged", "defective"),
    "faulty": ("defective",),
    "damage": ("broken",),
    "guarantee": ("warranty",),
    "delivery": ("shipping",),
    "deliver": ("shipping",),
    "ship": ("delivery",),
    "shipping": ("delivery",),
    "cost": ("price", "fee"),
    "charge": ("fee",),
    "coupon": ("promotional", "code"),
    "promo": ("promotional",),
    "voucher": ("promotional", "code"),
    "gdpr": ("privacy", "personal"),
    "delete": ("deletion",),
    "erase": ("deletion",),
    "late": ("delayed",),
    "lost": ("missing",),
    "money": ("refund",),
    "reimbursement": ("refund",),
    "cancel": ("cancellation",),
    "point": ("rewards",),
    "membership": ("loyalty",),
    "wholesale": ("corporate", "business"),
    "b2b": ("corporate", "business"),
    "company": ("corporate", "business"),
    "exchange": ("replacement",),
    "recall": ("safety",),
    "complaint": ("escalation",),
    "keep": ("retention", "retained", "kept"),
    "store": ("retention", "stored"),
    "stolen": ("lost",),
}


def bound_snippet(text: str, limit: int = MAX_SNIPPET_CHARS) -> str:
    """Cut text to at most ``limit`` characters at a word boundary, marking the cut with ``…``."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"
