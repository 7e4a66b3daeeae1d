"""Lexical checks of the SQL guard, before parsing: the text between tokens (comments) and nesting depth.

See ``shared.runtime.sqlguard.bounds`` for the whole list of resource checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlglot.tokenizer_core import Token, TokenType

# sqlglot spends up to ~40 Python frames per nested level (measured: "(NOT (NOT ..." fails at 24 levels
# under the default recursion limit of 1000), so 20 leaves room for the caller's own stack. Real
# analytics queries nest 2-5 levels.
MAX_NESTING = 20


MAX_PREFIX_RUN = 32


class LimitError(Exception):
    """A resource check failed: ``reason`` is a GuardReason value, ``message`` names the cause."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def resource_error(message: str) -> LimitError:
    """A RESOURCE_LIMIT failure with this message."""
    return LimitError("RESOURCE_LIMIT", message)


_LINE_COMMENT_BAD = re.compile("[\v\f\x85\u2028\u2029]|\r(?!\n)")


def check_gaps(sql: str, tokens: list[Token]) -> None:
    """Reject text between tokens that is not plain whitespace or an unambiguous comment."""
    pos = 0
    for tok in tokens:
        if tok.start < pos:
            raise LimitError("PARSE_ERROR", "the SQL could not be read token by token")
        _check_gap(sql[pos : tok.start])
        pos = tok.end + 1
    _check_gap(sql[pos:])


def _check_gap(gap: str) -> None:
    i, n = 0, len(gap)
    while i < n:
        ch = gap[i]
        if ch in " \t\n\r":  # CR outside a comment is whitespace to every engine
            i += 1
        elif gap.startswith("--", i):
            end = gap.find("\n", i)
            end = n if end < 0 else end
            if _LINE_COMMENT_BAD.search(gap[i : end + 1]):  # the LF itself is included: CR LF is fine
                raise LimitError(
                    "AMBIGUOUS_COMMENT",
                    "a -- comment contains a line break other than LF (CR, VT, FF, NEL, U+2028 or U+2029); "
                    "engines disagree on where it ends",
                )
            i = end
        elif gap.startswith("/*", i):
            if gap.startswith(("/*!", "/*+"), i):
                raise LimitError("AMBIGUOUS_COMMENT", "/*! and /*+ comments are executable or hints in some engines")
            end = gap.find("*/", i + 2)
            if end < 0:
                raise LimitError("AMBIGUOUS_COMMENT", "a block comment is not closed")
            if "/*" in gap[i + 2 : end]:
                raise LimitError(
                    "AMBIGUOUS_COMMENT", "nested /* inside a block comment (T-SQL nests comments, SQLite does not)"
                )
            i = end + 2
        else:
            raise LimitError(
                "INVALID_CHARACTERS", f"unexpected character {ch!r} between tokens (only spaces, tabs and line feeds)"
            )


_PREFIX_TOKENS = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


def check_token_depth(tokens: Iterable[Token]) -> None:
    """Reject nesting deeper than the parser can take, before it recurses (see the module docstring)."""
    depth = run = 0
    for tok in tokens:
        kind = tok.token_type
        if kind in (TokenType.L_PAREN, TokenType.CASE):
            depth += 1
            if depth > MAX_NESTING:
                raise LimitError("TOO_DEEP", f"the SQL nests parentheses or CASE more than {MAX_NESTING} deep")
        elif kind in (TokenType.R_PAREN, TokenType.END):
            depth = max(0, depth - 1)
        run = run + 1 if kind in _PREFIX_TOKENS else 0
        if run > MAX_PREFIX_RUN:
            raise LimitError("TOO_DEEP", f"more than {MAX_PREFIX_RUN} prefix operators (NOT, -, +, ~) in a row")
