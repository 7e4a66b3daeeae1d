"""How the offline model reads a question: its parts, which part leans on the one before, what points at documents."""

from __future__ import annotations

import re

# Words that point at the documents (policies, FAQ) rather than at the numbers.
DOC_HINTS = re.compile(
    r"\b(polic(y|ies)|faq|say|says|said|rule|rules|allowed|can i|how do|how does|how long|warranty|"
    r"shipping|privacy|refunds? after|restocking|guarantee|terms|procedure|process|eligible|document|"
    # A reason ("why", "what caused") is explained in the documents, not counted in the tables; so are
    # yes/no questions about the company's practice and rules of what must be done.
    r"why|how come|caus(e|es|ed|ing)|because|do you|do we offer|does the company|must|need to)\b",
    re.IGNORECASE,
)
# A part that leans on the part before it ("..., and why did they rise?") is searched with that part.
FOLLOW_UP = re.compile(r"^(why|how come)\b|\b(they|them|it|its|this|that|these|those|there)\b", re.IGNORECASE)
# Clause boundaries in compound questions: "X, and what does Y?" / "X; Y" / "X? Y".
SPLIT = re.compile(r"\?\s+|;\s+|,?\s+and\s+(?=(?:what|which|how|who|when|where|why|is|are|does|do|can)\b)", re.I)


# The question of each step a replan says already ran: `s1=consult_rag "refund policy"`.
DONE_TEXT = re.compile(r'=\w+ ("(?:[^"\\]|\\.)*")')


def covers(done_text: str, part: str) -> bool:
    """Whether a step that already ran on ``done_text`` looked up this part: all its key words are in the part."""
    words = {w for w in re.findall(r"[a-z0-9]+", done_text.lower()) if len(w) > 3}
    return bool(words) and words <= set(re.findall(r"[a-z0-9]+", part.lower()))


def split_question(question: str) -> list[str]:
    """Split a compound question into its parts (a simple question stays whole)."""
    parts = [p.strip(" ,.?") for p in SPLIT.split(question)]
    parts = [p for p in parts if len(p.split()) >= 3]
    return parts or [question.strip()]
