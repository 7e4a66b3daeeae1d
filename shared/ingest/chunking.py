"""Turn document text into titled sections and size-bounded, overlapping chunks.

Pure functions, no I/O: ``shared.ingest.pipeline`` reads files and calls these. Markdown is split at ATX
(``#``) and setext (``===``/``---``) headings; a chunk never spans two sections and records the
heading path of its section (``"Orders > Can I cancel?"``, H1 is the document title). Plain text and
PDF text are split at heading-like lines (short, unpunctuated lines such as ``GIFT CARDS``). Inside a
section, text is split into sentences and packed into chunks of at most ``max_chars`` characters;
each new chunk repeats the previous chunk's last sentence(s) up to ``overlap_chars`` so a fact that
straddles a boundary is still found whole.

``CHUNKER_VERSION`` is part of every index fingerprint: bump it whenever the output of this module
changes for the same input, so indexes are rebuilt and source ids stay consistent with content.

Every step runs in time linear in the input (documents are untrusted: 800 KB of ``[`` or one
heading line of ``#`` must not stall ingestion). Regexes here are written so that each character is
scanned a bounded number of times; ``tests/providers/search/local/test_chunking_linear.py`` guards that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CHUNKER_VERSION = "2"  # 2: link text may not contain brackets; linear-time parsing
DEFAULT_MAX_CHARS = 700
DEFAULT_OVERLAP_CHARS = 160

# The closing ``#`` run of an ATX heading is stripped in Python (``_atx_text``): a lazy group
# followed by ``\s*#*\s*$`` backtracks quadratically on a line of thousands of ``#``.
_ATX = re.compile(r"^(#{1,6})\s+(.*)$")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
# Link text holds no brackets and the target at most one level of balanced parentheses, so a
# scan stops at the next ``[`` or unbalanced ``(``: linear on ``[[[[`` or ``[a]([a]([a](``.
_LINK = re.compile(r"\[([^\[\]]+)\]\([^()]*(?:\([^()]*\)[^()]*)*\)")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_SPACES = re.compile(r"[ \t\u00a0]+")
# A sentence ends at . ! or ? (optionally followed by a quote or bracket) before whitespace and an
# upper-case letter, digit, quote, bracket or bullet.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[$-])")
_ABBREVIATIONS = frozenset(
    {"e.g.", "i.e.", "etc.", "co.", "inc.", "ltd.", "no.", "mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "a.m.", "p.m."}
    | {"u.s.", "approx.", "dept.", "fig.", "jan.", "feb.", "mar.", "apr.", "jun.", "jul.", "aug.", "sep.", "sept."}
    | {"oct.", "nov.", "dec."}
)
_WORD_WINDOW = 64


@dataclass
class Section:
    """A run of text under one heading path (empty heading: text before the first heading)."""

    heading: str
    paragraphs: list[str] = field(default_factory=list)
    page: int | None = None


@dataclass
class ParsedText:
    """A document's title, tags from front matter, and sections in order."""

    title: str | None
    sections: list[Section]
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TextChunk:
    """One chunk of a document before it gets ids: its section heading, text and page."""

    heading: str
    content: str
    page: int | None = None


def normalize_space(text: str) -> str:
    """Collapse runs of spaces and tabs and strip the ends."""
    return _SPACES.sub(" ", text).strip()


