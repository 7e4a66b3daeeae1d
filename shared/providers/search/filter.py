"""The portable document filter both retrievers accept: ``doc:<doc-id prefix>`` and ``tag:<tag>`` terms.

Terms are separated by spaces or commas; a bare term is a doc-id prefix. Terms of one kind are OR-ed
and the two kinds AND-ed. Each retriever turns the parsed terms into its own query language.
"""

from __future__ import annotations

import re

from shared.jobs.contracts import ErrorCode, ProviderError

_TERM = re.compile(r"^(?:(doc|tag):)?(.+)$")
MAX_TERM_CHARS = 200


def split_filter_terms(text: str) -> tuple[list[str], list[str]]:
    """The doc-id prefixes and tags of a filter (lower-cased); a malformed term is INVALID_INPUT."""
    prefixes: list[str] = []
    tags: list[str] = []
    for term in re.split(r"[\s,]+", text.strip()):
        if not term:
            continue
        match = _TERM.match(term)
        kind, value = (match.group(1), match.group(2)) if match else (None, term)
        if value.startswith(("doc:", "tag:")) or ":" in value or len(value) > MAX_TERM_CHARS:
            raise ProviderError(
                ErrorCode.INVALID_INPUT, f"invalid filter term {term!r}: use doc:<doc-id prefix> or tag:<tag>"
            )
        if kind == "tag":
            tags.append(value.lower())
        else:
            prefixes.append(value.lower().lstrip("/"))
    return prefixes, tags
