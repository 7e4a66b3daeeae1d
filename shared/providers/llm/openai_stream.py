"""Streaming one text field out of a model's JSON reply as it arrives (the answer's text while it is written)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from shared.providers.interfaces import LLMRequest

if TYPE_CHECKING:
    pass


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class JsonTextFieldStream:
    """Feeds the decoded value of one top-level string field of a streamed JSON object to a sink.

    The scanner is incremental (each character is looked at once), so a growing answer reaches the
    user as prose, like the offline provider's, while the JSON is still parsed only once at the end.
    """

    def __init__(self, field: str, sink: Callable[[str], None]) -> None:
        """Stream the value of ``field`` to ``sink``."""
        self.field = field
        self.sink = sink
        self._depth = 0
        self._in_string = False
        self._escape = ""
        self._high_surrogate: int | None = None
        self._expect_key = False
        self._after_colon = False
        self._is_key = False
        self._emitting = False
        self._done = False
        self._key: list[str] = []
        self._current_key: str | None = None
        # The field's value is an object or array (an agent's output schema): its raw JSON text is passed on.
        self._raw_depth = 0
        self._raw_in_string = False
        self._raw_escape = False

    def feed(self, text: str) -> None:
        """Scan one raw delta and pass on any decoded text of the field."""
        out: list[str] = []
        for ch in text:
            if self._raw_depth:
                out.append(ch)
                self._raw_char(ch)
            else:
                self._scan(ch, out)
        if out:
            self.sink("".join(out))

    def _scan(self, ch: str, out: list[str]) -> None:
        """Follow the JSON structure by one character, decoding the field's text into ``out``."""
        if self._in_string:
            self._string_char(ch, out)
        elif ch == '"':
            self._in_string = True
            self._is_key = self._depth == 1 and self._expect_key
            self._emitting = not self._is_key and self._at_value()
            self._after_colon = False
            self._key = []
        elif ch in "{[":
            self._open(ch, out)
        elif ch in "}]":
            self._depth -= 1
        elif self._depth == 1 and ch == ",":
            self._expect_key = True
        elif self._depth == 1 and ch == ":":
            self._expect_key = False
            self._after_colon = True
        elif not ch.isspace():
            self._after_colon = False

    def _open(self, ch: str, out: list[str]) -> None:
        """An object or array starts: the field's own value (passed on raw), or structure to follow."""
        if self._at_value():
            self._raw_depth = 1
            out.append(ch)
            return
        self._depth += 1
        self._expect_key = ch == "{" and self._depth == 1
        self._after_colon = False

    def _at_value(self) -> bool:
        """Whether the scanner stands where the field's value starts."""
        return self._depth == 1 and self._after_colon and self._current_key == self.field and not self._done

    def _raw_char(self, ch: str) -> None:
        """Follow the raw value's strings and brackets, to see where it ends."""
        if self._raw_in_string:
            if self._raw_escape:
                self._raw_escape = False
            elif ch == "\\":
                self._raw_escape = True
            elif ch == '"':
                self._raw_in_string = False
        elif ch == '"':
            self._raw_in_string = True
        elif ch in "{[":
            self._raw_depth += 1
        elif ch in "}]":
            self._raw_depth -= 1
            if not self._raw_depth:
                self._done = True
                self._after_colon = False

    def _string_char(self, ch: str, out: list[str]) -> None:
        if self._escape:
            self._escape += ch
            if self._escape[1] == "u":
                if len(self._escape) < 6:
                    return
                try:
                    code = int(self._escape[2:], 16)
                except ValueError:
                    code = 0xFFFD
                self._escape = ""
                if 0xD800 <= code <= 0xDBFF:
                    self._high_surrogate = code
                    return
                if 0xDC00 <= code <= 0xDFFF and self._high_surrogate is not None:
                    code = 0x10000 + ((self._high_surrogate - 0xD800) << 10) + (code - 0xDC00)
                self._high_surrogate = None
                self._char(chr(code), out)
                return
            decoded = _ESCAPES.get(self._escape[1], self._escape[1])
            self._escape = ""
            self._char(decoded, out)
        elif ch == "\\":
            self._escape = ch
        elif ch == '"':
            self._in_string = False
            if self._is_key:
                self._current_key = "".join(self._key)
            elif self._emitting:
                self._emitting = False
                self._done = True
        else:
            self._char(ch, out)

    def _char(self, ch: str, out: list[str]) -> None:
        if self._is_key:
            self._key.append(ch)
        elif self._emitting:
            out.append(ch)


def stream_field(output_type: type[BaseModel]) -> str | None:
    """The field whose text is streamed: the first ``str`` field of the output type (None: none)."""
    for name, info in output_type.model_fields.items():
        if info.annotation is str:
            return name
    return None


def delta_sink(request: LLMRequest[Any], on_delta: Callable[[str], None]) -> Callable[[str], None]:
    """Where a streamed reply's chunks go: the text field's decoded deltas, or nowhere."""
    field = stream_field(request.output_type)
    if field is None:
        return on_delta
    return JsonTextFieldStream(field, on_delta).feed