def _clean_inline(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _INLINE_CODE.sub(r"\1", text)
    return normalize_space(text)


def _atx_text(raw: str) -> str:
    """The text of an ATX heading without its optional closing ``#`` sequence."""
    return raw.rstrip().rstrip("#").rstrip()


def _parse_front_matter(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split ``---`` front matter (simple ``key: value`` lines) from the body."""
    if not lines or lines[0].strip() != "---":
        return {}, lines
    for end in range(1, min(len(lines), 60)):
        if lines[end].strip() in ("---", "..."):
            meta: dict[str, str] = {}
            for raw in lines[1:end]:
                key, sep, value = raw.partition(":")
                if sep and key.strip():
                    meta[key.strip().lower()] = value.strip()
            return meta, lines[end + 1 :]
    return {}, lines


def parse_tags(value: str) -> list[str]:
    """Parse ``a, b`` or ``[a, b]`` into normalised tags (lower case, spaces as hyphens)."""
    value = value.strip().strip("[]")
    tags = [re.sub(r"\s+", "-", t.strip().strip("'\"").lower()) for t in value.split(",")]
    return [t for t in tags if t]


def _paragraphs(lines: list[str], *, keep_bullets: bool) -> list[str]:
    """Join wrapped lines into paragraphs; list items become paragraphs of their own."""
    paragraphs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            text = _clean_inline(" ".join(current))
            if text:
                paragraphs.append(text)
            current.clear()

    for line in lines:
        if not line.strip():
            flush()
        elif keep_bullets and _BULLET.match(line):
            flush()
            current.append("- " + _BULLET.sub("", line, count=1))
        else:
            current.append(line.strip())
    flush()
    return paragraphs


def parse_markdown(text: str) -> ParsedText:
    """Parse markdown into title, tags and heading-delimited sections."""
    meta, lines = _parse_front_matter(text.splitlines())
    title: str | None = meta.get("title") or None
    tags = parse_tags(meta.get("tags", ""))
    stack: list[tuple[int, str]] = []  # (level, heading) for levels >= 2
    sections: list[Section] = []
    body: list[str] = []
    in_fence = False

    def flush(heading_path: str) -> None:
        paragraphs = _paragraphs(body, keep_bullets=True)
        if paragraphs:
            sections.append(Section(heading=heading_path, paragraphs=paragraphs))
        body.clear()

    def current_path() -> str:
        return " > ".join(h for _, h in stack)

    def open_heading(level: int, heading: str) -> None:
        nonlocal title
        flush(current_path())
        if level == 1:
            if title is None:
                title = heading
            stack.clear()
            return
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))

    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            body.append(line)
            i += 1
            continue
        atx = _ATX.match(line)
        if atx:
            open_heading(len(atx.group(1)), _clean_inline(_atx_text(atx.group(2))))
            i += 1
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        starts_block = not body or not body[-1].strip()
        if line.strip() and starts_block and not _BULLET.match(line) and _SETEXT.match(nxt):
            open_heading(1 if nxt.strip().startswith("=") else 2, _clean_inline(line))
            i += 2
            continue
        if not _RULE.match(line):
            body.append(line)
        i += 1
    flush(current_path())
    return ParsedText(title=title, sections=sections, tags=tags)


def is_heading_line(line: str, previous: str | None) -> bool:
    """Whether a plain-text line looks like a heading: short, unpunctuated, after a paragraph end."""
    text = line.strip()
    if not text or len(text) > 70 or len(text.split()) > 9:
        return False
    if text[-1] in ".,;:!?)\"'" or _BULLET.match(text):
        return False
    if not (text[0].isupper() or text[0].isdigit()):
        return False
    if previous is None:
        return True
    prev = previous.strip()
    return not prev or prev[-1] in ".!?:\"')"


def parse_plain(text: str, *, page_breaks: bool = False) -> ParsedText:
    """Parse plain text (or PDF text with form feeds between pages) into title and sections.

    The first non-empty line is the title. Later heading-like lines (see ``is_heading_line``) start
    new sections. With ``page_breaks``, ``\\f`` separates pages and sections record their page.
    """
    pages = text.split("\f") if page_breaks else [text]
    title: str | None = None
    sections: list[Section] = []
    heading = ""
    body: list[str] = []
    body_page: int | None = None

    def flush() -> None:
        paragraphs = _paragraphs(body, keep_bullets=True)
        if paragraphs:
            sections.append(Section(heading=heading, paragraphs=paragraphs, page=body_page))
        body.clear()

    for page_no, page_text in enumerate(pages, start=1):
        previous: str | None = None
        for raw in page_text.splitlines():
            line = normalize_space(raw)
            if title is None:
                if line:
                    title = line
                    previous = line + "."
                continue
            if line and is_heading_line(line, previous):
                flush()
                heading = line.capitalize() if line.isupper() else line
                previous = line  # so the line after a heading is never a heading itself
                continue
            if line and not body:
                body_page = page_no if page_breaks else None
            body.append(line)
            if line:
                previous = line
        if page_breaks:
            body.append("")  # a page break ends a paragraph
    flush()
    return ParsedText(title=title, sections=sections)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, keeping common abbreviations (``p.m.``, ``e.g.``) intact."""
    text = normalize_space(text)
    if not text:
        return []
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        # Look at the last word only: slicing text[start:] at each abbreviation ("A. A. A. ...")
        # would copy the whole pending sentence every time, which is quadratic.
        end = match.start()  # just after the . ! or ?
        # Abbreviations are short: a word longer than the window cannot be one, and the window
        # bounds the backwards search (whitespace other than " " stays in the text).
        window = max(start, end - _WORD_WINDOW)
        space = text.rfind(" ", window, end)
        if space < 0 and window > start:
            continue_sentence = False
        else:
            last_word = text[space + 1 if space >= 0 else start : end].lower().lstrip("(\"'")
            continue_sentence = last_word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", last_word) is not None
        if continue_sentence:
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def _hard_split(sentence: str, max_chars: int) -> list[str]:
    """Split an over-long sentence at word boundaries (or anywhere, for a single huge word)."""
    pieces: list[str] = []
    current = ""
    for word in sentence.split(" "):
        if len(word) > max_chars:
            if current:
                pieces.append(current)
            # Step through the word by index: re-slicing the remainder each time is quadratic.
            cut = len(word) - (len(word) - 1) % max_chars - 1
            pieces.extend(word[i : i + max_chars] for i in range(0, cut, max_chars))
            current, word = "", word[cut:]
        if current and len(current) + 1 + len(word) > max_chars:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces


def chunk_sections(
    sections: list[Section], *, max_chars: int = DEFAULT_MAX_CHARS, overlap_chars: int = DEFAULT_OVERLAP_CHARS
) -> list[TextChunk]:
    """Pack each section's sentences into chunks of at most ``max_chars``, with sentence overlap."""
    if max_chars < 50:
        raise ValueError("max_chars must be at least 50")
    if not 0 <= overlap_chars < max_chars // 2:
        raise ValueError("overlap_chars must be between 0 and max_chars / 2")
    chunks: list[TextChunk] = []
    for section in sections:
        # Units are (paragraph number, sentence) so paragraph breaks survive packing.
        units: list[tuple[int, str]] = []
        for p_no, paragraph in enumerate(section.paragraphs):
            for sentence in split_sentences(paragraph):
                units += [(p_no, piece) for piece in _hard_split(sentence, max_chars)]
        chunks.extend(TextChunk(section.heading, text, section.page) for text in _pack(units, max_chars, overlap_chars))
    return chunks


def _render(units: list[tuple[int, str]]) -> str:
    """Join units: a space inside a paragraph, a newline between paragraphs."""
    out: list[str] = []
    for idx, (p_no, sentence) in enumerate(units):
        if idx:
            out.append("\n" if p_no != units[idx - 1][0] else " ")
        out.append(sentence)
    return "".join(out)


def _pack(units: list[tuple[int, str]], max_chars: int, overlap_chars: int) -> list[str]:
    """Greedily pack units into chunks of at most ``max_chars``, each repeating a short overlap.

    Lengths are tracked as numbers (a rendered run of n units is its characters plus n - 1
    separators) so each unit costs O(1) plus the overlap walk, never a re-render of the chunk.
    """
    out: list[str] = []
    current: list[tuple[int, str]] = []
    chars = 0  # characters of the units in ``current``, separators not counted
    fresh = 0  # units in ``current`` that are not overlap from the previous chunk
    for unit in units:
        size = len(unit[1])
        if current and fresh and chars + size + len(current) > max_chars:
            out.append(_render(current))
            overlap: list[tuple[int, str]] = []
            ov_chars = 0
            for prev in reversed(current):
                with_prev = ov_chars + len(prev[1])
                # [prev, *overlap, unit] and [prev, *overlap] rendered: chars plus separators.
                if with_prev + size + len(overlap) + 1 > max_chars or with_prev + len(overlap) > overlap_chars:
                    break
                overlap.append(prev)
                ov_chars = with_prev
            overlap.reverse()
            current, chars, fresh = overlap, ov_chars, 0
        current.append(unit)
        chars += size
        fresh += 1
    if current and fresh:
        out.append(_render(current))
    return out
