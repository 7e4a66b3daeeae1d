"""Azure AI Search: the index's field names and the OData filters this app builds and accepts."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.search.filter import split_filter_terms

if TYPE_CHECKING:
    pass


logger = logging.getLogger(__name__)

EmbedFn = Callable[[str], list[float]]
VectorMode = Literal["auto", "client", "integrated", "off"]

# Field names of the index this app creates (and expects when it queries).
KEY_FIELD = "id"
VECTOR_FIELD = "content_vector"
PREFIX_FIELD = "doc_prefixes"
TAGS_FIELD = "tags"
SELECT_FIELDS = ["id", "source_id", "doc_id", "title", "content", "path"]
VECTOR_PROFILE = "content-vector-profile"
HNSW_CONFIG = "content-hnsw"
VECTORIZER_NAME = "content-aoai-vectorizer"

# How many nearest neighbours the vector leg fetches before fusion (the service caps k at 1000 per
# query; 50 is what the semantic ranker reranks at most, so fetching more only costs latency).
VECTOR_K = 50
MAX_FILTER_LENGTH = 4_000
DEFAULT_TIMEOUT_S = 30.0
UPLOAD_BATCH_SIZE = 500
TITLES_TTL_S = 300.0

_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# --- OData filters -----------------------------------------------------------------------------


def odata_literal(value: str) -> str:
    """Quote a string as an OData literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _check_field(name: str) -> str:
    if not _FIELD_NAME.match(name):
        raise ProviderError(ErrorCode.INVALID_INPUT, f"not a valid index field name: {name!r}")
    return name


def odata_eq(field_name: str, value: str) -> str:
    """Build ``field eq 'value'`` with the value escaped."""
    return f"{_check_field(field_name)} eq {odata_literal(value)}"


def odata_in(field_name: str, values: Sequence[str]) -> str:
    """Build ``search.in(field, 'a|b', '|')``, the fast form of many ``eq`` joined by ``or``."""
    if not values:
        raise ProviderError(ErrorCode.INVALID_INPUT, "search.in needs at least one value")
    delimiter = next((d for d in ("|", ",", ";", "~", "^") if not any(d in v for v in values)), None)
    if delimiter is None:
        raise ProviderError(ErrorCode.INVALID_INPUT, "values contain every supported delimiter")
    joined = delimiter.join(values)
    return f"search.in({_check_field(field_name)}, {odata_literal(joined)}, {odata_literal(delimiter)})"


def validate_filter(expression: str | None) -> str | None:
    """Check a caller's OData filter before it is passed through (the service parses it for real).

    Rejects what can only be a mistake or an injection attempt: control characters, an unterminated
    string literal, unbalanced parentheses, and oversize input. Returns the stripped expression or
    ``None`` for an empty one.
    """
    if expression is None:
        return None
    text = expression.strip()
    if not text:
        return None
    if len(text) > MAX_FILTER_LENGTH:
        raise ProviderError(ErrorCode.INVALID_INPUT, f"filter is longer than {MAX_FILTER_LENGTH} characters")
    if _CONTROL_CHARS.search(text):
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter contains control characters")
    depth = 0
    in_string = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "'":
                if i + 1 < len(text) and text[i + 1] == "'":
                    i += 1  # an escaped quote inside the literal
                else:
                    in_string = False
        elif ch == "'":
            in_string = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unmatched ')'")
        i += 1
    if in_string:
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unterminated string literal")
    if depth != 0:
        raise ProviderError(ErrorCode.INVALID_INPUT, "filter has an unmatched '('")
    return text


_ODATA_HINT = re.compile(r"'|\(|\s(?:eq|ne|gt|ge|lt|le)\s")


def translate_filter(expression: str | None) -> str | None:
    """Turn the app's portable filter into OData, or pass an OData filter through after validation.

    The portable form is the local index's (``shared.providers.search.local``): space- or comma-separated terms,
    ``doc:<doc-id prefix>`` (or a bare term) and ``tag:<tag>``; terms of one kind are OR-ed, the two
    kinds AND-ed. A doc-id prefix matches at a folder boundary or the whole id (``policies``,
    ``policies/`` and ``policies/warranty.md`` all work), because the index stores those prefixes.
    Anything with quotes, parentheses or a comparison operator is taken as OData.
    """
    text = validate_filter(expression)
    if text is None or _ODATA_HINT.search(text):
        return text
    prefixes, tags = split_filter_terms(text)
    clauses = []
    if prefixes:
        clauses.append(f"{PREFIX_FIELD}/any(p: {odata_in('p', sorted(set(prefixes)))})")
    if tags:
        clauses.append(f"{TAGS_FIELD}/any(t: {odata_in('t', sorted(set(tags)))})")
    return " and ".join(clauses) or None


def doc_prefixes(doc_id: str) -> list[str]:
    """Every folder-boundary prefix of a doc id (with and without the slash) and the id itself."""
    parts = doc_id.strip("/").split("/")
    out: list[str] = []
    for i in range(1, len(parts)):
        head = "/".join(parts[:i])
        out += [head, head + "/"]
    out.append(doc_id.strip("/"))
    return list(dict.fromkeys(p.lower() for p in out))
