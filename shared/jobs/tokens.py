"""Token counting without a tokenizer: the estimate budgets use when a server reports no usage."""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimate tokens as ceil(characters / 4), the usual ratio for English text with GPT tokenizers."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0
